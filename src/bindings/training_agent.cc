// onnxtrain._C: TrainingAgent, forward and backward as two partial runs.
#include <nanobind/nanobind.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unordered_map.h>
#include <nanobind/stl/vector.h>
#include <onnxtrain/training_agent.h>

#include "bindings/bindings.h"
#include "bindings/tensor_conversion.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace onnxtrain::bindings {
namespace {

// A pending run: the engine's state, and the arrays its borrowed feeds point into (the
// backward may read them again).
struct PendingRun {
  std::shared_ptr<RunState> state;
  std::vector<HostArray> feeds;
};

nb::list hand_out(std::vector<Tensor> tensors, bool as_torch) {
  nb::list list;
  for (Tensor& t : tensors) list.append(as_torch ? to_torch(std::move(t)) : to_numpy(std::move(t)));
  return list;
}

// `threads` (when not 0) overrides the options' intra_op_num_threads.
TrainingAgent make_agent(nb::object model, std::vector<std::string> forward_outputs,
                         std::vector<std::string> backward_outputs, int threads,
                         const std::optional<SessionOptions>& session_options) {
  SessionOptions options = session_options.value_or(SessionOptions{});
  if (threads != 0 || !session_options) options.intra_op_num_threads = threads;
  return with_model_source(model, [&](const auto& source) {
    return TrainingAgent(source, std::move(forward_outputs), std::move(backward_outputs), options);
  });
}

}  // namespace

void bind_training_agent(nb::module_& m) {
  nb::class_<PendingRun>(m, "RunState")
      .def_prop_ro("backward_pending",
                   [](const PendingRun& run) { return run.state && TrainingAgent::backward_pending(*run.state); })
      .def("release", [](PendingRun& run) {
        run.state.reset();
        run.feeds.clear();
      });

  nb::class_<TrainingAgent>(m, "TrainingAgent")
      .def(
          "__init__",
          [](TrainingAgent* self, nb::object model, std::vector<std::string> forward_outputs,
             std::vector<std::string> backward_outputs, int threads, const std::optional<SessionOptions>& options) {
            new (self) TrainingAgent(make_agent(std::move(model), std::move(forward_outputs),
                                                std::move(backward_outputs), threads, options));
          },
          "model"_a, "forward_outputs"_a, "backward_outputs"_a, "intra_op_num_threads"_a = 0, "options"_a = nb::none())
      .def(
          "run_forward",
          [](TrainingAgent& agent, nb::dict feeds, bool as_torch, const TypedInputs& typed_inputs) {
            auto run = std::make_unique<PendingRun>();
            const NamedTensors tensors = borrow_feeds(feeds, run->feeds, typed_inputs);
            std::vector<Tensor> outputs;
            {
              nb::gil_scoped_release release;
              std::tie(outputs, run->state) = agent.run_forward(tensors);
            }
            nb::list out = hand_out(std::move(outputs), as_torch);
            return nb::make_tuple(out, nb::cast(run.release(), nb::rv_policy::take_ownership));
          },
          "feeds"_a, "as_torch"_a = false, "typed_inputs"_a = TypedInputs{})
      .def(
          "run_backward",
          [](TrainingAgent& agent, nb::dict output_grads, PendingRun& run, bool as_torch,
             const TypedInputs& typed_inputs) {
            if (!run.state) throw Error("run_backward: this run state was released", ErrorKind::kInvalidArgument);
            std::vector<HostArray> keep;
            const NamedTensors tensors = borrow_feeds(output_grads, keep, typed_inputs);
            std::vector<Tensor> grads;
            {
              nb::gil_scoped_release release;
              grads = agent.run_backward(tensors, *run.state);
            }
            run.state.reset();  // what the backward read is no longer needed
            run.feeds.clear();
            return hand_out(std::move(grads), as_torch);
          },
          "output_grads"_a, "state"_a, "as_torch"_a = false, "typed_inputs"_a = TypedInputs{})
      .def("end_profiling", &TrainingAgent::end_profiling)
      .def_prop_ro("forward_outputs", &TrainingAgent::forward_outputs)
      .def_prop_ro("backward_outputs", &TrainingAgent::backward_outputs)
      .def("inputs", [](const TrainingAgent& a) { return metadata_list(a.inputs()); })
      .def("outputs", [](const TrainingAgent& a) { return metadata_list(a.outputs()); });
}

}  // namespace onnxtrain::bindings
