// Lets a recurrent net's gradient read what its forward recorded, for the executor only.
//
// A training graph holds RNN, GRU or LSTM and its gradient org.onnxtrain::{RNN,GRU,LSTM}Grad
// (autodiff/rules/recurrent.cc), which reads the same inputs. Saved so, the artifacts keep
// the standard forward op (the eval model and an inference export run in any runtime), and
// the gradient runs the forward again to record each step's gates and states. Here, where
// both nodes run in the same graph, the forward becomes org.onnxtrain::{RNN,GRU,LSTM}Training
// (the same inputs, attributes and outputs, and the record as one more output,
// ops/cpu/recurrent.h's RecordLayout) and the gradient reads that record as its last input
// instead: one forward per training step, not two. The gradients are the same numbers: the
// record is what the gradient's own forward would compute. The nodes exist only inside the
// executor, never saved (but in optimized_model_filepath's model).
#pragma once

#include <cstddef>

#include "ir/graph.h"

namespace onnxtrain::passes {

// Rewrites each RNN, GRU and LSTM node of the main graph that some {RNN,GRU,LSTM}Grad node
// of the same graph differentiates (the same inputs and attributes). Returns their number.
size_t share_recurrent_record(ir::Model& model);

}  // namespace onnxtrain::passes
