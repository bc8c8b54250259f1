// Errors: every failure is a zt::Error carrying a message that names the culprit (file, tensor,
// key, option). main() prints it, prefixed with the rank, and exits non-zero: an AgreedError
// (raised by every rank together, after they agreed on a failure) lets the ranks stop in order;
// any other error on a job of several ranks aborts the whole job (docs/ARCHITECTURE.md §2).
#pragma once
#include <stdexcept>
#include <string>

namespace zt {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Every rank of the job raises one of these at the same point (comm/collective_outcome.h), so
// none is left waiting in a collective and the job can end without an abort.
class AgreedError : public Error {
 public:
  explicit AgreedError(const std::string& what) : Error(what) {}
};

[[noreturn]] void fail(const std::string& message);

}  // namespace zt

// ZT_CHECK(cond, message-expression): throws zt::Error with the message when cond is false.
#define ZT_CHECK(cond, msg)                    \
  do {                                         \
    if (!(cond)) ::zt::fail(std::string(msg)); \
  } while (0)
