// Each part of onnxtrain._C adds its functions and classes to the module here.
#pragma once

#include <nanobind/nanobind.h>

namespace onnxtrain::bindings {

void bind_inference(nanobind::module_& m);
void bind_autodiff(nanobind::module_& m);
void bind_checkpoint(nanobind::module_& m);
void bind_artifacts(nanobind::module_& m);
void bind_training(nanobind::module_& m);

}  // namespace onnxtrain::bindings
