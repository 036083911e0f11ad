#include "training/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "core/file.h"
#include "core/json.h"

namespace onnxtrain::safetensors {
namespace fs = std::filesystem;
using json = nlohmann::json;

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian bytes; onnxtrain reads and writes them as they lie in memory");

namespace {

constexpr std::string_view kMetadataKey = "__metadata__";
// pread/write move at most this much per call (Linux moves at most ~2 GB anyway).
constexpr size_t kMaxIoChunk = size_t{1} << 30;

struct DTypeCode {
  DType dtype;
  std::string_view code;
};

constexpr std::array<DTypeCode, 15> kDTypeCodes = {{
    {DType::kBool, "BOOL"},
    {DType::kUInt8, "U8"},
    {DType::kInt8, "I8"},
    {DType::kInt16, "I16"},
    {DType::kUInt16, "U16"},
    {DType::kFloat16, "F16"},
    {DType::kBFloat16, "BF16"},
    {DType::kInt32, "I32"},
    {DType::kUInt32, "U32"},
    {DType::kFloat32, "F32"},
    {DType::kFloat64, "F64"},
    {DType::kInt64, "I64"},
    {DType::kUInt64, "U64"},
    {DType::kFloat8E4M3FN, "F8_E4M3"},
    {DType::kFloat8E5M2, "F8_E5M2"},
}};

std::string known_codes() {
  std::string text;
  for (const DTypeCode& c : kDTypeCodes) text += (text.empty() ? "" : ", ") + std::string(c.code);
  return text;
}

// Every format problem reads "safetensors file '<path>': <what>".
[[noreturn]] void fail(const fs::path& path, const std::string& what) {
  throw Error("safetensors file '" + path.string() + "': " + what, ErrorKind::kIO);
}

[[noreturn]] void fail_tensor(const fs::path& path, const std::string& name, const std::string& what) {
  fail(path, "tensor '" + name + "': " + what);
}

std::string range_string(uint64_t begin, uint64_t end) {
  std::string text(1, '[');
  text += std::to_string(begin);
  text += ", ";
  text += std::to_string(end);
  return text + "]";
}

class InputFile {
 public:
  explicit InputFile(const fs::path& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw Error("cannot open '" + path.string() + "': " + std::strerror(errno), ErrorKind::kIO);
    struct stat info {};
    if (::fstat(fd_, &info) != 0 || !S_ISREG(info.st_mode)) {
      ::close(fd_);
      throw Error("cannot read '" + path.string() + "': not a regular file", ErrorKind::kIO);
    }
    size_ = static_cast<uint64_t>(info.st_size);
  }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile() { ::close(fd_); }

  uint64_t size() const noexcept { return size_; }

  void read_at(uint64_t offset, void* out, size_t bytes) const {
    auto* cursor = static_cast<char*>(out);
    while (bytes > 0) {
      const ssize_t n = ::pread(fd_, cursor, std::min(bytes, kMaxIoChunk), static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw Error("cannot read '" + path_.string() + "': " + std::strerror(errno), ErrorKind::kIO);
      if (n == 0) fail(path_, "the file ended early (it changed while being read?)");
      cursor += n;
      offset += static_cast<uint64_t>(n);
      bytes -= static_cast<size_t>(n);
    }
  }

 private:
  fs::path path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

class OutputFile {
 public:
  OutputFile(const fs::path& path, const fs::path& destination) : destination_(destination) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail_io();
  }
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile() {
    if (fd_ >= 0) ::close(fd_);
  }

  void write(const void* data, size_t bytes) {
    const auto* cursor = static_cast<const char*>(data);
    while (bytes > 0) {
      const ssize_t n = ::write(fd_, cursor, std::min(bytes, kMaxIoChunk));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail_io();
      cursor += n;
      bytes -= static_cast<size_t>(n);
    }
  }

  void close() {
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) fail_io();
  }

 private:
  [[noreturn]] void fail_io() const {
    throw Error("cannot write '" + destination_.string() + "': " + std::strerror(errno), ErrorKind::kIO);
  }

