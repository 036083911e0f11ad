#include <gtest/gtest.h>
#include <onnxtrain/checkpoint.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include "core/file.h"
#include "test_util.h"
#include "training/safetensors.h"

namespace onnxtrain {
namespace {

namespace fs = std::filesystem;
using namespace onnxtrain::testing;

// A fresh folder per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() / ("onnxtrain-ckpt-" + std::string(test->test_suite_name()) + "-" + test->name() +
                                         "-" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  fs::path operator/(const std::string& name) const { return path_ / name; }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// A tensor whose bytes are a recognizable pattern (valid for every element type).
Tensor patterned(DType dtype, Shape shape, uint8_t seed) {
  Tensor t = Tensor::empty(dtype, std::move(shape));
  auto* bytes = static_cast<uint8_t*>(t.raw_data());
  for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<uint8_t>(seed + 7 * i);
  if (dtype == DType::kBool) {
    for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] &= 1;
  }
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  fs::remove(path);  // truncating a file in place makes ext4 flush it: slow
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A safetensors file from a header (as given, unpadded) and data bytes.
std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

// Runs `load` and returns the Error's message (failing when nothing is thrown).
template <typename F>
std::string error_of(F&& load) {
  try {
    load();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no Error thrown";
  return {};
}

CheckpointState small_state() {
  CheckpointState state;
  state.add_parameter("fc1.weight", Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6}), true);
  state.add_parameter("fc1.bias", Tensor::from_vector<float>({3}, {0.5f, -0.5f, 0.25f}), true);
  state.add_parameter("steps", Tensor::from_vector<int64_t>({1}, {42}), false);
  return state;
}

TEST(CheckpointState, AddsFindsAndChecksParameters) {
  CheckpointState state = small_state();
  ASSERT_EQ(state.parameters().size(), 3u);
  EXPECT_EQ(state.parameters()[0].name, "fc1.weight");
  EXPECT_TRUE(state.has_parameter("fc1.bias"));
  EXPECT_EQ(state.find_parameter("nope"), nullptr);
  EXPECT_FALSE(state.parameter("fc1.bias").grad.defined());
  EXPECT_THROW(state.parameter("nope"), Error);
  EXPECT_THROW(state.add_parameter("fc1.bias", Tensor::zeros(DType::kFloat32, {3}), true), Error);
  EXPECT_THROW(state.add_parameter("", Tensor::zeros(DType::kFloat32, {3}), true), Error);
  EXPECT_THROW(state.add_parameter("ids", Tensor::zeros(DType::kInt64, {3}), true), Error);

  Tensor* bound = &state.parameter("fc1.bias").data;
  const void* buffer = bound->raw_data();
  state.set_parameter_data("fc1.bias", Tensor::from_vector<float>({3}, {7, 8, 9}));
  EXPECT_EQ(bound->raw_data(), buffer);  // in place: bound sessions see the new values
  EXPECT_EQ(bound->values<float>()[2], 9.0f);

  const std::string wrong_shape = error_of([&] {
    state.set_parameter_data("fc1.weight", Tensor::zeros(DType::kFloat32, {3, 2}));
  });
  EXPECT_NE(wrong_shape.find("'fc1.weight'"), std::string::npos) << wrong_shape;
  EXPECT_NE(wrong_shape.find("[2, 3]"), std::string::npos) << wrong_shape;
  const std::string wrong_dtype = error_of([&] {
    state.set_parameter_data("fc1.weight", Tensor::zeros(DType::kFloat64, {2, 3}));
  });
  EXPECT_NE(wrong_dtype.find("float"), std::string::npos) << wrong_dtype;

  OptimizerState optimizer;
  optimizer.moments["unknown"]["momentum"] = Tensor::zeros(DType::kFloat32, {3});
  EXPECT_THROW(state.set_optimizer_state(optimizer), Error);
  EXPECT_THROW(state.optimizer_state(), Error);
}

TEST(CheckpointFile, RoundTripsEveryElementType) {
  const TempDir dir;
  const DType dtypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,     DType::kInt8,
                          DType::kInt16,   DType::kInt32,   DType::kInt64,   DType::kUInt8,        DType::kUInt16,
                          DType::kUInt32,  DType::kUInt64,  DType::kBool,    DType::kFloat8E4M3FN, DType::kFloat8E5M2};
  CheckpointState state;
  uint8_t seed = 1;
  for (DType dtype : dtypes) {
    const std::string name = "p." + std::string(dtype_name(dtype));
    state.add_parameter(name, patterned(dtype, {3, 5}, seed++), is_floating(dtype));
  }
  state.add_parameter("scalar", Tensor::scalar<float>(3.5f), true);
  state.add_parameter("empty", Tensor::zeros(DType::kFloat32, {0, 4}), false);

