// Numbers as text people read: the shortest decimal that reads back to exactly the same value
// (0.9f as "0.9", 3e-4f as "0.0003", not "0.899999976" or "0.000300000014"). Used wherever a
// setting is printed: --help defaults, run.json, DeepSpeed mappings, checkpoint mismatch errors.
#pragma once
#include <string>

namespace zt {

// At least 6 significant digits (%g), more only when needed to read back the same value.
std::string shortest_decimal(float v);
std::string shortest_decimal(double v);

// An fp32 value as the decimal it was written from (a GGUF float32 1e-05 read back as 1e-05, not
// 9.99999974e-06), as a double.
double decimal_of_float(float v);

}  // namespace zt
