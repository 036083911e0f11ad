// onnxtrain._C: CheckpointState and its files. Values cross as numpy arrays, copied both
// ways, so that an array handed out never changes under the caller while training runs.
#include <Python.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>
#include <onnxtrain/checkpoint.h>

#include "bindings/bindings.h"
#include "bindings/tensor_conversion.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace onnxtrain::bindings {
namespace {

// A value for `target`: of a type numpy lacks (bfloat16, float8, 4-bit), the array holds its
// bits (tensor_conversion.h).
Tensor value_for(const Tensor& target, const HostArray& array, const std::string& what) {
  return borrow_array(array, what, numpy_lacks(target.dtype()) ? target.dtype() : DType::kUndefined);
}

nb::object optional_numpy(const Tensor& tensor) {
  return tensor.defined() ? to_numpy(tensor.clone()) : nb::none();
}

nb::object property_to_python(const PropertyValue& value) {
  if (const auto* i = std::get_if<int64_t>(&value)) return nb::int_(*i);
  if (const auto* d = std::get_if<double>(&value)) return nb::float_(*d);
  return nb::str(std::get<std::string>(value).c_str(), std::get<std::string>(value).size());
}

PropertyValue property_from_python(const std::string& name, nb::handle value) {
  if (PyBool_Check(value.ptr()) || PyLong_Check(value.ptr())) {
    int overflow = 0;
    const long long i = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
    if (overflow != 0) {
      throw Error(
          "property '" + name + "': " + nb::cast<std::string>(nb::str(value)) + " does not fit a 64-bit integer",
          ErrorKind::kInvalidArgument);
    }
    return static_cast<int64_t>(i);
  }
  if (PyFloat_Check(value.ptr())) return PyFloat_AsDouble(value.ptr());
  if (nb::isinstance<nb::str>(value)) return nb::cast<std::string>(value);
  throw nb::type_error(("property '" + name + "': values are int, float or str, not " +
                        nb::cast<std::string>(nb::str(value.type().attr("__name__"))))
                           .c_str());
}

std::vector<std::string> parameter_names(const CheckpointState& state) {
  std::vector<std::string> names;
  for (const Parameter& p : state.parameters()) names.push_back(p.name);
  return names;
}

// (step, learning_rate, {parameter: {moment: array}}) or None.
nb::object optimizer_state_to_python(const CheckpointState& state) {
  if (!state.has_optimizer_state()) return nb::none();
  const OptimizerState& optimizer = state.optimizer_state();
  nb::dict moments;
  for (const auto& [parameter, slots] : optimizer.moments) {
    nb::dict named;
    for (const auto& [name, tensor] : slots) named[nb::str(name.c_str())] = to_numpy(tensor.clone());
    moments[nb::str(parameter.c_str())] = named;
  }
  return nb::make_tuple(optimizer.step, optimizer.learning_rate, moments);
}

void set_optimizer_state(CheckpointState& state, int64_t step, double learning_rate, nb::dict moments) {
  OptimizerState optimizer;
  optimizer.step = step;
  optimizer.learning_rate = learning_rate;
  for (auto [key, value] : moments) {
    const std::string parameter = nb::cast<std::string>(key);
    const Parameter& target = state.parameter(parameter);
    for (auto [moment, array] : nb::cast<nb::dict>(value)) {
      const std::string name = nb::cast<std::string>(moment);
      const std::string what = "optimizer moment '" + name + "' of '" + parameter + "'";
      const HostArray host = host_array(array, what);
      optimizer.moments[parameter][name] = value_for(target.data, host, what).clone();
    }
  }
  if (step < 0) throw Error("the optimizer step must not be negative", ErrorKind::kInvalidArgument);
  state.set_optimizer_state(std::move(optimizer));
}

CheckpointState from_model(nb::object model, const std::vector<std::string>& trainable,
                           const std::vector<std::string>& frozen) {
  if (nb::isinstance<nb::bytes>(model)) {
    auto bytes = nb::cast<nb::bytes>(model);
    std::span<const std::byte> span(static_cast<const std::byte*>(bytes.data()), bytes.size());
    nb::gil_scoped_release release;
    return checkpoint_from_model(span, trainable, frozen);
  }
  const auto path = nb::cast<std::filesystem::path>(model);
  nb::gil_scoped_release release;
  return checkpoint_from_model(path, trainable, frozen);
}

}  // namespace