  save_checkpoint(state, dir / "ckpt");
  const CheckpointState back = load_checkpoint(dir / "ckpt");
  ASSERT_EQ(back.parameters().size(), state.parameters().size());
  for (size_t i = 0; i < state.parameters().size(); ++i) {
    const Parameter& want = state.parameters()[i];
    const Parameter& got = back.parameters()[i];
    EXPECT_EQ(got.name, want.name);  // order kept
    EXPECT_EQ(got.requires_grad, want.requires_grad) << want.name;
    EXPECT_TRUE(same_bytes(got.data, want.data)) << want.name;
    EXPECT_FALSE(got.grad.defined());
  }
  EXPECT_FALSE(back.is_nominal());
  EXPECT_FALSE(back.has_optimizer_state());

  // Each tensor's data is aligned to its element size, as the reference writer does.
  const safetensors::Header header = safetensors::read_header(dir / "ckpt");
  EXPECT_EQ(header.data_start % 8, 0u);
  for (const auto& t : header.tensors) EXPECT_EQ(t.begin % dtype_size(t.dtype), 0u) << t.name;
  EXPECT_EQ(header.metadata.at("format"), "pt");
}

TEST(CheckpointFile, GradientsAreNotSaved) {
  const TempDir dir;
  CheckpointState state = small_state();
  state.parameter("fc1.bias").grad = Tensor::from_vector<float>({3}, {1, 1, 1});
  save_checkpoint(state, dir / "ckpt");
  EXPECT_FALSE(load_checkpoint(dir / "ckpt").parameter("fc1.bias").grad.defined());
  EXPECT_EQ(safetensors::read_header(dir / "ckpt").tensors.size(), 3u);
}

