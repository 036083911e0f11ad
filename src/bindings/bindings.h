// Each part of onnxtrain._C adds its functions and classes to the module here.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/stl/filesystem.h>
#include <onnxtrain/inference_session.h>

#include <cstddef>
#include <filesystem>
#include <span>
#include <vector>

namespace onnxtrain::bindings {

void bind_inference(nanobind::module_& m);
void bind_autodiff(nanobind::module_& m);
void bind_checkpoint(nanobind::module_& m);
void bind_artifacts(nanobind::module_& m);
void bind_training(nanobind::module_& m);
void bind_training_agent(nanobind::module_& m);

// make(bytes) for a bytes object, make(path) for a path, run without the GIL: how the
// bindings load a model that Python passes either way.
template <typename Make>
auto with_model_source(nanobind::handle model, Make&& make) {
  if (nanobind::isinstance<nanobind::bytes>(model)) {
    auto bytes = nanobind::cast<nanobind::bytes>(model);
    const std::span<const std::byte> span(static_cast<const std::byte*>(bytes.data()), bytes.size());
    nanobind::gil_scoped_release release;
    return make(span);
  }
  const auto path = nanobind::cast<std::filesystem::path>(model);
  nanobind::gil_scoped_release release;
  return make(path);
}

// A list of {name, dtype, shape} dicts, shape entries an int, a dimension name or None.
nanobind::list metadata_list(const std::vector<ValueMetadata>& values);

}  // namespace onnxtrain::bindings
