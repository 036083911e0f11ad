// Shapes of the recurrent nets (src/ops/cpu/recurrent.cc): RNN, GRU, LSTM and their
// org.onnxtrain gradients.
#include <algorithm>

#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

// RNN, GRU, LSTM (X, W, R, ...) => (Y, Y_h[, Y_c]). With layout 0, X is [seq, batch, I],
// Y [seq, dirs, batch, H] and the states [dirs, batch, H]; layout 1 puts batch first:
// X [batch, seq, I], Y [batch, seq, dirs, H], states [batch, dirs, H]. `outputs`: the op's
// own (2 or 3).
void recurrent(ShapeContext& c, size_t outputs) {
  const DType dtype = c.dtype(0);
  const std::string direction = c.string_attribute("direction").value_or("forward");
  const Dim dirs = known(direction == "bidirectional" ? 2 : 1);
  Dim hidden;
  if (const auto h = c.int_attribute("hidden_size"); h && *h > 0) {
    hidden = known(*h);
  } else if (const SymbolicShape* r = c.shape(2); r && r->size() == 3) {
    hidden = (*r)[2];
  }
  const SymbolicShape* x = c.shape(0);
  const bool batch_first = c.int_attribute("layout").value_or(0) == 1;
  Dim seq, batch;
  if (x && x->size() == 3) {
    seq = (*x)[batch_first ? 1 : 0];
    batch = (*x)[batch_first ? 0 : 1];
  }
  const SymbolicShape y =
      batch_first ? SymbolicShape{batch, seq, dirs, hidden} : SymbolicShape{seq, dirs, batch, hidden};
  const SymbolicShape state = batch_first ? SymbolicShape{batch, dirs, hidden} : SymbolicShape{dirs, batch, hidden};
  for (size_t i = 0; i < std::min(c.output_count(), outputs); ++i) c.set(i, dtype, i == 0 ? y : state);
  // org.onnxtrain::{RNN,GRU,LSTM}Training: the record, [dirs, seq * batch * width]
  // (ops/cpu/recurrent.h's RecordLayout).
  if (c.output_count() > outputs) c.set(outputs, dtype, SymbolicShape{dirs, Dim{}});
}

void rnn(ShapeContext& c) {
  recurrent(c, 2);
}
void lstm(ShapeContext& c) {
  recurrent(c, 3);
}

// {RNN,GRU,LSTM}Grad (forward inputs..., dY, dY_h[, dY_c]) => (dX, dW, dR, dB, d initial_h
// [, d initial_c, dP]): each the shape of its forward input; dB is [dirs, 2 gates H] even
// when B was omitted.
void recurrent_grad(ShapeContext& c) {
  const DType dtype = c.dtype(0);
  const SymbolicShape* w = c.shape(1);
  std::optional<SymbolicShape> db;
  if (w && w->size() == 3) {
    Dim gh2;
    if ((*w)[1].value) gh2 = known(2 * *(*w)[1].value);
    db = SymbolicShape{(*w)[0], gh2};
  }
  for (size_t i = 0; i < c.output_count(); ++i) {
    if (i == 3) {
      c.set(i, dtype, db);
      continue;
    }
    const size_t input = i <= 2 ? i : i + 1;  // dX dW dR | dB | initial_h initial_c P
    if (c.shape(input)) {
      c.set_like(i, input);
    } else {
      c.set(i, dtype);
    }
  }
}

const ShapeRuleRegistration kRecurrentShapes{{{"RNN", rnn}, {"GRU", rnn}, {"LSTM", lstm}}};
const ShapeRuleRegistration kRecurrentTrainingShapes{
    {{"RNNTraining", rnn}, {"GRUTraining", rnn}, {"LSTMTraining", lstm}}, "org.onnxtrain"};
const ShapeRuleRegistration kRecurrentGradShapes{
    {{"RNNGrad", recurrent_grad}, {"GRUGrad", recurrent_grad}, {"LSTMGrad", recurrent_grad}}, "org.onnxtrain"};

}  // namespace
}  // namespace onnxtrain::ir