TEST(CheckpointFile, RoundTripsOptimizerStateAndProperties) {
  const TempDir dir;
  CheckpointState state = small_state();
  OptimizerState optimizer;
  optimizer.step = 17;
  optimizer.learning_rate = 1e-3 / 3;
  optimizer.moments["fc1.weight"]["exp_avg"] = patterned(DType::kFloat32, {2, 3}, 3);
  optimizer.moments["fc1.weight"]["exp_avg_sq"] = patterned(DType::kFloat32, {2, 3}, 9);
  optimizer.moments["fc1.bias"]["exp_avg"] = patterned(DType::kFloat32, {3}, 5);
  state.set_optimizer_state(optimizer);
  auto& properties = state.properties();
  properties["epoch"] = int64_t{3};
  properties["min"] = std::numeric_limits<int64_t>::min();
  properties["max"] = std::numeric_limits<int64_t>::max();
  properties["loss"] = 0.1;
  properties["tiny"] = 5e-324;
  properties["inf"] = -std::numeric_limits<double>::infinity();
  properties["nan"] = std::numeric_limits<double>::quiet_NaN();
  properties["name"] = std::string("résumé \"quoted\"\n");
  properties[""] = std::string();

  save_checkpoint(state, dir / "without");
  const CheckpointState without = load_checkpoint(dir / "without");
  EXPECT_FALSE(without.has_optimizer_state());
  EXPECT_EQ(without.properties().size(), properties.size());

  save_checkpoint(state, dir / "with", /*include_optimizer_state=*/true);
  const CheckpointState back = load_checkpoint(dir / "with");
  ASSERT_TRUE(back.has_optimizer_state());
  const OptimizerState& got = back.optimizer_state();
  EXPECT_EQ(got.step, 17);
  EXPECT_EQ(got.learning_rate, optimizer.learning_rate);  // bit for bit
  ASSERT_EQ(got.moments.size(), 2u);
  EXPECT_TRUE(same_bytes(got.moments.at("fc1.weight").at("exp_avg_sq"), optimizer.moments["fc1.weight"]["exp_avg_sq"]));
  EXPECT_TRUE(same_bytes(got.moments.at("fc1.bias").at("exp_avg"), optimizer.moments["fc1.bias"]["exp_avg"]));
  EXPECT_EQ(back.parameters().size(), 3u);  // moments are not parameters

  const Properties& p = back.properties();
  ASSERT_EQ(p.size(), properties.size());
  EXPECT_EQ(std::get<int64_t>(p.at("epoch")), 3);
  EXPECT_EQ(std::get<int64_t>(p.at("min")), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(std::get<int64_t>(p.at("max")), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(std::get<double>(p.at("loss")), 0.1);
  EXPECT_EQ(std::get<double>(p.at("tiny")), 5e-324);
  EXPECT_EQ(std::get<double>(p.at("inf")), -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(std::get<double>(p.at("nan"))));
  EXPECT_EQ(std::get<std::string>(p.at("name")), "résumé \"quoted\"\n");
  EXPECT_EQ(std::get<std::string>(p.at("")), "");

  // Moments sit under prefixed names beside the parameters.
  std::set<std::string> names;
  for (const auto& t : safetensors::read_header(dir / "with").tensors) names.insert(t.name);
  EXPECT_TRUE(names.contains("fc1.weight"));
  EXPECT_TRUE(names.contains("optimizer/fc1.weight/exp_avg"));
  EXPECT_TRUE(names.contains("optimizer/fc1.bias/exp_avg"));
}

TEST(CheckpointFile, ParameterNamesWithSlashesAndUnicodeRoundTrip) {
  const TempDir dir;
  CheckpointState state;
  state.add_parameter("/encoder/layer.0/w", Tensor::from_vector<float>({2}, {1, 2}), true);
  state.add_parameter("onnx::MatMul_12", Tensor::from_vector<float>({2}, {3, 4}), true);
  state.add_parameter("gewicht_ü", Tensor::from_vector<float>({1}, {5}), false);
  OptimizerState optimizer;
  optimizer.moments["/encoder/layer.0/w"]["momentum"] = Tensor::from_vector<float>({2}, {9, 9});
  state.set_optimizer_state(optimizer);
  save_checkpoint(state, dir / "ckpt", true);
  const CheckpointState back = load_checkpoint(dir / "ckpt");
  EXPECT_EQ(back.parameters()[0].name, "/encoder/layer.0/w");
  EXPECT_EQ(back.parameters()[2].name, "gewicht_ü");
  EXPECT_EQ(back.optimizer_state().moments.at("/encoder/layer.0/w").at("momentum").values<float>()[1], 9.0f);

  // A parameter whose name collides with a moment's stored name is refused, not clobbered.
  state.add_parameter("optimizer//encoder/layer.0/w/momentum", Tensor::from_vector<float>({1}, {0}), false);
  const std::string message = error_of([&] { save_checkpoint(state, dir / "clash", true); });
  EXPECT_NE(message.find("momentum"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(dir / "clash"));
}

TEST(CheckpointFile, NominalCheckpointHoldsNoData) {
  const TempDir dir;
  CheckpointState state = small_state();
  state.parameters()[0].data = patterned(DType::kFloat32, {512, 512}, 1);  // 1 MB that must not be written
  state.properties()["epoch"] = int64_t{2};
  save_nominal_checkpoint(state, dir / "nominal");
  EXPECT_LT(fs::file_size(dir / "nominal"), 4096u);
  EXPECT_TRUE(safetensors::read_header(dir / "nominal").tensors.empty());

  const CheckpointState back = load_checkpoint(dir / "nominal");
  EXPECT_TRUE(back.is_nominal());
  ASSERT_EQ(back.parameters().size(), 3u);
  const Parameter& w = back.parameter("fc1.weight");
  EXPECT_EQ(w.data.shape(), (Shape{512, 512}));
  EXPECT_EQ(w.data.dtype(), DType::kFloat32);
  EXPECT_TRUE(w.requires_grad);
  EXPECT_EQ(w.data.values<float>()[1000], 0.0f);
  EXPECT_EQ(back.parameter("steps").data.dtype(), DType::kInt64);
  EXPECT_FALSE(back.parameter("steps").requires_grad);
  EXPECT_EQ(std::get<int64_t>(back.properties().at("epoch")), 2);
}

TEST(CheckpointFile, SavingReplacesTheFileOnlyWhenComplete) {
  const TempDir dir;
  CheckpointState state = small_state();
  save_checkpoint(state, dir / "ckpt");
  state.parameters()[1].data = Tensor();  // a save that fails half way through preparing
  EXPECT_THROW(save_checkpoint(state, dir / "ckpt"), Error);
  EXPECT_EQ(load_checkpoint(dir / "ckpt").parameter("fc1.bias").data.values<float>()[0], 0.5f);
  size_t files = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, 1u);  // no temporary file left behind
  EXPECT_THROW(save_checkpoint(small_state(), dir / "missing-folder" / "ckpt"), Error);
}

TEST(CheckpointFormat, WritesWhatTheReferenceImplementationWrites) {
  // The expected bytes of safetensors' own serialization test (tensor.rs, test_serialization).
  const TempDir dir;
  const std::vector<std::pair<std::string, Tensor>> tensors = {
      {"attn.0", Tensor::from_vector<float>({1, 2, 3}, {0, 1, 2, 3, 4, 5})}};
  safetensors::write(dir / "ref", tensors, {});
  const std::string header = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  std::string data(24, '\0');
  const float values[6] = {0, 1, 2, 3, 4, 5};
  std::memcpy(data.data(), values, 24);
  EXPECT_EQ(read_file(dir / "ref"), safetensors_bytes(header, data));
}

TEST(CheckpointFormat, ReadsPlainSafetensorsAsParameters) {
  const TempDir dir;
  std::string data(16 + 4, '\0');
  const int64_t ids[2] = {7, -7};
  const float w = 1.5f;
  std::memcpy(data.data(), ids, 16);
  std::memcpy(data.data() + 16, &w, 4);
  write_bytes(dir / "plain.safetensors", safetensors_bytes(R"({"__metadata__":{"format":"pt"},)"
                                                           R"("ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},)"
                                                           R"("w":{"dtype":"F32","shape":[],"data_offsets":[16,20]}})",
                                                           data));
  const CheckpointState state = load_checkpoint(dir / "plain.safetensors");
  ASSERT_EQ(state.parameters().size(), 2u);
  EXPECT_EQ(state.parameters()[0].name, "ids");
  EXPECT_FALSE(state.parameter("ids").requires_grad);
  EXPECT_EQ(state.parameter("ids").data.values<int64_t>()[1], -7);
  EXPECT_TRUE(state.parameter("w").requires_grad);
  EXPECT_EQ(state.parameter("w").data.item_as_double(), 1.5);
}

