#include <onnxtrain/error.h>

namespace onnxtrain {

std::string Error::without_nul(std::string message) {
  for (size_t at = message.find('\0'); at != std::string::npos; at = message.find('\0', at + 4)) {
    message.replace(at, 1, "\\x00");
  }
  return message;
}

}  // namespace onnxtrain
