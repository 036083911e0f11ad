#include "ir/function_text.h"

#include <onnxtrain/error.h>

#include <cctype>
#include <charconv>
#include <string>
#include <type_traits>
#include <vector>

namespace onnxtrain::ir {
namespace {

// A cursor over one line.
class LineReader {
 public:
  LineReader(std::string_view line, int line_number) : text_(line), line_number_(line_number) {}

  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool at_end() {
    skip_space();
    return pos_ >= text_.size();
  }
  bool accept(std::string_view token) {
    skip_space();
    if (text_.substr(pos_, token.size()) != token) return false;
    pos_ += token.size();
    return true;
  }
  void expect(std::string_view token) {
    if (!accept(token)) fail("expected '" + std::string(token) + "'");
  }
  char peek() {
    skip_space();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }
  // A name: letters, digits, '_', '.', '/' (value names may hold any of these).
  std::string name() {
    skip_space();
    const size_t begin = pos_;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '/')) break;
      ++pos_;
    }
    return std::string(text_.substr(begin, pos_ - begin));
  }
  std::string quoted() {
    expect("\"");
    const size_t end = text_.find('"', pos_);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string value(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return value;
  }
  // A number as written; `is_float` tells whether it had a '.' or an exponent.
  std::string number(bool& is_float) {
    skip_space();
    const size_t begin = pos_;
    is_float = false;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '.' || c == 'e' || c == 'E' || c == 'n' || c == 'a' || c == 'i' || c == 'f') is_float = true;
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '+')) break;
      ++pos_;
    }
    if (begin == pos_) fail("expected a number");
    return std::string(text_.substr(begin, pos_ - begin));
  }
  // Comma-separated names in parentheses; an empty entry is an omitted value.
  std::vector<std::string> name_list() {
    expect("(");
    std::vector<std::string> names;
    if (accept(")")) return names;
    for (;;) {
      names.push_back(name());
      if (accept(")")) return names;
      expect(",");
    }
  }
  [[noreturn]] void fail(const std::string& message) const {
    throw Error("function text, line " + std::to_string(line_number_) + ": " + message + " at '" +
                    std::string(text_.substr(pos_)) + "'",
                ErrorKind::kInvalidModel);
  }

 private:
  std::string_view text_;
  size_t pos_ = 0;
  int line_number_;
};

ir::AttributeType attribute_type(LineReader& in, const std::string& type) {
  if (type == "int") return ir::AttributeType::kInt;
  if (type == "float") return ir::AttributeType::kFloat;
  if (type == "string") return ir::AttributeType::kString;
  if (type == "ints") return ir::AttributeType::kInts;
  if (type == "floats") return ir::AttributeType::kFloats;
  if (type == "tensor") return ir::AttributeType::kTensor;
  in.fail("unknown attribute type '" + type + "'");
}

double parse_double(LineReader& in, const std::string& text) {
  try {
    return std::stod(text);
  } catch (const std::exception&) {
    in.fail("bad number '" + text + "'");
  }
}

int64_t parse_int(LineReader& in, const std::string& text) {
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) in.fail("bad integer '" + text + "'");
  return value;
}

// `int64[2] {1, 2}` or `float {0}` (a 1-element tensor of rank 0 when no dims are given).
Tensor tensor_literal(LineReader& in, const std::string& type) {
  Shape shape;
  if (in.accept("[")) {
    if (!in.accept("]")) {
      for (;;) {
        bool is_float = false;
        shape.push_back(parse_int(in, in.number(is_float)));
        if (in.accept("]")) break;
        in.expect(",");
      }
    }
  }
  in.expect("{");
  std::vector<std::string> values;
  if (!in.accept("}")) {
    for (;;) {
      bool is_float = false;
      values.push_back(in.number(is_float));
      if (in.accept("}")) break;
      in.expect(",");
    }
  }
  auto make = [&]<typename T>() {
    std::vector<T> typed;
    for (const std::string& v : values) {
      if constexpr (std::is_floating_point_v<T>)
        typed.push_back(static_cast<T>(parse_double(in, v)));
      else
        typed.push_back(static_cast<T>(parse_int(in, v)));
    }
    return Tensor::from_vector<T>(shape, typed);
  };
  if (type == "float") return make.operator()<float>();
  if (type == "double") return make.operator()<double>();
  if (type == "int64") return make.operator()<int64_t>();
  if (type == "int32") return make.operator()<int32_t>();
  if (type == "bool") return make.operator()<bool>();
  in.fail("unknown tensor element type '" + type + "'");
}