TEST(CheckpointFormat, RefusesEveryTruncation) {
  const TempDir dir;
  CheckpointState state = small_state();
  state.properties()["epoch"] = int64_t{1};
  save_checkpoint(state, dir / "ckpt");
  const std::string bytes = read_file(dir / "ckpt");
  const fs::path cut = dir / "cut";
  for (size_t size = 0; size < bytes.size(); ++size) {
    write_bytes(cut, bytes.substr(0, size));
    const std::string message = error_of([&] { load_checkpoint(cut); });
    EXPECT_NE(message.find(cut.string()), std::string::npos) << size << ": " << message;
  }
  // And a file with bytes after the last tensor.
  write_bytes(cut, bytes + "x");
  const std::string message = error_of([&] { load_checkpoint(cut); });
  EXPECT_NE(message.find("after the last tensor"), std::string::npos) << message;
}

struct BadFile {
  const char* what;
  std::string bytes;
  const char* expected;  // a piece of the message
};

TEST(CheckpointFormat, RefusesCorruptHeadersAndWrongOffsets) {
  const TempDir dir;
  const std::string data(24, '\0');
  auto one = [](const std::string& entry) { return R"({"t":)" + entry + "}"; };
  std::string huge(8, '\xff');
  const BadFile cases[] = {
      {"not JSON", safetensors_bytes("{\"t\": [1, 2", data), "not valid JSON"},
      {"not an object", safetensors_bytes("[1, 2, 3]", data), "not a JSON object"},
      {"NUL padding", safetensors_bytes(std::string("{}\0\0\0\0\0\0", 8), ""), "NUL"},
      {"header length past the end", huge + "{}", "100 MB"},
      {"header longer than the file", safetensors_bytes("{}", "").substr(0, 8) + "{", "truncated"},
      {"unknown dtype", safetensors_bytes(one(R"({"dtype":"F33","shape":[6],"data_offsets":[0,24]})"), data), "F33"},
      {"complex", safetensors_bytes(one(R"({"dtype":"C64","shape":[3],"data_offsets":[0,24]})"), data), "C64"},
      {"negative dim", safetensors_bytes(one(R"({"dtype":"F32","shape":[-6],"data_offsets":[0,24]})"), data), "shape"},
      {"no offsets", safetensors_bytes(one(R"({"dtype":"F32","shape":[6]})"), data), "data_offsets"},
      {"wrong byte count", safetensors_bytes(one(R"({"dtype":"F32","shape":[5],"data_offsets":[0,24]})"), data),
       "needs 20"},
      {"past the end", safetensors_bytes(one(R"({"dtype":"F32","shape":[8],"data_offsets":[0,32]})"), data),
       "past the end"},
      {"reversed", safetensors_bytes(one(R"({"dtype":"F32","shape":[0],"data_offsets":[24,0]})"), data), "end before"},
      {"hole", safetensors_bytes(one(R"({"dtype":"F32","shape":[4],"data_offsets":[8,24]})"), data), "hole"},
      {"overlap",
       safetensors_bytes(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                         R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                         data),
       "overlap"},
      {"duplicate name",
       safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("a":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                         data),
       "twice"},
      {"metadata not strings",
       safetensors_bytes(R"({"__metadata__":{"n":1},"t":{"dtype":"U8","shape":[24],"data_offsets":[0,24]}})", data),
       "__metadata__"},
      {"onnxtrain metadata not JSON",
       safetensors_bytes(
           R"({"__metadata__":{"onnxtrain":"{oops"},"t":{"dtype":"U8","shape":[24],"data_offsets":[0,24]}})", data),
       "onnxtrain metadata"},
      {"parameter without tensor",
       safetensors_bytes(
           R"({"__metadata__":{"onnxtrain":"{\"version\":1,\"nominal\":false,\"parameters\":[{\"name\":\"w\",\"requires_grad\":true}]}"},)"
           R"("t":{"dtype":"U8","shape":[24],"data_offsets":[0,24]}})",
           data),
       "'w'"},
      {"stray tensor",
       safetensors_bytes(R"({"__metadata__":{"onnxtrain":"{\"version\":1,\"nominal\":false,\"parameters\":[]}"},)"
                         R"("t":{"dtype":"U8","shape":[24],"data_offsets":[0,24]}})",
                         data),
       "neither a parameter"},
      {"newer format",
       safetensors_bytes(R"({"__metadata__":{"onnxtrain":"{\"version\":99,\"nominal\":false,\"parameters\":[]}"}})",
                         ""),
       "newer"},
  };
  const fs::path path = dir / "bad";
  for (const BadFile& bad : cases) {
    write_bytes(path, bad.bytes);
    const std::string message = error_of([&] { load_checkpoint(path); });
    EXPECT_NE(message.find(path.string()), std::string::npos) << bad.what << ": " << message;
    EXPECT_NE(message.find(bad.expected), std::string::npos) << bad.what << ": " << message;
  }
  // Errors about one tensor name it.
  write_bytes(path, safetensors_bytes(one(R"({"dtype":"F32","shape":[5],"data_offsets":[0,24]})"), data));
  EXPECT_NE(error_of([&] { load_checkpoint(path); }).find("tensor 't'"), std::string::npos);
  EXPECT_NE(error_of([&] { load_checkpoint(dir / "does-not-exist"); }).find("does-not-exist"), std::string::npos);
}

