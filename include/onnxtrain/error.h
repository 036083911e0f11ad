// onnxtrain::Error — the one exception type for user mistakes.
#pragma once

#include <stdexcept>
#include <string>

namespace onnxtrain {

// What kind of mistake an Error reports. Python maps InvalidArgument to ValueError and
// everything else to RuntimeError.
enum class ErrorKind {
  kInvalidArgument,  // a wrong input: name, count, shape, dtype, value out of range
  kInvalidModel,     // a malformed or unsupported model
  kNotImplemented,   // a valid model that uses something onnxtrain has no kernel for
  kIO,               // a file that cannot be read or written
  kRuntime,          // anything else that went wrong while running
};

// Thrown for every user mistake (bad model, bad input, bad file). The message says what
// went wrong, where (node, input, file) and what was expected. Never an abort.
class Error : public std::runtime_error {
 public:
  explicit Error(std::string message, ErrorKind kind = ErrorKind::kRuntime)
      : std::runtime_error(without_nul(std::move(message))), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  // what() is a C string: a NUL from a model's text (a name, an attribute) would cut the
  // message there, so it is spelled out as \x00.
  static std::string without_nul(std::string message);

  ErrorKind kind_;
};

}  // namespace onnxtrain
