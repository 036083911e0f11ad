// onnxruntime-training 1.19.2 compatibility: the FlatBuffers reader/writer and the ODTC
// checkpoint (src/training/flatbuffer.h, ort_checkpoint.h) and the shape rules of the
// com.microsoft ops (src/ir/shape_inference.cc). The files ORT itself wrote are tested from
// Python (tests/python/training/test_ort_migration.py).
#include <gtest/gtest.h>

#include "ir/onnx_io.h"
#include "ir/shape_inference.h"
#include "test_util.h"
#include "training/flatbuffer.h"
#include "training/ort_checkpoint.h"

namespace onnxtrain {
namespace {

using namespace onnxtrain::testing;

std::span<const std::byte> span_of(const std::vector<std::byte>& bytes) {
  return bytes;
}

template <typename T>
std::vector<T> values(const Tensor& t) {
  const auto v = t.values<T>();
  return {v.begin(), v.end()};
}

TEST(FlatBuffer, WritesWhatItReads) {
  flatbuffer::Writer out("TEST");
  flatbuffer::Writer::TableFields fields;
  fields.scalar<int32_t>(0, 7);
  fields.offset(1);
  fields.scalar<int64_t>(2, -5);
  fields.offset(3);
  const auto root = out.table(fields);
  out.set_root(root.position);
  out.set_offset(root.slot[1], out.string("hello"));
  const int64_t values[] = {3, 1, 4};
  out.set_offset(root.slot[3], out.scalars(values, 3, sizeof(int64_t)));

  const flatbuffer::Reader in(span_of(out.bytes()), "buffer");
  const flatbuffer::Table t = in.root("TEST");
  EXPECT_EQ(in.scalar<int32_t>(t, 0, 0), 7);
  EXPECT_EQ(in.string(t, 1, "a string"), "hello");
  EXPECT_EQ(in.scalar<int64_t>(t, 2, 0), -5);
  const flatbuffer::Vector v = in.vector(t, 3, 8, "a vector");
  ASSERT_EQ(v.size, 3u);
  EXPECT_EQ(v.data % 8, 0u);  // 8-byte elements are 8-aligned, as the flatbuffers verifier wants
  EXPECT_EQ(in.scalar_at<int64_t>(v, 2), 4);
  EXPECT_FALSE(in.has(t, 4));
  EXPECT_EQ(in.scalar<int32_t>(t, 9, 42), 42);  // beyond the vtable: the default
}

TEST(FlatBuffer, RefusesTruncationsAndAWrongIdentifier) {
  flatbuffer::Writer out("TEST");
  flatbuffer::Writer::TableFields fields;
  fields.offset(0);
  const auto root = out.table(fields);
  out.set_root(root.position);
  out.set_offset(root.slot[0], out.string("a longer string"));
  const std::vector<std::byte>& bytes = out.bytes();
  for (size_t n = 0; n < bytes.size(); ++n) {
    const flatbuffer::Reader in(span_of(bytes).first(n), "truncated");
    EXPECT_THROW((void)in.string(in.root("TEST"), 0, "a string"), Error) << n << " bytes";
  }
  const flatbuffer::Reader in(span_of(bytes), "buffer");
  EXPECT_THROW(in.root("ODTC"), Error);
}

TEST(OrtCheckpoint, RoundTripsParametersOptimizerStateAndProperties) {
  CheckpointState state;
  state.add_parameter("w", Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6}), true);
  state.add_parameter("b", Tensor::from_vector<float>({3}, {7, 8, 9}), true);
  state.add_parameter("count", Tensor::from_vector<int64_t>({1}, {11}), false);
  OptimizerState optimizer{4, 0.5, {}};
  optimizer.moments["w"]["exp_avg"] = Tensor::from_vector<float>({2, 3}, {1, 1, 1, 1, 1, 1});
  optimizer.moments["w"]["exp_avg_sq"] = Tensor::from_vector<float>({2, 3}, {2, 2, 2, 2, 2, 2});
  state.set_optimizer_state(optimizer);
  state.properties()["epoch"] = int64_t{3};
  state.properties()["loss"] = 0.25;
  state.properties()["note"] = std::string("text");
  const auto path = std::filesystem::temp_directory_path() / "onnxtrain_ort_checkpoint_test";
  save_checkpoint(state, path, true, CheckpointFormat::kOrt);
  const CheckpointState again = load_checkpoint(path);
  std::filesystem::remove(path);

