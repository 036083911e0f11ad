// The types of the sequence and optional ops (src/ops/cpu/sequence.cc). A sequence's type is
// kSequence of shape []; what its tensors are is not tracked, so SequenceAt and
// ConcatFromSequence leave their outputs unknown.
#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

void sequence(ShapeContext& c) {
  for (size_t i = 0; i < c.output_count(); ++i) c.set(i, DType::kSequence, SymbolicShape{});
}

void scalar_of(ShapeContext& c, DType dtype) {
  c.set(0, dtype, SymbolicShape{});
}

// SequenceAt and ConcatFromSequence give a tensor of the sequence's element type, which the
// inference does not track: the output stays unknown.
void element_of_sequence(ShapeContext&) {}

// Optional(x) is x; Optional() without an input has no value to describe.
void optional(ShapeContext& c) {
  if (c.has_input(0)) c.set_like(0, 0);
}

const ShapeRuleRegistration kSequenceShapes{{
    {"SequenceEmpty", sequence},
    {"SequenceConstruct", sequence},
    {"SequenceInsert", sequence},
    {"SequenceErase", sequence},
    {"SplitToSequence", sequence},
    {"SequenceMap", sequence},
    {"SequenceAt", element_of_sequence},
    {"ConcatFromSequence", element_of_sequence},
    {"SequenceLength", [](ShapeContext& c) { scalar_of(c, DType::kInt64); }},
    {"Optional", optional},
    {"OptionalHasElement", [](ShapeContext& c) { scalar_of(c, DType::kBool); }},
    {"OptionalGetElement", same_as_input},
}};

}  // namespace
}  // namespace onnxtrain::ir