  fs::path destination_;
  int fd_ = -1;
};

uint64_t read_unsigned(const fs::path& path, const std::string& name, const json& value, const char* field) {
  if (!value.is_number_unsigned()) {
    fail_tensor(path, name, std::string(field) + " must hold non-negative integers, got " + value.dump());
  }
  return value.get<uint64_t>();
}

TensorInfo parse_entry(const fs::path& path, const std::string& name, const json& entry) {
  if (!entry.is_object()) fail_tensor(path, name, "expected an object with dtype, shape and data_offsets");
  TensorInfo info;
  info.name = name;

  const auto dtype = entry.find("dtype");
  if (dtype == entry.end() || !dtype->is_string()) fail_tensor(path, name, "no \"dtype\" string");
  const auto& code = dtype->get_ref<const std::string&>();
  info.dtype = dtype_from_code(code);
  if (info.dtype == DType::kUndefined) {
    fail_tensor(path, name, "dtype '" + code + "' is unknown or unsupported (onnxtrain reads " + known_codes() + ")");
  }

  const auto shape = entry.find("shape");
  if (shape == entry.end() || !shape->is_array()) fail_tensor(path, name, "no \"shape\" array");
  for (const json& d : *shape) {
    const uint64_t dim = read_unsigned(path, name, d, "shape");
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail_tensor(path, name, "shape dimension " + std::to_string(dim) + " is too large");
    }
    info.shape.push_back(static_cast<int64_t>(dim));
  }

  const auto offsets = entry.find("data_offsets");
  if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2) {
    fail_tensor(path, name, "no \"data_offsets\" pair [begin, end]");
  }
  info.begin = read_unsigned(path, name, (*offsets)[0], "data_offsets");
  info.end = read_unsigned(path, name, (*offsets)[1], "data_offsets");
  return info;
}

// shape x dtype size in bytes; false on overflow.
bool byte_count(const TensorInfo& info, uint64_t& bytes) {
  uint64_t n = dtype_size(info.dtype);
  for (int64_t d : info.shape) {
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  }
  bytes = n;
  return true;
}

// The byte ranges must tile [0, data_bytes) exactly, each as long as its shape needs.
void check_layout(const fs::path& path, std::vector<TensorInfo>& tensors, uint64_t data_bytes) {
  std::sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& t : tensors) {
    const std::string offsets = "data_offsets " + range_string(t.begin, t.end);
    if (t.end < t.begin) fail_tensor(path, t.name, offsets + " end before they begin");
    if (t.end > data_bytes) {
      fail_tensor(path, t.name,
                  offsets + " run past the end of the data (" + std::to_string(data_bytes) +
                      " bytes): the file is truncated or the offsets are wrong");
    }
    if (t.begin < expected) {
      fail_tensor(
          path, t.name,
          offsets + " overlap tensor '" + previous->name + "' (which ends at byte " + std::to_string(expected) + ")");
    }
    if (t.begin > expected) {
      fail_tensor(path, t.name,
                  offsets + " leave a hole: the data before them ends at byte " + std::to_string(expected));
    }
    uint64_t needed = 0;
    if (!byte_count(t, needed)) fail_tensor(path, t.name, "shape " + shape_string(t.shape) + " is too large");
    if (t.end - t.begin != needed) {
      fail_tensor(path, t.name,
                  offsets + " hold " + std::to_string(t.end - t.begin) + " bytes, but shape " + shape_string(t.shape) +
                      " of " + std::string(dtype_code(t.dtype)) + " needs " + std::to_string(needed));
    }
    expected = t.end;
    previous = &t;
  }
  if (expected != data_bytes) {
    fail(path, std::to_string(data_bytes - expected) + " bytes after the last tensor's data" +
                   (previous ? " ('" + previous->name + "')" : std::string()) + ": the offsets do not cover the data");
  }
}

