// onnxtrain._C: gradient graphs (filled in by the autodiff work).
#include "bindings/bindings.h"

namespace onnxtrain::bindings {

void bind_autodiff(nanobind::module_& m) {}

}  // namespace onnxtrain::bindings
