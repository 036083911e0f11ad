// Shapes of NonMaxSuppression and RoiAlign (src/ops/cpu/detection.cc).
#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

// [selected, 3] int64: how many boxes survive is known only at run time.
void non_max_suppression(ShapeContext& c) {
  c.set(0, DType::kInt64, SymbolicShape{Dim{}, known(3)});
}

// Y [num_rois, C, output_height, output_width].
void roi_align(ShapeContext& c) {
  const SymbolicShape* x = c.shape(0);
  const SymbolicShape* rois = c.shape(1);
  SymbolicShape out{rois && rois->size() == 2 ? (*rois)[0] : Dim{}, x && x->size() == 4 ? (*x)[1] : Dim{},
                    known(c.int_attribute("output_height").value_or(1)),
                    known(c.int_attribute("output_width").value_or(1))};
  c.set(0, c.dtype(0), out);
}

const ShapeRuleRegistration kDetectionShapes{{{"NonMaxSuppression", non_max_suppression}, {"RoiAlign", roi_align}}};

}  // namespace
}  // namespace onnxtrain::ir
