// Each part of onnxtrain._C adds its functions and classes to the module here.
#pragma once

#include <nanobind/nanobind.h>
#include <onnxtrain/inference_session.h>

#include <vector>

namespace onnxtrain::bindings {

void bind_inference(nanobind::module_& m);
void bind_autodiff(nanobind::module_& m);
void bind_checkpoint(nanobind::module_& m);
void bind_artifacts(nanobind::module_& m);
void bind_training(nanobind::module_& m);
void bind_training_agent(nanobind::module_& m);

// A list of {name, dtype, shape} dicts, shape entries an int, a dimension name or None.
nanobind::list metadata_list(const std::vector<ValueMetadata>& values);

}  // namespace onnxtrain::bindings
