// Llama 3.1-style ("llama3") rope scaling as per-frequency factors, the form GGUF files carry it
// in. llama.cpp's converter does not store the four parameters; it stores their effect (tensor
// rope_freqs.weight): one fp32 factor per rotary frequency (head_dim / 2 of them), by which
// llama.cpp divides that frequency. The factor is 1 for
// wavelengths under original_max_position_embeddings / high_freq_factor, `factor` above
// original_max_position_embeddings / low_freq_factor, and 1 / ((1 - s) / factor + s) between,
// s = (original / wavelength - low) / (high - low).
#pragma once
#include <string>
#include <vector>

#include "model/config.h"  // RopeScalingParams (backend/rope.h)

namespace zt {

// The rope_freqs.weight values of a model with llama3 rope scaling, computed as llama.cpp's
// converter computes them (fp32, from the same inverse frequencies the model rotates by).
std::vector<float> llama3_rope_freq_factors(const ModelConfig& c);

// The llama3 parameters whose factors `factors` are, for a model with base `theta` and heads of
// `head_dim`. Only two combinations of the parameters are determined by the factors, so
// low_freq_factor is taken as 1 (every Llama 3.x release), the factor as the largest value, and
// high_freq_factor and original_max_position_embeddings fitted to the band between (rounded to
// 1/1000 and to a whole number). The parameters are accepted only when their factors, recomputed,
// equal the stored ones to 1e-5 (llama.cpp's arithmetic is the same fp32 sequence, so exact
// parameters give equal values; a 0.1% change in either parameter moves some factor by more).
// Factors that are all 1 are no scaling (kNone): llama3 scaling of factor 1 is the identity.
// `where` names the factors in errors (the file and the tensor).
RopeScalingParams llama3_scaling_from_freq_factors(const std::vector<float>& factors, double theta,
                                                   int64_t head_dim, const std::string& where);

}  // namespace zt
