// JSON read from files (checkpoint headers and metadata), with a bound on nesting.
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace onnxtrain {

// onnxtrain's own JSON nests 4 levels deep; anything past this is not a file it wrote.
inline constexpr int kMaxJsonDepth = 64;

// json::parse that refuses text nested deeper than kMaxJsonDepth with std::invalid_argument.
// nlohmann parses iteratively, but dump(), copies and comparisons of the result recurse: a
// header nested 100,000 deep overflowed the stack in an error message. `on_event`, when
// given, sees every parse event as json::parse's callback does.
inline nlohmann::json parse_bounded_json(const std::string& text,
                                         const nlohmann::json::parser_callback_t& on_event = nullptr) {
  using Event = nlohmann::json::parse_event_t;
  return nlohmann::json::parse(text, [&](int depth, Event event, nlohmann::json& parsed) {
    if ((event == Event::object_start || event == Event::array_start) && depth >= kMaxJsonDepth) {
      throw std::invalid_argument("nested more than " + std::to_string(kMaxJsonDepth) + " levels deep");
    }
    return on_event ? on_event(depth, event, parsed) : true;
  });
}

}  // namespace onnxtrain