Header parse_header(const fs::path& path, const std::string& text, uint64_t data_bytes) {
  if (text.empty() || text.front() != '{') fail(path, "the header is not a JSON object (it must start with '{')");
  // JSON has no place for a NUL byte, and nlohmann would stop reading at one.
  if (const size_t nul = text.find('\0'); nul != std::string::npos) {
    fail(path, "the header is not valid JSON: a NUL byte at header offset " + std::to_string(nul));
  }
  // nlohmann keeps the last of duplicate keys; a file naming a tensor twice is corrupt.
  std::set<std::string> keys;
  std::string duplicate;
  const json::parser_callback_t note_keys = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!keys.insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  json header;
  try {
    header = parse_bounded_json(text, note_keys);
  } catch (const std::exception& e) {
    fail(path, std::string("the header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) fail(path, "the header is not a JSON object");
  if (!duplicate.empty()) fail(path, "the header names '" + duplicate + "' twice");

  Header result;
  for (const auto& [key, value] : header.items()) {
    if (key != kMetadataKey) {
      result.tensors.push_back(parse_entry(path, key, value));
      continue;
    }
    if (!value.is_object()) fail(path, "\"__metadata__\" must be an object of strings");
    for (const auto& [name, text_value] : value.items()) {
      if (!text_value.is_string()) fail(path, "\"__metadata__\" entry '" + name + "' is not a string");
      result.metadata.emplace(name, text_value.get<std::string>());
    }
  }
  check_layout(path, result.tensors, data_bytes);
  return result;
}

Header read_header(const InputFile& file, const fs::path& path) {
  if (file.size() < 8) {
    fail(path, "truncated: " + std::to_string(file.size()) + " bytes, fewer than the 8-byte header length");
  }
  uint64_t header_bytes = 0;
  file.read_at(0, &header_bytes, 8);
  if (header_bytes > kMaxHeaderBytes) {
    fail(path,
         "the header length " + std::to_string(header_bytes) + " exceeds the 100 MB limit (not a safetensors file?)");
  }
  if (8 + header_bytes > file.size()) {
    fail(path, "truncated: the header length is " + std::to_string(header_bytes) + " bytes but only " +
                   std::to_string(file.size() - 8) + " bytes follow it");
  }
  std::string text(header_bytes, '\0');
  file.read_at(8, text.data(), text.size());
  Header header = parse_header(path, text, file.size() - 8 - header_bytes);
  header.data_start = 8 + header_bytes;
  return header;
}

}  // namespace

std::string_view dtype_code(DType dtype) noexcept {
  for (const DTypeCode& c : kDTypeCodes) {
    if (c.dtype == dtype) return c.code;
  }
  return {};
}

DType dtype_from_code(std::string_view code) noexcept {
  for (const DTypeCode& c : kDTypeCodes) {
    if (c.code == code) return c.dtype;
  }
  return DType::kUndefined;
}

Header read_header(const fs::path& path) {
  const InputFile file(path);
  return read_header(file, path);
}

Contents read(const fs::path& path) {
  const InputFile file(path);
  Header header = read_header(file, path);
  Contents contents;
  contents.metadata = std::move(header.metadata);
  contents.tensors.reserve(header.tensors.size());
  for (TensorInfo& info : header.tensors) {
    Tensor tensor = Tensor::empty(info.dtype, std::move(info.shape));
    file.read_at(header.data_start + info.begin, tensor.raw_data(), tensor.nbytes());
    contents.tensors.emplace_back(std::move(info.name), std::move(tensor));
  }
  return contents;
}

void write(const fs::path& path, std::span<const std::pair<std::string, Tensor>> tensors,
           const std::map<std::string, std::string>& metadata) {
  std::vector<const std::pair<std::string, Tensor>*> order;
  std::set<std::string_view> names;
  for (const auto& entry : tensors) {
    const auto& [name, tensor] = entry;
    const std::string what = "cannot write '" + path.string() + "': tensor '" + name + "'";
    if (name.empty() || name == kMetadataKey) {
      throw Error("cannot write '" + path.string() + "': '" + name + "' is not a valid tensor name",
                  ErrorKind::kInvalidArgument);
    }
    if (!names.insert(name).second) throw Error(what + " appears twice", ErrorKind::kInvalidArgument);
    if (!tensor.defined() || dtype_code(tensor.dtype()).empty()) {
      throw Error(what + " has no data or an element type safetensors cannot hold", ErrorKind::kInvalidArgument);
    }
    order.push_back(&entry);
  }
  std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    const size_t size_a = dtype_size(a->second.dtype());
    const size_t size_b = dtype_size(b->second.dtype());
    return size_a != size_b ? size_a > size_b : a->first < b->first;
  });

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  uint64_t offset = 0;
  for (const auto* entry : order) {
    const Tensor& tensor = entry->second;
    header[entry->first] = {{"dtype", dtype_code(tensor.dtype())},
                            {"shape", tensor.shape()},
                            {"data_offsets", {offset, offset + tensor.nbytes()}}};
    offset += tensor.nbytes();
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    throw Error("cannot write '" + path.string() + "': a tensor or metadata name is not valid UTF-8 (" + e.what() + ")",
                ErrorKind::kInvalidArgument);
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned

  AtomicFile file(path);
  OutputFile out(file.temporary_path(), path);
  const uint64_t header_bytes = text.size();
  out.write(&header_bytes, 8);
  out.write(text.data(), text.size());
  for (const auto* entry : order) out.write(entry->second.raw_data(), entry->second.nbytes());
  out.close();
  file.commit();
}

}  // namespace onnxtrain::safetensors
