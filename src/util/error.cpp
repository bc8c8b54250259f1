#include "util/error.h"

namespace zt {

void fail(const std::string& message) {
  throw Error(message);
}

}  // namespace zt
