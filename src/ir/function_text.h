// Model-local functions written as text, so that every org.onnxtrain function body reads
// like the ONNX textual format:
//
//   ReluGrad (dY, Y) => (dX) {
//     zero_f = Constant <value_float = 0.0> ()
//     zero = CastLike (zero_f, dY)
//     positive = Greater (Y, zero)
//     dX = Where (positive, dY, zero)
//   }
//
// Grammar, one statement per line ('#' starts a comment):
//   header:  Name [<attr, attr, ...>] (input, ...) => (output, ...) {
//   node:    out[, out ...] = OpType [<attribute, ...>] (input, ...)
//   end:     }
// An input or output may be empty ("" is written as nothing between commas).
// Attributes: name = 1 | 1.5 | "text" | [1, 2] | [1.0, 2.0] | int64[2] {1, 2} (a tensor of
// float, double, int64, int32 or bool), or name: type = @caller_attribute (a reference to an
// attribute of the call; type is int, float, string, ints, floats or tensor).
#pragma once

#include <string_view>

#include "ir/graph.h"

namespace onnxtrain::ir {

// Parses one function; `domain` becomes its domain. Throws an Error naming the line on a
// syntax mistake (these texts are onnxtrain's own, so that is an internal bug).
Function parse_function(std::string_view text, std::string_view domain);

}  // namespace onnxtrain::ir
