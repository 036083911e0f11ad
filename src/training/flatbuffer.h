// A small FlatBuffers (https://flatbuffers.dev/internals/) reader and writer: just what the
// ODTC checkpoint of onnxruntime-training needs (tables, scalars, strings, vectors of scalars
// and of tables), without the flatbuffers library or generated code.
//
// The format, as this code relies on it (little-endian throughout):
//   byte 0   uoffset (u32) to the root table, relative to byte 0
//   byte 4   the 4-byte file identifier (optional in general; ODTC files have one)
//   table    at T: soffset (i32) s, the vtable lies at T - s; then the fields, inline
//   vtable   u16 vtable bytes, u16 table bytes, then one u16 per field: its offset from T
//            (0 = absent, the field has its default)
//   offsets  a string, vector or sub-table field holds a u32 relative to the field's own
//            position; the target lies after it
//   vector   u32 element count, then the elements; a vector of tables holds u32 offsets,
//            each relative to its own position; a string is a u8 vector plus a NUL byte
// The reader checks every position and count against the buffer, so a truncated or
// malicious file throws an Error instead of reading out of bounds.
#pragma once

#include <onnxtrain/error.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace onnxtrain::flatbuffer {

class Reader;

// A table in the buffer (its position); fields by their schema index (0, 1, ...).
struct Table {
  uint32_t position = 0;
};

// A vector in the buffer: the position of its first element and its length.
struct Vector {
  uint64_t data = 0;
  uint32_t size = 0;
};

class Reader {
 public:
  // `what` names the buffer in errors ("checkpoint 'path'").
  Reader(std::span<const std::byte> bytes, std::string what) : bytes_(bytes), what_(std::move(what)) {}

  // The root table; throws when the buffer is too short or its identifier is not `identifier`.
  Table root(std::string_view identifier) const;
  static bool has_identifier(std::span<const std::byte> bytes, std::string_view identifier);

  bool has(Table table, int field) const { return field_position(table, field) != 0; }

  template <typename T>
  T scalar(Table table, int field, T fallback) const {
    const uint64_t at = field_position(table, field);
    return at == 0 ? fallback : read<T>(at);
  }
  // Absent fields read as empty strings, empty vectors and absent tables.
  std::string string(Table table, int field, const char* context) const;
  bool table(Table table, int field, Table& out, const char* context) const;
  // A vector whose elements are `element_bytes` wide.
  Vector vector(Table table, int field, size_t element_bytes, const char* context) const;
  // Element i of a vector of tables.
  Table table_at(Vector vector, uint32_t i, const char* context) const;
  template <typename T>
  T scalar_at(Vector vector, uint32_t i) const {
    return read<T>(vector.data + uint64_t{i} * sizeof(T));
  }
  std::span<const std::byte> bytes(Vector vector) const { return bytes_.subspan(vector.data, vector.size); }

  [[noreturn]] void fail(const std::string& message) const;

 private:
  // The absolute position of a present field, 0 when absent.
  uint64_t field_position(Table table, int field) const;
  // The target of the offset stored at `at`.
  uint64_t follow(uint64_t at, const char* context) const;
  void need(uint64_t at, uint64_t count, const char* context) const;

  template <typename T>
  T read(uint64_t at) const {
    need(at, sizeof(T), "a scalar");
    T value;
    std::memcpy(&value, bytes_.data() + at, sizeof(T));
    return value;
  }

  std::span<const std::byte> bytes_;
  std::string what_;
};

// Writes a buffer front to back: a table is written with a slot per offset field, its
// children after it, each slot patched to point forward at its child. Scalars and vectors
// are aligned to their size, as the flatbuffers verifier requires.
class Writer {
 public:
  // The field values of one table, in any order; finish() lays them out.
  class TableFields {
   public:
    template <typename T>
    void scalar(int field, T value) {
      Field f{field, sizeof(T), {}};
      f.bytes.resize(sizeof(T));
      std::memcpy(f.bytes.data(), &value, sizeof(T));
      fields_.push_back(std::move(f));
    }
    // An offset field, to be patched with set_offset(slot(field), child).
    void offset(int field) { fields_.push_back(Field{field, 4, std::vector<std::byte>(4)}); }

   private:
    friend class Writer;
    struct Field {
      int id;
      size_t align;
      std::vector<std::byte> bytes;
    };
    std::vector<Field> fields_;
  };

  // The position of each offset field's slot, by field id (0 for non-offset fields).
  struct TableSlots {
    uint32_t position = 0;
    std::vector<uint32_t> slot;  // by field id
  };

  explicit Writer(std::string_view identifier);

  TableSlots table(const TableFields& fields);
  uint32_t string(std::string_view text);
  // A vector of `count` scalars of `element_bytes` each, from `data`.
  uint32_t scalars(const void* data, size_t count, size_t element_bytes);
  // A vector of `count` offsets; returns the slot of each element.
  std::vector<uint32_t> offsets(size_t count, uint32_t& vector_position);
  // Points the offset at `slot` to `target` (which must lie after it).
  void set_offset(uint32_t slot, uint32_t target);
  void set_root(uint32_t table) { set_offset(0, table); }

  const std::vector<std::byte>& bytes() const { return buffer_; }

 private:
  void pad_to(size_t alignment, size_t extra = 0);
  uint32_t append(const void* data, size_t size);
  uint32_t position() const;

  std::vector<std::byte> buffer_;
};

}  // namespace onnxtrain::flatbuffer
