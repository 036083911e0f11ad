// Shapes of the signal ops (src/ops/cpu/signal.cc).
#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

// The one value of constant input i, when there is one.
std::optional<int64_t> constant_int(const ShapeContext& c, size_t i) {
  const auto v = c.ints(i);
  return v && v->size() == 1 ? std::optional((*v)[0]) : std::nullopt;
}

DType output_datatype(const ShapeContext& c) {
  return dtype_from_onnx(static_cast<int32_t>(c.int_attribute("output_datatype").value_or(1)));
}

// DFT (input, dft_length?, axis? (opset 20; the attribute before)) => the input with the
// signal axis of dft_length (or dft_length / 2 + 1 when onesided) and a last axis of 2.
void dft(ShapeContext& c) {
  const SymbolicShape* x = c.shape(0);
  if (!x || x->size() < 2) return c.set(0, c.dtype(0));
  const int64_t r = static_cast<int64_t>(x->size());
  std::optional<int64_t> axis = c.opset() >= 20 ? (c.has_input(2) ? constant_int(c, 2) : std::optional<int64_t>(-2))
                                                : c.int_attribute("axis").value_or(1);
  SymbolicShape out = *x;
  out.back() = known(2);
  if (!axis || *axis < -r || *axis >= r - 1) {
    for (size_t d = 0; d + 1 < out.size(); ++d) out[d] = Dim{};
    return c.set(0, c.dtype(0), out);
  }
  const size_t a = static_cast<size_t>(*axis < 0 ? *axis + r : *axis);
  std::optional<int64_t> n = (*x)[a].value;
  if (c.has_input(1)) n = constant_int(c, 1);
  const bool onesided = c.int_attribute("onesided").value_or(0) != 0;
  out[a] = n ? known(onesided ? *n / 2 + 1 : *n) : Dim{};
  c.set(0, c.dtype(0), out);
}

// STFT (signal [batch, length, 1|2], frame_step, window?, frame_length?) =>
// [batch, frames, bins, 2].
void stft(ShapeContext& c) {
  const SymbolicShape* x = c.shape(0);
  if (!x || x->size() != 3) return c.set(0, c.dtype(0));
  std::optional<int64_t> frame_length = constant_int(c, 3);
  if (!frame_length && c.has_input(2) && c.shape(2) && c.shape(2)->size() == 1) frame_length = (*c.shape(2))[0].value;
  const auto step = constant_int(c, 1);
  const auto length = (*x)[1].value;
  if (!c.has_input(2) && !c.has_input(3)) frame_length = length;  // one frame of the whole signal
  Dim frames, bins;
  if (frame_length && step && length && *step > 0 && *length >= *frame_length) {
    frames = known(1 + (*length - *frame_length) / *step);
  }
  if (frame_length) bins = known(c.int_attribute("onesided").value_or(1) ? *frame_length / 2 + 1 : *frame_length);
  c.set(0, c.dtype(0), SymbolicShape{(*x)[0], frames, bins, known(2)});
}

// The windows (size) => [size] of output_datatype.
void window(ShapeContext& c) {
  const auto size = constant_int(c, 0);
  c.set(0, output_datatype(c), SymbolicShape{size ? known(*size) : Dim{}});
}

// MelWeightMatrix => [dft_length / 2 + 1, num_mel_bins] of output_datatype.
void mel_weight_matrix(ShapeContext& c) {
  const auto bins = constant_int(c, 0), dft_length = constant_int(c, 1);
  c.set(0, output_datatype(c),
        SymbolicShape{dft_length ? known(*dft_length / 2 + 1) : Dim{}, bins ? known(*bins) : Dim{}});
}

const ShapeRuleRegistration kSignalShapes{{
    {"DFT", dft},
    {"STFT", stft},
    {"HannWindow", window},
    {"HammingWindow", window},
    {"BlackmanWindow", window},
    {"MelWeightMatrix", mel_weight_matrix},
}};

}  // namespace
}  // namespace onnxtrain::ir