void bind_checkpoint(nb::module_& m) {
  nb::class_<CheckpointState>(m, "CheckpointState")
      .def(nb::init<>())
      .def("parameter_names", &parameter_names)
      .def("has_parameter", &CheckpointState::has_parameter, "name"_a)
      .def(
          "add_parameter",
          [](CheckpointState& s, std::string name, const HostArray& array, bool requires_grad) {
            Tensor data = borrow_array(array, "parameter '" + name + "'").clone();
            s.add_parameter(std::move(name), std::move(data), requires_grad);
          },
          "name"_a, "data"_a, "requires_grad"_a = true)
      .def("parameter_data",
           [](const CheckpointState& s, std::string_view name) { return to_numpy(s.parameter(name).data.clone()); })
      .def(
          "set_parameter_data",
          [](CheckpointState& s, std::string_view name, const HostArray& array) {
            const Parameter& p = s.parameter(name);
            s.set_parameter_data(name, value_for(p.data, array, "parameter '" + p.name + "'"));
          },
          "name"_a, "value"_a)
      .def("parameter_grad",
           [](const CheckpointState& s, std::string_view name) { return optional_numpy(s.parameter(name).grad); })
      .def("parameter_requires_grad",
           [](const CheckpointState& s, std::string_view name) { return s.parameter(name).requires_grad; })
      .def("parameter_dtype", [](const CheckpointState& s,
                                 std::string_view name) { return static_cast<int>(s.parameter(name).data.dtype()); })
      .def("property_names",
           [](const CheckpointState& s) {
             std::vector<std::string> names;
             for (const auto& [name, value] : s.properties()) names.push_back(name);
             return names;
           })
      .def("has_property",
           [](const CheckpointState& s, std::string_view name) { return s.properties().contains(name); })
      .def("get_property",
           [](const CheckpointState& s, std::string_view name) {
             const auto it = s.properties().find(name);
             if (it == s.properties().end()) throw nb::key_error(std::string(name).c_str());
             return property_to_python(it->second);
           })
      .def(
          "set_property",
          [](CheckpointState& s, std::string name, nb::handle value) {
            PropertyValue converted = property_from_python(name, value);
            s.properties()[std::move(name)] = std::move(converted);
          },
          "name"_a, "value"_a.none())
      .def("remove_property",
           [](CheckpointState& s, std::string_view name) {
             const auto it = s.properties().find(name);
             if (it == s.properties().end()) throw nb::key_error(std::string(name).c_str());
             s.properties().erase(it);
           })
      .def("has_optimizer_state", &CheckpointState::has_optimizer_state)
      .def("optimizer_state", &optimizer_state_to_python,
           "(step, learning_rate, {parameter: {moment: array}}), or None")
      .def("set_optimizer_state", &set_optimizer_state, "step"_a, "learning_rate"_a, "moments"_a)
      .def("clear_optimizer_state", &CheckpointState::clear_optimizer_state)
      .def_prop_ro("is_nominal", &CheckpointState::is_nominal)
      .def_prop_rw("has_external_data", &CheckpointState::has_external_data, &CheckpointState::set_external_data);

  m.def(
      "load_checkpoint",
      [](const std::filesystem::path& path, bool verify) {
        nb::gil_scoped_release release;
        return load_checkpoint(path, verify);
      },
      "path"_a, "verify"_a = true);
  m.def(
      "save_checkpoint",
      [](const CheckpointState& state, const std::filesystem::path& path, bool include_optimizer_state,
         const std::string& format) {
        if (format != "onnxtrain" && format != "ort") {
          throw nb::value_error(("save_checkpoint: format must be 'onnxtrain' (safetensors) or 'ort' (the ODTC "
                                 "flatbuffer of onnxruntime-training), got '" +
                                 format + "'")
                                    .c_str());
        }
        nb::gil_scoped_release release;
        save_checkpoint(state, path, include_optimizer_state,
                        format == "ort" ? CheckpointFormat::kOrt : CheckpointFormat::kSafetensors);
      },
      "state"_a, "path"_a, "include_optimizer_state"_a = false, "format"_a = "onnxtrain");
  m.def(
      "save_nominal_checkpoint",
      [](const CheckpointState& state, const std::filesystem::path& path) {
        nb::gil_scoped_release release;
        save_nominal_checkpoint(state, path);
      },
      "state"_a, "path"_a);
  m.def("checkpoint_from_model", &from_model, "model"_a, "trainable"_a, "frozen"_a = std::vector<std::string>{},
        "A CheckpointState holding copies of the named initializers of a model (bytes or path).");
}

}  // namespace onnxtrain::bindings
