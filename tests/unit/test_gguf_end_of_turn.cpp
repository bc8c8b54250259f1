// The end-of-turn token a GGUF export marks (io/gguf_tokenizer.h): llama.cpp's converter writes
// tokenizer.ggml.eot_token_id for some architectures (GLM-4's <|user|>, where a turn ends), which
// llama.cpp then stops at. It is written with the id the vocabulary gives that token, and not at
// all where the vocabulary lacks it or no token is asked for. The tokenizer is a small byte-level
// BPE written by transformers 5 (tests/data/transformers5, sources in its SOURCES.md).
#include <gtest/gtest.h>

#include <string>

#include "io/gguf_tokenizer.h"
#include "io/tokenizer_files.h"

namespace zt {
namespace {

// The value of `key` in the metadata, or -1 when it is absent.
int64_t id_at(const std::vector<std::pair<std::string, GgufValue>>& metadata,
              const std::string& key) {
  for (const auto& [name, value] : metadata)
    if (name == key) return value.value.get<int64_t>();
  return -1;
}

TEST(GgufEndOfTurn, TheAskedTokenIsMarkedWithItsIdWhereTheVocabularyHoldsIt) {
  const std::string dir = std::string(ZT_SOURCE_DIR) + "/tests/data/transformers5/qwen2-class";
  const TokenizerFiles tokenizer = read_tokenizer_files(dir);
  const int64_t vocab = 304;  // its added tokens end at 303
  const std::string key = "tokenizer.ggml.eot_token_id";
  EXPECT_EQ(id_at(gguf_tokenizer_metadata(tokenizer, vocab, dir, "<|im_end|>"), key), 302);
  EXPECT_EQ(id_at(gguf_tokenizer_metadata(tokenizer, vocab, dir, "<|user|>"), key), -1);
  EXPECT_EQ(id_at(gguf_tokenizer_metadata(tokenizer, vocab, dir), key), -1);
  // The other special tokens are the tokenizer's, whichever end of turn is asked for.
  EXPECT_EQ(id_at(gguf_tokenizer_metadata(tokenizer, vocab, dir, "<|im_end|>"),
                  "tokenizer.ggml.eos_token_id"),
            id_at(gguf_tokenizer_metadata(tokenizer, vocab, dir), "tokenizer.ggml.eos_token_id"));
}

}  // namespace
}  // namespace zt
