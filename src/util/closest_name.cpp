#include "util/closest_name.h"

#include <algorithm>

namespace zt {

// One row of the dynamic-programming table at a time.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

bool near_enough_to_suggest(size_t distance, size_t given_length) {
  return distance < given_length && distance <= std::max<size_t>(2, given_length / 3);
}

std::string closest_name(const std::string& given, const std::vector<std::string>& candidates) {
  std::string closest;
  size_t best = std::string::npos;
  for (const std::string& name : candidates) {
    const size_t d = edit_distance(given, name);
    if (d < best) best = d, closest = name;
  }
  return best != std::string::npos && near_enough_to_suggest(best, given.size()) ? closest : "";
}

}  // namespace zt
