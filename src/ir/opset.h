// The opsets onnxtrain knows.
#pragma once

namespace onnxtrain::ir {

// The newest opset of the default domain that onnxtrain knows (ONNX 1.19's): a model
// importing a later one may use ops whose meaning changed since, and is refused at load;
// every kernel and rule was checked against the opsets up to it.
inline constexpr int kNewestOnnxOpset = 24;

}  // namespace onnxtrain::ir
