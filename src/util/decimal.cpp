#include "util/decimal.h"

#include <cstdio>
#include <cstdlib>

namespace zt {
namespace {

template <typename T>
std::string shortest(T v, int max_digits) {
  char buf[48];
  for (int digits = 6; digits <= max_digits; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, static_cast<double>(v));
    const T back = sizeof(T) == sizeof(float) ? static_cast<T>(std::strtof(buf, nullptr))
                                              : static_cast<T>(std::strtod(buf, nullptr));
    if (back == v) break;
  }
  return buf;
}

}  // namespace

std::string shortest_decimal(float v) {
  return shortest(v, 9);
}

std::string shortest_decimal(double v) {
  return shortest(v, 17);
}

double decimal_of_float(float v) {
  return std::strtod(shortest_decimal(v).c_str(), nullptr);
}

}  // namespace zt
