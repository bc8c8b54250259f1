// `zerotrain train`'s options as the binary parses and validates them, for the unit tests of the
// options themselves: a tiny preset, a dataset and an output directory (neither opened), then
// `args`.
#pragma once
#include <string>
#include <vector>

#include "app/train_options.h"

namespace zt {

inline TrainOptions parsed_train_options(std::vector<std::string> args) {
  args.insert(args.begin(), {"train", "--preset", "tiny", "--data", "d.h5", "--out", "o"});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  TrainOptions o;
  parse_train_options(static_cast<int>(argv.size()), argv.data(), o);
  validate(o);
  return o;
}

}  // namespace zt
