#include "training/flatbuffer.h"

#include <algorithm>
#include <bit>
#include <limits>

namespace onnxtrain::flatbuffer {

static_assert(std::endian::native == std::endian::little,
              "FlatBuffers are little-endian; this reader and writer copy scalars as they lie in memory");

// ---- Reader --------------------------------------------------------------------------

void Reader::fail(const std::string& message) const {
  throw Error(what_ + ": " + message, ErrorKind::kIO);
}

void Reader::need(uint64_t at, uint64_t count, const char* context) const {
  if (at > bytes_.size() || count > bytes_.size() - at) {
    fail(std::string(context) + " at byte " + std::to_string(at) + " (" + std::to_string(count) +
         " bytes) lies outside the " + std::to_string(bytes_.size()) + "-byte file (truncated or corrupt)");
  }
}

bool Reader::has_identifier(std::span<const std::byte> bytes, std::string_view identifier) {
  return bytes.size() >= 8 && std::memcmp(bytes.data() + 4, identifier.data(), 4) == 0;
}

Table Reader::root(std::string_view identifier) const {
  if (bytes_.size() < 8) fail("the file is " + std::to_string(bytes_.size()) + " bytes, too short for a flatbuffer");
  if (bytes_.size() > std::numeric_limits<uint32_t>::max()) fail("the file exceeds the 4 GB a flatbuffer can address");
  if (!has_identifier(bytes_, identifier)) fail("the file identifier is not '" + std::string(identifier) + "'");
  const uint64_t root = follow(0, "the root table");
  need(root, 4, "the root table");
  return Table{static_cast<uint32_t>(root)};
}

uint64_t Reader::follow(uint64_t at, const char* context) const {
  const auto offset = read<uint32_t>(at);
  if (offset == 0) fail(std::string(context) + ": a zero offset at byte " + std::to_string(at));
  const uint64_t target = at + offset;
  need(target, 4, context);
  return target;
}

uint64_t Reader::field_position(Table table, int field) const {
  const uint64_t t = table.position;
  const int64_t vtable = static_cast<int64_t>(t) - read<int32_t>(t);
  if (vtable < 0) fail("a table at byte " + std::to_string(t) + " points to a vtable before the file start");
  const auto v = static_cast<uint64_t>(vtable);
  const auto vtable_bytes = read<uint16_t>(v);
  const auto table_bytes = read<uint16_t>(v + 2);
  if (vtable_bytes < 4 || vtable_bytes % 2 != 0) fail("a vtable at byte " + std::to_string(v) + " is malformed");
  need(v, vtable_bytes, "a vtable");
  need(t, table_bytes, "a table");
  const uint64_t slot = 4 + 2 * static_cast<uint64_t>(field);
  if (slot + 2 > vtable_bytes) return 0;
  const auto offset = read<uint16_t>(v + slot);
  if (offset == 0) return 0;
  if (offset + uint64_t{1} > table_bytes) {
    fail("field " + std::to_string(field) + " of the table at byte " + std::to_string(t) + " lies outside the table");
  }
  return t + offset;
}

namespace {

// FlatBuffers strings are UTF-8; names read from a file reach Python, which takes UTF-8 only.
bool valid_utf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const size_t length = byte < 0x80           ? 1
                          : (byte >> 5) == 0x6  ? 2
                          : (byte >> 4) == 0xE  ? 3
                          : (byte >> 3) == 0x1E ? 4
                                                : 0;
    if (length == 0 || i + length > text.size()) return false;
    uint32_t code = length == 1 ? byte : byte & (0x7F >> length);
    for (size_t k = 1; k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if ((next >> 6) != 0x2) return false;
      code = (code << 6) | (next & 0x3F);
    }
    const uint32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (code < smallest[length] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return false;
    i += length;
  }
  return true;
}

}  // namespace

std::string Reader::string(Table table, int field, const char* context) const {
  const uint64_t at = field_position(table, field);
  if (at == 0) return {};
  const uint64_t target = follow(at, context);
  const auto size = read<uint32_t>(target);
  need(target + 4, uint64_t{size} + 1, context);
  std::string text(reinterpret_cast<const char*>(bytes_.data() + target + 4), size);
  if (!valid_utf8(text)) fail(std::string(context) + ": a string that is not UTF-8");
  return text;
}

bool Reader::table(Table table, int field, Table& out, const char* context) const {
  const uint64_t at = field_position(table, field);
  if (at == 0) return false;
  out = Table{static_cast<uint32_t>(follow(at, context))};
  return true;
}

