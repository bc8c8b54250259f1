// The tokens of a Hugging Face tokenizer.json by id, to tell whether two tokenizers read ids
// alike: the data `prepare-data --tokenizer` tokenized and the model it trains
// (docs/fine-tuning.md, "Preparing data").
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace zt {

struct TokenizerVocabulary {
  std::map<int64_t, std::string> regular;  // the model's vocabulary (BPE, WordPiece, Unigram...)
  std::map<int64_t, std::string> added;    // added_tokens: special and user-added tokens
};

// The vocabulary of a tokenizer.json's text: model.vocab as an object of token -> id (BPE,
// WordPiece, WordLevel) or a list of [piece, score] whose index is the id (Unigram), and
// added_tokens [{"id", "content"}, ...]. Text that is not such JSON is an error naming `origin`.
TokenizerVocabulary read_tokenizer_vocabulary(const std::string& json_text,
                                              const std::string& origin);

struct DifferingToken {
  int64_t id = 0;
  std::string in_a, in_b;
};

// The ids both tokenizers hold as regular tokens (of their models' vocabularies), under other
// names: the first `limit` of them, and how many there are. An id either holds as an added token
// is not counted: special tokens renamed (as Llama 3.1 renamed some of Llama 3's reserved ones),
// or a chat variant's added token over a base vocabulary's reserved slot; nor is an id only one
// holds (a vocabulary extended).
struct VocabularyDifference {
  std::vector<DifferingToken> first;
  int64_t count = 0;
};
VocabularyDifference regular_token_differences(const TokenizerVocabulary& a,
                                               const TokenizerVocabulary& b, size_t limit);

}  // namespace zt
