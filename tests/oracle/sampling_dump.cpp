// Prints zerotrain's sampling distribution (model/token_sampling.h) of logit rows for
// test_sampling_warpers.py, which applies transformers' logits warpers to the same rows.
//   zt_sampling_dump < CASES
// CASES: one case per line, "TEMPERATURE TOP_K TOP_P V l_0 ... l_{V-1}" (the logits as float32
// values written with 9 significant digits). Prints, per case, one line of V probabilities
// (%.17g); a refused configuration prints "error: <message>" and exits 3.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "model/token_sampling.h"
#include "util/error.h"

int main() {
  double temperature = 0.0, top_p = 0.0;
  long long top_k = 0, vocab = 0;
  try {
    while (std::cin >> temperature >> top_k >> top_p >> vocab) {
      std::vector<float> logits(static_cast<size_t>(vocab));
      for (float& l : logits)
        if (!(std::cin >> l)) throw zt::Error("zt_sampling_dump: a case ends before its logits");
      zt::SamplingConfig config;
      config.sample = true;
      config.temperature = temperature;
      config.top_k = top_k;
      config.top_p = top_p;
      zt::check_sampling_config(config);
      const std::vector<double> p = zt::sampling_distribution(logits.data(), vocab, config);
      for (size_t i = 0; i < p.size(); ++i) std::printf(i ? " %.17g" : "%.17g", p[i]);
      std::printf("\n");
    }
  } catch (const zt::Error& e) {
    std::printf("error: %s\n", e.what());
    return 3;
  }
  return 0;
}
