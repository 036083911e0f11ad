// The Python extension onnxtrain._C. Thin: the Python package shapes the public API.
#include <nanobind/nanobind.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unordered_map.h>
#include <nanobind/stl/vector.h>
#include <omp.h>
#include <onnxtrain/inference_session.h>
#include <onnxtrain/shape_inference.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <string>

#include "bindings/bindings.h"
#include "bindings/tensor_conversion.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace onnxtrain::bindings {
namespace {

nb::dict metadata_dict(const ValueMetadata& m) {
  nb::dict d;
  d["name"] = m.name;
  d["dtype"] = static_cast<int>(m.dtype);
  d["element_dtype"] = static_cast<int>(m.element_dtype);
  d["optional"] = m.optional;
  if (m.has_shape) {
    nb::list shape;
    for (size_t i = 0; i < m.shape.size(); ++i) {
      if (m.shape[i] >= 0)
        shape.append(m.shape[i]);
      else if (!m.dim_names[i].empty())
        shape.append(m.dim_names[i]);
      else
        shape.append(nb::none());
    }
    d["shape"] = shape;
  } else {
    d["shape"] = nb::none();
  }
  return d;
}

}  // namespace

nb::list metadata_list(const std::vector<ValueMetadata>& values) {
  nb::list list;
  for (const auto& m : values) list.append(metadata_dict(m));
  return list;
}

namespace {

std::unique_ptr<InferenceSession> make_session(nb::object model, const SessionOptions& options) {
  return with_model_source(model,
                           [&](const auto& source) { return std::make_unique<InferenceSession>(source, options); });
}

// Runs the session on numpy feeds; `typed` names the feeds that hold the bits of a type numpy
// lacks (tensor_conversion.h). Returns the outputs as numpy arrays, and (index, ONNX dtype
// code) of those handed out as bits.
nb::tuple run_session(InferenceSession& session, const std::vector<std::string>& output_names, nb::dict feeds,
                      const TypedInputs& typed) {
  std::vector<HostArray> arrays;  // keeps the borrowed memory alive through the run
  const NamedTensors tensors = borrow_feeds(feeds, arrays, typed, &session.inputs());
  std::vector<Tensor> outputs;
  {
    nb::gil_scoped_release release;
    outputs = session.run(tensors, output_names);
  }
  nb::list result;
  nb::list typed_outputs;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const DType dtype = outputs[i].is_sequence() ? outputs[i].sequence().element_dtype : outputs[i].dtype();
    if (numpy_lacks(dtype)) typed_outputs.append(nb::make_tuple(i, static_cast<int>(dtype)));
    result.append(to_python(std::move(outputs[i])));
  }
  return nb::make_tuple(result, typed_outputs);
}

}  // namespace

void bind_inference(nb::module_& m) {
  nb::enum_<GraphOptimizationLevel>(m, "GraphOptimizationLevel")
      .value("ORT_DISABLE_ALL", GraphOptimizationLevel::kDisableAll)
      .value("ORT_ENABLE_BASIC", GraphOptimizationLevel::kBasic)
      .value("ORT_ENABLE_EXTENDED", GraphOptimizationLevel::kExtended)
      .value("ORT_ENABLE_ALL", GraphOptimizationLevel::kAll);
  // The C++ SessionOptions; Python's onnxtrain.SessionOptions checks its attributes and fills one.
  nb::class_<SessionOptions>(m, "NativeSessionOptions")
      .def(nb::init<>())
      .def_rw("intra_op_num_threads", &SessionOptions::intra_op_num_threads)
      .def_rw("graph_optimization_level", &SessionOptions::graph_optimization_level)
      .def_rw("optimized_model_filepath", &SessionOptions::optimized_model_filepath)
      .def_rw("enable_profiling", &SessionOptions::enable_profiling)
      .def_rw("profile_file_prefix", &SessionOptions::profile_file_prefix);

  nb::class_<InferenceSession>(m, "InferenceSession")
      .def(
          "__init__",
          [](InferenceSession* self, nb::object model, const SessionOptions& options) {
            new (self) InferenceSession(std::move(*make_session(std::move(model), options)));
          },
          "model"_a, "options"_a)
      .def("end_profiling", &InferenceSession::end_profiling)
      .def("run", &run_session, "output_names"_a, "feeds"_a, "typed_inputs"_a)
      .def("inputs", [](const InferenceSession& s) { return metadata_list(s.inputs()); })
      .def("outputs", [](const InferenceSession& s) { return metadata_list(s.outputs()); });

  m.def(
      "infer_types",
      [](nb::object model) {
        return metadata_list(with_model_source(model, [](const auto& source) { return infer_types(source); }));
      },
      "model"_a,
      "The element type and shape of every value of a serialized model (bytes) or a model file (path) whose "
      "type is known, as {name, dtype, shape} dicts.");
  m.def("supported_ops", [] {
    nb::list ops;
    for (const OpSupport& op : supported_ops()) {
      ops.append(nb::make_tuple(op.domain, op.op_type, op.since_version, op.until_version));
    }
    return ops;
  });
  // The OpenMP thread count a new parallel region of this thread would get: tests check that
  // a session leaves it as it was.
  m.def("_openmp_max_threads", [] { return omp_get_max_threads(); });
}

}  // namespace onnxtrain::bindings

namespace {

// Raises `type` with `message` decoded leniently: a model's names and attributes may hold
// invalid UTF-8, which would otherwise turn the real error into a UnicodeDecodeError.
void set_python_error(PyObject* type, const char* message) {
  PyObject* text = PyUnicode_DecodeUTF8(message, static_cast<Py_ssize_t>(std::strlen(message)), "replace");
  if (text == nullptr) {
    PyErr_SetString(type, "(an error whose message could not be decoded)");
    return;
  }
  PyErr_SetObject(type, text);
  Py_DECREF(text);
}

}  // namespace

NB_MODULE(_C, m) {
  m.doc() = "onnxtrain's C++ core";
  // Objects that are alive when the interpreter exits are not leaks here: torch's autograd
  // graph (an ORTModule's pending backward) and module globals may hold them until the end.
  nb::set_leak_warnings(false);

  static nb::object value_error = nb::module_::import_("builtins").attr("ValueError");
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const onnxtrain::Error& e) {
      set_python_error(e.kind() == onnxtrain::ErrorKind::kInvalidArgument ? value_error.ptr() : PyExc_RuntimeError,
                       e.what());
    } catch (const std::bad_alloc&) {
      PyErr_SetString(PyExc_MemoryError, "out of memory");
    } catch (const std::exception& e) {
      // Not an onnxtrain::Error: a check is missing somewhere. The message says so (the fuzzers
      // look for this prefix) instead of passing for a clean error.
      set_python_error(PyExc_RuntimeError, (std::string("internal error: ") + e.what()).c_str());
    }
  });

  onnxtrain::bindings::bind_inference(m);
  onnxtrain::bindings::bind_autodiff(m);
  onnxtrain::bindings::bind_checkpoint(m);
  onnxtrain::bindings::bind_artifacts(m);
  onnxtrain::bindings::bind_training(m);
  onnxtrain::bindings::bind_training_agent(m);
}
