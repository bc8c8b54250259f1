// Numbers as text people read: the shortest decimal that reads back to exactly the same value
// (0.9f as "0.9", 3e-4f as "0.0003", not "0.899999976" or "0.000300000014"). Used wherever a
// setting is printed: --help defaults, run.json, DeepSpeed mappings, checkpoint mismatch errors.
#pragma once
#include <string>

namespace zt {

// At least 6 significant digits (%g), more only when needed to read back the same value.
std::string shortest_decimal(float v);
std::string shortest_decimal(double v);

}  // namespace zt