Vector Reader::vector(Table table, int field, size_t element_bytes, const char* context) const {
  const uint64_t at = field_position(table, field);
  if (at == 0) return {};
  const uint64_t target = follow(at, context);
  const auto size = read<uint32_t>(target);
  // A count that the rest of the file cannot hold is refused before anything is allocated.
  need(target + 4, uint64_t{size} * element_bytes, context);
  return Vector{target + 4, size};
}

Table Reader::table_at(Vector vector, uint32_t i, const char* context) const {
  if (i >= vector.size)
    fail(std::string(context) + ": element " + std::to_string(i) + " of " + std::to_string(vector.size));
  return Table{static_cast<uint32_t>(follow(vector.data + uint64_t{i} * 4, context))};
}

// ---- Writer --------------------------------------------------------------------------

Writer::Writer(std::string_view identifier) : buffer_(8) {
  std::memcpy(buffer_.data() + 4, identifier.data(), std::min<size_t>(4, identifier.size()));
}

uint32_t Writer::position() const {
  if (buffer_.size() > std::numeric_limits<int32_t>::max()) {
    throw Error("an ORT checkpoint holds at most 2 GB inline (FlatBuffers' limit)", ErrorKind::kInvalidArgument);
  }
  return static_cast<uint32_t>(buffer_.size());
}

void Writer::pad_to(size_t alignment, size_t extra) {
  while ((buffer_.size() + extra) % alignment != 0) buffer_.push_back(std::byte{0});
}

uint32_t Writer::append(const void* data, size_t size) {
  const uint32_t at = position();
  const auto* bytes = static_cast<const std::byte*>(data);
  buffer_.insert(buffer_.end(), bytes, bytes + size);
  return at;
}

Writer::TableSlots Writer::table(const TableFields& fields) {
  int max_id = -1;
  for (const auto& f : fields.fields_) max_id = std::max(max_id, f.id);
  const size_t entries = static_cast<size_t>(max_id + 1);
  // Lay the fields out after the 4-byte soffset, widest first, each aligned to its size;
  // the table itself starts 8-aligned so that relative alignment is absolute alignment.
  std::vector<const TableFields::Field*> order;
  for (const auto& f : fields.fields_) order.push_back(&f);
  std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->align > b->align; });
  std::vector<uint16_t> field_offsets(entries, 0);
  size_t end = 4;
  for (const auto* f : order) {
    end = (end + f->align - 1) / f->align * f->align;
    field_offsets[static_cast<size_t>(f->id)] = static_cast<uint16_t>(end);
    end += f->bytes.size();
  }
  const auto table_bytes = static_cast<uint16_t>((end + 3) / 4 * 4);
  const auto vtable_bytes = static_cast<uint16_t>(4 + 2 * entries);

  pad_to(8, vtable_bytes);
  const uint32_t vtable = append(&vtable_bytes, 2);
  append(&table_bytes, 2);
  append(field_offsets.data(), 2 * entries);
  const uint32_t table = position();
  const auto back = static_cast<int32_t>(table - vtable);
  append(&back, 4);
  buffer_.resize(buffer_.size() + table_bytes - 4, std::byte{0});
  TableSlots slots{table, std::vector<uint32_t>(entries, 0)};
  for (const auto& f : fields.fields_) {
    const uint32_t at = table + field_offsets[static_cast<size_t>(f.id)];
    std::memcpy(buffer_.data() + at, f.bytes.data(), f.bytes.size());
    slots.slot[static_cast<size_t>(f.id)] = at;
  }
  return slots;
}

uint32_t Writer::string(std::string_view text) {
  pad_to(4);
  const auto size = static_cast<uint32_t>(text.size());
  const uint32_t at = append(&size, 4);
  append(text.data(), text.size());
  buffer_.push_back(std::byte{0});
  return at;
}

uint32_t Writer::scalars(const void* data, size_t count, size_t element_bytes) {
  pad_to(std::max<size_t>(4, element_bytes), 4);
  const auto size = static_cast<uint32_t>(count);
  const uint32_t at = append(&size, 4);
  append(data, count * element_bytes);
  return at;
}

std::vector<uint32_t> Writer::offsets(size_t count, uint32_t& vector_position) {
  pad_to(4);
  const auto size = static_cast<uint32_t>(count);
  vector_position = append(&size, 4);
  std::vector<uint32_t> slots(count);
  for (size_t i = 0; i < count; ++i) {
    const uint32_t zero = 0;
    slots[i] = append(&zero, 4);
  }
  return slots;
}

void Writer::set_offset(uint32_t slot, uint32_t target) {
  const uint32_t relative = target - slot;
  std::memcpy(buffer_.data() + slot, &relative, 4);
}

}  // namespace onnxtrain::flatbuffer
