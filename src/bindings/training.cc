// onnxtrain._C: Module, Optimizer and LinearLRScheduler. Inputs arrive as any C-contiguous
// CPU array that numpy or DLPack describes (numpy, torch, onnxtrain.OrtValue) and are read
// in place; outputs leave as numpy arrays that own the engine's buffers (no copy), which the
// Python layer hands on as torch tensors or OrtValues, again without copying.
#include <nanobind/nanobind.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <onnxtrain/training.h>

#include "bindings/bindings.h"
#include "bindings/tensor_conversion.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace onnxtrain::bindings {
namespace {

// Runs `step` on the borrowed inputs with the GIL released; returns numpy arrays.
template <typename Step>
nb::list run_with_arrays(const nb::list& inputs, const std::vector<std::string>& names, Step step) {
  std::vector<HostArray> arrays;  // keep the borrowed memory alive through the run
  std::vector<Tensor> tensors;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string what = "input '" + (i < names.size() ? names[i] : std::to_string(i)) + "'";
    HostArray array = host_array(inputs[i], what);
    tensors.push_back(borrow_array(array, what));
    arrays.push_back(std::move(array));
  }
  std::vector<Tensor> outputs;
  {
    nb::gil_scoped_release release;
    outputs = step(tensors);
  }
  nb::list result;
  for (Tensor& t : outputs) result.append(to_numpy(std::move(t)));
  return result;
}

Tensor borrow_buffer(nb::handle buffer) {
  return borrow_array(host_array(buffer, "copy_buffer_to_parameters"), "copy_buffer_to_parameters");
}

}  // namespace

void bind_training(nb::module_& m) {
  nb::class_<Module>(m, "Module")
      .def(
          "__init__",
          [](Module* self, const std::filesystem::path& train, CheckpointState& state,
             const std::filesystem::path& eval, const SessionOptions& options) {
            nb::gil_scoped_release release;
            new (self) Module(train, state, eval, options);
          },
          "train_model"_a, "state"_a, "eval_model"_a, "options"_a, nb::keep_alive<1, 3>())
      .def("train_step",
           [](Module& module, const nb::list& inputs) {
             return run_with_arrays(inputs, module.input_names(true),
                                    [&](const std::vector<Tensor>& t) { return module.train_step(t); });
           })
      .def("eval_step",
           [](Module& module, const nb::list& inputs) {
             const auto names = module.has_eval_model() ? module.input_names(false) : std::vector<std::string>{};
             return run_with_arrays(inputs, names, [&](const std::vector<Tensor>& t) { return module.eval_step(t); });
           })
      .def("lazy_reset_grad", &Module::lazy_reset_grad)
      .def("has_gradients", &Module::has_gradients)
      .def("has_eval_model", &Module::has_eval_model)
      .def("input_names", &Module::input_names, "training"_a)
      .def("output_names", &Module::output_names, "training"_a)
      .def("parameters_size", &Module::parameters_size, "trainable_only"_a)
      .def(
          "contiguous_parameters",
          [](const Module& module, bool trainable_only) {
            return to_numpy(module.contiguous_parameters(trainable_only));
          },
          "trainable_only"_a)
      .def(
          "copy_buffer_to_parameters",
          [](Module& module, nb::handle buffer, bool trainable_only) {
            module.copy_buffer_to_parameters(borrow_buffer(buffer), trainable_only);
          },
          "buffer"_a, "trainable_only"_a)
      .def(
          "export_model_for_inferencing",
          [](const Module& module, const std::filesystem::path& path, const std::vector<std::string>& outputs) {
            nb::gil_scoped_release release;
            module.export_model_for_inferencing(path, outputs);
          },
          "path"_a, "graph_output_names"_a);

  nb::class_<Optimizer>(m, "Optimizer")
      .def(
          "__init__",
          [](Optimizer* self, const std::filesystem::path& path, Module& module) {
            nb::gil_scoped_release release;
            new (self) Optimizer(path, module);
          },
          "optimizer_model"_a, "module"_a, nb::keep_alive<1, 3>())
      .def("step",
           [](Optimizer& optimizer) {
             nb::gil_scoped_release release;
             optimizer.step();
           })
      .def("set_learning_rate", &Optimizer::set_learning_rate, "learning_rate"_a)
      .def("learning_rate", &Optimizer::learning_rate)
      .def("step_count", &Optimizer::step_count);

  nb::class_<LinearLRScheduler>(m, "LinearLRScheduler")
      .def(nb::init<Optimizer&, int64_t, int64_t, double>(), "optimizer"_a, "warmup_step_count"_a, "total_step_count"_a,
           "initial_lr"_a, nb::keep_alive<1, 2>())
      .def("step", &LinearLRScheduler::step)
      .def("learning_rate", &LinearLRScheduler::learning_rate);
}

}  // namespace onnxtrain::bindings