ir::Attribute parse_attribute(LineReader& in) {
  ir::Attribute a;
  a.name = in.name();
  if (in.accept(":")) {  // a reference to the caller's attribute
    a.type = attribute_type(in, in.name());
    in.expect("=");
    in.expect("@");
    a.ref_attr_name = in.name();
    return a;
  }
  in.expect("=");
  const char c = in.peek();
  if (c == '"') {
    a.type = ir::AttributeType::kString;
    a.s = in.quoted();
  } else if (c == '[') {
    in.expect("[");
    std::vector<std::string> items;
    bool any_float = false;
    if (!in.accept("]")) {
      for (;;) {
        bool is_float = false;
        items.push_back(in.number(is_float));
        any_float = any_float || is_float;
        if (in.accept("]")) break;
        in.expect(",");
      }
    }
    a.type = any_float ? ir::AttributeType::kFloats : ir::AttributeType::kInts;
    for (const std::string& item : items) {
      if (any_float)
        a.floats.push_back(static_cast<float>(parse_double(in, item)));
      else
        a.ints.push_back(parse_int(in, item));
    }
  } else if (std::isalpha(static_cast<unsigned char>(c))) {
    a.type = ir::AttributeType::kTensor;
    a.t = tensor_literal(in, in.name());
  } else {
    bool is_float = false;
    const std::string text = in.number(is_float);
    if (is_float) {
      a.type = ir::AttributeType::kFloat;
      a.f = static_cast<float>(parse_double(in, text));
    } else {
      a.type = ir::AttributeType::kInt;
      a.i = parse_int(in, text);
    }
  }
  return a;
}

std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    std::string line(text.substr(begin, end - begin));
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    lines.push_back(std::move(line));
    begin = end + 1;
  }
  return lines;
}

}  // namespace

Function parse_function(std::string_view text, std::string_view domain) {
  Function function;
  function.domain = std::string(domain);
  bool in_body = false;
  bool done = false;
  const std::vector<std::string> lines = split_lines(text);
  for (size_t number = 0; number < lines.size(); ++number) {
    LineReader in(lines[number], static_cast<int>(number) + 1);
    if (in.at_end()) continue;
    if (done) in.fail("text after the closing '}'");
    if (!in_body) {
      function.name = in.name();
      if (in.accept("<")) {
        for (;;) {
          function.attribute_names.push_back(in.name());
          if (in.accept(">")) break;
          in.expect(",");
        }
      }
      function.inputs = in.name_list();
      in.expect("=>");
      function.outputs = in.name_list();
      in.expect("{");
      if (!in.at_end()) in.fail("expected the end of the line");
      in_body = true;
      continue;
    }
    if (in.accept("}")) {
      done = true;
      continue;
    }
    ir::Node node;
    for (;;) {
      node.outputs.push_back(in.name());
      if (in.accept("=")) break;
      in.expect(",");
    }
    node.op_type = in.name();
    if (node.op_type.empty()) in.fail("expected an op type");
    if (in.accept("<")) {
      for (;;) {
        node.attributes.push_back(parse_attribute(in));
        if (in.accept(">")) break;
        in.expect(",");
      }
    }
    node.inputs = in.name_list();
    if (!in.at_end()) in.fail("expected the end of the line");
    node.name = function.name + "/" + std::to_string(function.nodes.size()) + "_" + node.op_type;
    function.nodes.push_back(std::move(node));
  }
  if (!done) throw Error("function text for '" + function.name + "' has no closing '}'", ErrorKind::kInvalidModel);
  return function;
}

}  // namespace onnxtrain::ir
