// SentencePiece BPE vocabularies in GGUF (tokenizer.ggml.model "llama": Llama 2, Mistral,
// TinyLlama, Phi-3) and the Hugging Face tokenizer.json of the same tokenizer, both ways. GGUF
// keeps the pieces' scores instead of merges; Hugging Face writes a BPE with byte fallback whose
// spaces are U+2581, with one prepended (the legacy normalizer Prepend + Replace, or a Metaspace
// pre-tokenizer). Part of io/gguf_tokenizer.h.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace zt {

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum GgufTokenType : int {
  kGgufNormal = 1,
  kGgufUnknown = 2,
  kGgufControl = 3,
  kGgufUserDefined = 4,
  kGgufUnused = 5,
  kGgufByte = 6,
};

// The merges, rebuilt from the scores as transformers' GGUF converter rebuilds them: every split
// of a token into two tokens at a character boundary is a merge; merges rank by the whole
// token's score, highest first, and one token's splits by the scores of their halves; ties keep
// id order. Written "LEFT RIGHT", or as [LEFT, RIGHT] pairs when a piece holds a space.
nlohmann::json sentencepiece_merges(const std::vector<std::string>& tokens,
                                    const std::vector<float>& scores);

// tokenizer.json's normalizer and decoder for a SentencePiece vocabulary: spaces become U+2581,
// with one prepended when `add_space_prefix`; decoding maps them back, joins byte-fallback
// tokens and strips the prepended space.
nlohmann::json sentencepiece_normalizer(bool add_space_prefix);
nlohmann::json sentencepiece_decoder(bool add_space_prefix);

// Whether a byte-fallback BPE tokenizer.json prepends a space (GGUF's add_space_prefix): the
// legacy normalizer with or without Prepend, or a Metaspace pre-tokenizer (no split; its
// prepend_scheme, or the older add_prefix_space). Anything else is refused naming `file`.
bool sentencepiece_space_prefix(const nlohmann::json& tokenizer_json, const std::string& file);

// SentencePiece's byte tokens, <0x00> to <0xFF>.
bool is_byte_token(const std::string& token);

// A merge as tokenizer.json stores it: "LEFT RIGHT" or [LEFT, RIGHT]; errors name `file`.
std::pair<std::string, std::string> merge_pair(const nlohmann::json& merge,
                                               const std::string& file);

// Scores that rank the merges as the merge list does: a token made by the merge of rank r scores
// -r - 1 (its first such merge), so that llama.cpp, and an import that rebuilds the merges from
// the scores, merge in the same order. Other tokens score 0 (control, byte and added tokens, as
// llama.cpp's converter writes them) or, when normal, below every merge. `types`: GgufTokenType
// of each token.
nlohmann::json sentencepiece_scores(const nlohmann::json& tokens, const nlohmann::json& types,
                                    const nlohmann::json& merges, const std::string& file);

}  // namespace zt
