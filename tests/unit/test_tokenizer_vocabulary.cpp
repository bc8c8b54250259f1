// The tokens of a tokenizer.json by id (io/tokenizer_vocabulary.h), and which ids two tokenizers
// read otherwise: only regular tokens of both under other names count.
#include <gtest/gtest.h>

#include <string>

#include "io/tokenizer_vocabulary.h"

namespace zt {
namespace {

// A tokenizer.json of `vocab` (JSON text of model.vocab) and `added` (of added_tokens), with
// merges and a normalizer that the reading drops.
std::string tokenizer_json(const std::string& vocab, const std::string& added) {
  return R"({"version": "1.0", "normalizer": {"type": "NFC"}, "added_tokens": )" + added +
         R"(, "model": {"type": "BPE", "merges": ["a b", "ab c"], "vocab": )" + vocab + "}}";
}

TEST(TokenizerVocabulary, ReadsBpeAndUnigramVocabulariesAndAddedTokens) {
  const TokenizerVocabulary bpe = read_tokenizer_vocabulary(
      tokenizer_json(R"({"a": 0, "b": 1, "ab": 2})", R"([{"id": 3, "content": "<s>"}])"), "bpe");
  EXPECT_EQ(bpe.regular, (std::map<int64_t, std::string>{{0, "a"}, {1, "b"}, {2, "ab"}}));
  EXPECT_EQ(bpe.added, (std::map<int64_t, std::string>{{3, "<s>"}}));
  const TokenizerVocabulary unigram =
      read_tokenizer_vocabulary(tokenizer_json(R"([["<unk>", 0.0], ["▁a", -1.5]])", "[]"), "u");
  EXPECT_EQ(unigram.regular, (std::map<int64_t, std::string>{{0, "<unk>"}, {1, "▁a"}}));
}

TEST(TokenizerVocabulary, OnlyRegularTokensOfBothUnderOtherNamesDiffer) {
  const TokenizerVocabulary base = read_tokenizer_vocabulary(
      tokenizer_json(R"({"a": 0, "b": 1, "ab": 2, "<reserved_0>": 3})",
                     R"([{"id": 4, "content": "<|reserved_special_token_1|>"}])"),
      "base");
  // The same vocabulary saved with the special token renamed, the reserved slot taken over by an
  // added chat token, and one more token: read alike.
  const TokenizerVocabulary chat = read_tokenizer_vocabulary(
      tokenizer_json(R"({"a": 0, "b": 1, "ab": 2, "<reserved_0>": 3, "ba": 5})",
                     R"([{"id": 3, "content": "<|im_start|>"}, {"id": 4, "content": "<|eom|>"}])"),
      "chat");
  EXPECT_EQ(regular_token_differences(base, chat, 3).count, 0);
  EXPECT_EQ(regular_token_differences(chat, base, 3).count, 0);
  // Another tokenizer's merges: ids 1 and 2 hold other tokens.
  const TokenizerVocabulary other =
      read_tokenizer_vocabulary(tokenizer_json(R"({"a": 0, "ab": 1, "b": 2})", "[]"), "other");
  const VocabularyDifference d = regular_token_differences(base, other, 1);
  EXPECT_EQ(d.count, 2);
  ASSERT_EQ(d.first.size(), 1u);
  EXPECT_EQ(d.first[0].id, 1);
  EXPECT_EQ(d.first[0].in_a, "b");
  EXPECT_EQ(d.first[0].in_b, "ab");
}

TEST(TokenizerVocabulary, WhatIsNotATokenizerIsRefusedNamingIt) {
  for (const std::string& text :
       {std::string("{not json"), std::string(R"({"model": {}})"),
        tokenizer_json(R"({"a": "zero"})", "[]"), tokenizer_json(R"([[1, 0.0]])", "[]"),
        tokenizer_json("{}", R"([{"id": 1}])")}) {
    try {
      read_tokenizer_vocabulary(text, "some/tokenizer.json");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("some/tokenizer.json"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace zt