onnx::ModelProto model_with_initializers() {
  onnx::ModelProto m = model();
  auto* g = m.mutable_graph();
  *g->add_input() = tensor_value("x", 1, {"2"});
  *g->add_output() = tensor_value("y", 1, {"2"});
  auto add = [&](const std::string& name, int type, const void* bytes, size_t size, int64_t dim) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(type);
    t->add_dims(dim);
    t->set_raw_data(bytes, size);
  };
  const float w[2] = {1, 2}, b[2] = {3, 4};
  const int64_t shape[1] = {2};
  add("w", 1, w, sizeof w, 2);
  add("shape", 7, shape, sizeof shape, 1);
  add("b", 1, b, sizeof b, 2);
  *g->add_node() = node("Mul", {"x", "w"}, {"xw"});
  *g->add_node() = node("Add", {"xw", "b"}, {"y"});
  return m;
}

TEST(CheckpointFromModel, TakesTheNamedInitializersInModelOrder) {
  const std::string bytes = bytes_of(model_with_initializers());
  const std::vector<std::string> trainable = {"b", "w"}, frozen = {"shape"};
  const CheckpointState state = checkpoint_from_model(as_span(bytes), trainable, frozen);
  ASSERT_EQ(state.parameters().size(), 3u);
  EXPECT_EQ(state.parameters()[0].name, "w");
  EXPECT_EQ(state.parameters()[1].name, "shape");
  EXPECT_EQ(state.parameters()[2].name, "b");
  EXPECT_TRUE(state.parameter("w").requires_grad);
  EXPECT_FALSE(state.parameter("shape").requires_grad);
  EXPECT_EQ(state.parameter("b").data.values<float>()[1], 4.0f);

  const std::vector<std::string> only_w = {"w"}, none;
  EXPECT_EQ(checkpoint_from_model(as_span(bytes), only_w, none).parameters().size(), 1u);  // the rest stay constants
  const std::vector<std::string> missing = {"w", "nope"}, ints = {"shape"};
  EXPECT_NE(error_of([&] { checkpoint_from_model(as_span(bytes), missing, none); }).find("'nope'"), std::string::npos);
  EXPECT_NE(error_of([&] { checkpoint_from_model(as_span(bytes), only_w, only_w); }).find("both"), std::string::npos);
  EXPECT_NE(error_of([&] { checkpoint_from_model(as_span(bytes), ints, none); }).find("'shape'"), std::string::npos);
}

}  // namespace
}  // namespace onnxtrain
