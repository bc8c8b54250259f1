// The message of the zt::Error a callable throws ("" when it throws none), for tests that check
// what an error names.
#pragma once
#include <functional>
#include <string>

#include "util/error.h"

namespace zt {

inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace zt
