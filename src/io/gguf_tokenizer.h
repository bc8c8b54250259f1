// A GGUF file's vocabulary (tokenizer.ggml.*) as Hugging Face tokenizer files, and back.
//
// GGUF keeps a byte-level BPE tokenizer (tokenizer.ggml.model "gpt2": GPT-2, Llama 3, Qwen2,
// SmolLM) as its tokens in id order, each token's type (normal, control = a special token,
// user-defined = an added token, unused = padding), the merges, the special token ids and
// whether BOS/EOS are added, the chat template, and the name of the pre-tokenizer
// (tokenizer.ggml.pre), which llama.cpp maps to its splitting regexes. The Hugging Face side is
// tokenizer.json (a BPE model with the pre-tokenizer of that name), tokenizer_config.json
// (special tokens, added tokens, chat template), special_tokens_map.json and the bos/eos ids.
// Pre-tokenizers known both ways: default and gpt-2 (GPT-2's regex), llama-bpe (Llama 3),
// qwen2, smollm (single digits, then GPT-2's regex). A SentencePiece BPE vocabulary
// (tokenizer.ggml.model "llama": Llama 2, Mistral, TinyLlama, Phi-3) keeps scores instead of
// merges; its merges are rebuilt from them as transformers' GGUF converter does, and its
// tokenizer.json is the one Hugging Face writes for these models (U+2581 for spaces, byte
// fallback; io/gguf_sentencepiece.h). Export writes both kinds back.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "io/gguf_file.h"
#include "io/tokenizer_files.h"

namespace zt {

// The tokenizer files of a GGUF file's vocabulary; `context_length` becomes model_max_length.
// Errors name the file and the key.
TokenizerFiles tokenizer_files_from_gguf(const GgufReader& gguf, int64_t context_length);

// The tokenizer.ggml.* metadata of Hugging Face tokenizer files (tokenizer.json,
// tokenizer_config.json, chat_template.jinja), with the token list padded to `vocab_size`
// entries of type unused when the model's embedding has more rows than the tokenizer has tokens.
// `where` names the files in errors. `end_of_turn`: the token llama.cpp's converter writes as
// tokenizer.ggml.eot_token_id for the architecture (GLM-4's <|user|>, at which a turn ends),
// written where the vocabulary holds it.
std::vector<std::pair<std::string, GgufValue>> gguf_tokenizer_metadata(
    const TokenizerFiles& tokenizer, int64_t vocab_size, const std::string& where,
    const std::string& end_of_turn = "");

}  // namespace zt
