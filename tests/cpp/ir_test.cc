#include <gtest/gtest.h>

#include <filesystem>

#include "ir/onnx_io.h"
#include "test_util.h"

namespace onnxtrain {
namespace {

using namespace onnxtrain::testing;
namespace fs = std::filesystem;

onnx::ModelProto rich_model() {
  onnx::ModelProto m = model();
  m.set_producer_name("test");
  m.set_doc_string("a model with a bit of everything");
  auto* meta = m.add_metadata_props();
  meta->set_key("author");
  meta->set_value("onnxtrain");
  auto* g = m.mutable_graph();
  *g->add_input() = tensor_value("x", 1, {"batch", "4"});
  *g->add_output() = tensor_value("y", 1, {"batch", "4"});
  *g->add_value_info() = tensor_value("t", 1, {"batch", "4"});
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(1);
  w->add_dims(4);
  const float values[4] = {1, 2, 3, 4};
  w->set_raw_data(values, sizeof values);
  onnx::NodeProto call = node("AddRelu", {"x", "w"}, {"t"}, "call");
  call.set_domain("local");
  *g->add_node() = call;
  onnx::NodeProto scale = node("Mul", {"t", "t"}, {"y"}, "square");
  auto* a = scale.add_attribute();  // unused by Mul: only here to round-trip every kind
  a->set_name("note");
  a->set_type(onnx::AttributeProto::STRINGS);
  a->add_strings("kept");
  *g->add_node() = scale;

  auto* f = m.add_functions();
  f->set_name("AddRelu");
  f->set_domain("local");
  f->add_input("a");
  f->add_input("b");
  f->add_output("c");
  *f->add_node() = node("Add", {"a", "b"}, {"s"});
  *f->add_node() = node("Relu", {"s"}, {"c"});
  auto* fo = f->add_opset_import();
  fo->set_domain("");
  fo->set_version(17);
  auto* lo = m.add_opset_import();
  lo->set_domain("local");
  lo->set_version(1);
  return m;
}

TEST(OnnxIO, SavesBackWhatItLoaded) {
  const onnx::ModelProto original = rich_model();
  const std::string bytes = bytes_of(original);
  const ir::Model loaded = ir::load_model(as_span(bytes));
  // ONNX's schema is lite (no reflection): compare the canonical serializations.
  EXPECT_EQ(ir::serialize_model(loaded), bytes);
}

TEST(OnnxIO, ExternalDataRoundTrip) {
  const fs::path dir = fs::temp_directory_path() / "onnxtrain_external_data_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  ir::Model m = ir::load_model(as_span(bytes_of(rich_model())));
  ir::save_model(m, dir / "model.onnx", {.external_data_threshold = 1});
  ASSERT_TRUE(fs::exists(dir / "model.onnx.data"));
  const ir::Model back = ir::load_model(dir / "model.onnx");
  const Tensor* w = back.graph.initializer("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(std::vector<float>(w->values<float>().begin(), w->values<float>().end()), (std::vector<float>{1, 2, 3, 4}));
  // A truncated data file is refused with the tensor's and the file's names.
  fs::resize_file(dir / "model.onnx.data", 8);
  try {
    ir::load_model(dir / "model.onnx");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'w'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("too short"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(OnnxIO, RejectsTruncatedAndCorruptBytes) {
  const std::string bytes = bytes_of(rich_model());
  for (size_t cut : {size_t{1}, bytes.size() / 2, bytes.size() - 1}) {
    const std::string truncated = bytes.substr(0, cut);
    EXPECT_THROW(ir::load_model(as_span(truncated)), Error) << "cut at " << cut;
  }
  EXPECT_THROW(ir::load_model(as_span(std::string("\xff\xff\xff\xff garbage", 12))), Error);
  EXPECT_THROW(ir::load_model(fs::path("/nonexistent/model.onnx")), Error);
}

TEST(OnnxIO, RejectsRawDataOfTheWrongSize) {
  onnx::ModelProto m = rich_model();
  m.mutable_graph()->mutable_initializer(0)->set_raw_data("abc");
  try {
    ir::load_model(as_span(bytes_of(m)));
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'w'"), std::string::npos) << e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidModel);
  }
}

TEST(Graph, TopologicalOrderSortsAndFindsCycles) {
  onnx::ModelProto m = model();
  auto* g = m.mutable_graph();
  *g->add_input() = tensor_value("x", 1, {"2"});
  *g->add_node() = node("Relu", {"a"}, {"b"}, "second");
  *g->add_node() = node("Relu", {"x"}, {"a"}, "first");
  ir::Model loaded = ir::load_model(as_span(bytes_of(m)));
  EXPECT_EQ(ir::topological_order(loaded.graph), (std::vector<size_t>{1, 0}));

  loaded.graph.nodes[1].inputs[0] = "b";  // first <- second <- first
  EXPECT_THROW(ir::topological_order(loaded.graph), Error);
  loaded.graph.nodes[1].inputs[0] = "nowhere";
  try {
    ir::topological_order(loaded.graph);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'nowhere'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace onnxtrain