  EXPECT_EQ(values<float>(again.parameter("w").data), values<float>(state.parameter("w").data));
  EXPECT_TRUE(again.parameter("b").requires_grad);
  EXPECT_FALSE(again.parameter("count").requires_grad);
  EXPECT_EQ(values<int64_t>(again.parameter("count").data), std::vector<int64_t>{11});
  const OptimizerState& o = again.optimizer_state();
  EXPECT_EQ(o.step, 4);
  EXPECT_DOUBLE_EQ(o.learning_rate, 0.5);
  // ORT's slot names; a parameter without moments gets the zero "momentum0" ORT expects.
  EXPECT_EQ(values<float>(o.moments.at("w").at("momentum1")), std::vector<float>(6, 2.0f));
  EXPECT_EQ(values<float>(o.moments.at("b").at("momentum0")), std::vector<float>(3, 0.0f));
  EXPECT_EQ(std::get<int64_t>(again.properties().at("epoch")), 3);
  EXPECT_DOUBLE_EQ(std::get<double>(again.properties().at("loss")), 0.25);
  EXPECT_EQ(std::get<std::string>(again.properties().at("note")), "text");
}

std::string text(const ir::ValueType& t) {
  std::string s(dtype_name(t.dtype));
  if (!t.shape) return s + "[?]";
  s += "[";
  for (size_t i = 0; i < t.shape->size(); ++i) {
    const ir::Dim& d = (*t.shape)[i];
    s += (i ? "," : "") + (d.value ? std::to_string(*d.value) : d.param.empty() ? "?" : d.param);
  }
  return s + "]";
}

onnx::NodeProto microsoft(const std::string& op, std::vector<std::string> inputs, std::vector<std::string> outputs) {
  onnx::NodeProto n = node(op, std::move(inputs), std::move(outputs));
  n.set_domain("com.microsoft");
  return n;
}

TEST(ShapeInference, KnowsTheComMicrosoftTrainingOps) {
  onnx::ModelProto m = model(17);
  auto* ms = m.add_opset_import();
  ms->set_domain("com.microsoft");
  ms->set_version(1);
  auto* g = m.mutable_graph();
  *g->add_input() = tensor_value("x", 1, {"batch", "3", "8"});
  *g->add_input() = tensor_value("w", 1, {"5", "8"});
  *g->add_input() = tensor_value("scale", 1, {"8"});
  *g->add_input() = tensor_value("stat", 1, {"batch", "3", "1"});
  *g->add_input() = tensor_value("img", 1, {"2", "4", "6", "6"});
  *g->add_input() = tensor_value("k", 1, {"3", "4", "3", "3"});
  *g->add_input() = tensor_value("dimg", 1, {"2", "3", "6", "6"});
  onnx::NodeProto mm = microsoft("FusedMatMul", {"x", "w"}, {"xw"});
  auto* tb = mm.add_attribute();
  tb->set_name("transB");
  tb->set_type(onnx::AttributeProto::INT);
  tb->set_i(1);
  *g->add_node() = mm;
  *g->add_node() = microsoft("ReluGrad", {"x", "x"}, {"relu_grad"});
  *g->add_node() = microsoft("LayerNormalizationGrad", {"x", "x", "scale", "stat", "stat"}, {"dx", "dscale", "db"});
  *g->add_node() = microsoft("ConvGrad", {"dimg", "img", "k"}, {"dimg_x", "dk", "dkb"});
  *g->add_output() = tensor_value("xw", 1, {});
  g->mutable_output(0)->mutable_type()->mutable_tensor_type()->clear_shape();

  const auto types = ir::infer_types(ir::load_model(as_span(bytes_of(m))));
  EXPECT_EQ(text(types.at("xw")), "float[batch,3,5]");
  EXPECT_EQ(text(types.at("relu_grad")), "float[batch,3,8]");
  EXPECT_EQ(text(types.at("dx")), "float[batch,3,8]");
  EXPECT_EQ(text(types.at("dscale")), "float[8]");
  EXPECT_EQ(text(types.at("dimg_x")), "float[2,4,6,6]");
  EXPECT_EQ(text(types.at("dk")), "float[3,4,3,3]");
  EXPECT_EQ(text(types.at("dkb")), "float[3]");
}

}  // namespace
}  // namespace onnxtrain
