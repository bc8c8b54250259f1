// Errors: every failure is a zt::Error carrying a message that names the culprit (file, tensor,
// key, option). main() prints it and exits non-zero.
#pragma once
#include <stdexcept>
#include <string>

namespace zt {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

[[noreturn]] void fail(const std::string& message);

}  // namespace zt

// ZT_CHECK(cond, message-expression): throws zt::Error with the message when cond is false.
#define ZT_CHECK(cond, msg)                    \
  do {                                         \
    if (!(cond)) ::zt::fail(std::string(msg)); \
  } while (0)
