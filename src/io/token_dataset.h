// Token datasets (docs/ARCHITECTURE.md §3): one HDF5 file with a 1-D dataset /tokens (uint16 when
// vocab ≤ 65536, else uint32) and attributes vocab_size (int64) and tokenizer (string). A dataset
// made with a Hugging Face tokenizer also holds each tokenizer file as a uint8 dataset named after
// it (/tokenizer.json, ...) and attributes bos_token_id and eos_token_id (-1: none). SFT data adds
// /loss_mask (uint8, one per token; 1: this token counts as a target, 0: it does not, such as a
// prompt token). Datasets with document boundaries add /doc_starts (uint64, strictly ascending,
// first entry 0, each below the token count): the offset of each document's first token
// (docs/fine-tuning.md, "Packing and document masking"). Without it the tokens are one stream.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/hdf5_util.h"
#include "io/tokenizer_files.h"

namespace zt {

constexpr int64_t kByteVocabSize = 256;
constexpr int64_t kGpt2VocabSize = 50257;
constexpr int64_t kLlama3VocabSize = 128256;
constexpr int32_t kLlmcMagic = 20240520;        // llm.c .bin, GPT-2 tokens (uint16)
constexpr int32_t kLlmcLlama3Magic = 20240801;  // llm.c .bin, Llama 3 tokens (uint32)

// Streams tokens into PATH.tmp-<pid> (chunked, extendible dataset) and renames it to PATH on
// finish(); without finish() the temporary file is removed. Where the command installed the stop
// handlers (runtime/signals.h), a SIGTERM or SIGUSR1 fails the next append(), or finish() just
// before its rename, so that the writer unwinds and nothing is left. ZT_DEBUG_STALL_DATASET=
// SECONDS (tests) pauses after the first append, the file half written, until then or a stop.
class TokenDatasetWriter {
 public:
  TokenDatasetWriter(std::string path, int64_t vocab_size, std::string tokenizer,
                     bool overwrite = false);
  ~TokenDatasetWriter();
  TokenDatasetWriter(const TokenDatasetWriter&) = delete;
  TokenDatasetWriter& operator=(const TokenDatasetWriter&) = delete;

  // The Hugging Face tokenizer the tokens came from, stored with them (written at finish()).
  void set_tokenizer_files(TokenizerFiles tokenizer) { tokenizer_files_ = std::move(tokenizer); }
  // Appends tokens; each must be < vocab_size (`source` names their origin in errors). With
  // loss_mask (count values, each 0 or 1) the dataset gets /loss_mask; the first append decides
  // whether it has one, and every later append must agree.
  void append(const uint32_t* tokens, int64_t count, const std::string& source,
              const uint8_t* loss_mask = nullptr);
  int64_t size() const { return size_; }
  // Records that a document starts at token `offset` (any time before finish(); offsets come in
  // ascending order, a repeated one, an empty document, is dropped, and one at the end is dropped
  // at finish()). The dataset then gets /doc_starts, whose first entry must be 0.
  void add_document_start(int64_t offset);
  // Closes the file, fsyncs it and moves it into place. Fails when no token was written.
  void finish();

 private:
  // Fails naming the signal when a stop was recorded.
  void stop_if_requested() const;

  std::string path_, tmp_path_;
  int64_t vocab_size_;
  std::string tokenizer_;
  TokenizerFiles tokenizer_files_;
  bool overwrite_;
  bool finished_ = false;
  int64_t size_ = 0;
  std::vector<int64_t> doc_starts_;
  DType dtype_;
  h5::Id file_, dataset_, mask_dataset_;
};

// Read access to a token dataset.
class TokenDataset {
 public:
  explicit TokenDataset(const std::string& path);

  const std::string& path() const { return path_; }
  int64_t size() const { return size_; }
  int64_t vocab_size() const { return vocab_size_; }
  const std::string& tokenizer() const { return tokenizer_; }
  DType dtype() const { return dtype_; }
  // The Hugging Face tokenizer files stored with the tokens (empty for other datasets).
  TokenizerFiles tokenizer_files() const;

  // Tokens [begin, begin+count) into out.
  void read(int64_t begin, int64_t count, int32_t* out) const;
  // Whether the dataset has a /loss_mask (SFT data), and its values [begin, begin+count) into
  // out; a value other than 0 or 1 fails naming the file and the index.
  bool has_loss_mask() const { return mask_dataset_.valid(); }
  void read_loss_mask(int64_t begin, int64_t count, uint8_t* out) const;
  // Document boundaries (/doc_starts), read and checked when the file is opened: whether there
  // are any, the starts in ascending order (the first is 0), and the start of the document that
  // holds token `position`.
  bool has_documents() const { return !doc_starts_.empty(); }
  int64_t num_documents() const { return static_cast<int64_t>(doc_starts_.size()); }
  const std::vector<int64_t>& document_starts() const { return doc_starts_; }
  int64_t document_start_of(int64_t position) const;
  // The number of ones in the loss mask (size() without one): a full pass.
  int64_t counted_tokens() const;
  // Fails naming the file and the first index whose token is ≥ vocab.
  void check_max_token(int64_t vocab) const;
  // Smallest and largest token (a full pass over the data).
  void min_max(int32_t* min_token, int32_t* max_token) const;
  // What identifies the data, cheaply: the token count and type, the vocabulary, the tokenizer
  // and a CRC-32C of the first and last 65536 tokens (and of the loss mask there, if any). Two
  // ranks (or a run and the checkpoint it resumes) with the same identity read the same data; the
  // path is not part of it.
  std::string identity() const;

 private:
  // Fails naming the file unless [begin, begin+count) lies within the tokens.
  void check_range(int64_t begin, int64_t count, const char* what) const;
  // Reads and checks /doc_starts.
  void read_document_starts();
  // Calls fn(offset, tokens, count) over the whole dataset in bounded chunks.
  template <typename Fn>
  void for_each_chunk(Fn&& fn) const;

  std::string path_;
  h5::Id file_, dataset_, mask_dataset_;
  int64_t size_ = 0;
  int64_t vocab_size_ = 0;
  std::string tokenizer_;
  DType dtype_ = DType::kUint16;
  std::vector<int64_t> doc_starts_;
};

// Input kinds of prepare-data.
enum class TokenSource {
  kText,        // UTF-8 text, byte tokenizer (vocab 256)
  kLlmcBin,     // llm.c shards: GPT-2 uint16 or Llama 3 uint32 tokens, told by the header
  kNanoGptBin,  // nanoGPT's headerless uint16 tokens
};

// What the dataset is labelled with. 0 / "": what the format says (llm.c: gpt2 50257 or llama3
// 128256); a headerless nanoGPT file needs vocab_size and is labelled "unknown" unless told.
struct TokenLabel {
  int64_t vocab_size = 0;
  std::string tokenizer;
};

// Builds a token dataset at `out` from the inputs, concatenated in order (all llm.c files must
// hold the same tokenizer's tokens). Returns the number of tokens. Any bad input (missing or
// empty file, bad header, truncated body, a token ≥ the vocabulary) throws naming the file, and
// nothing is left at `out`.
int64_t prepare_token_dataset(const std::vector<std::string>& inputs, TokenSource kind,
                              const std::string& out, const TokenLabel& label, bool overwrite);

}  // namespace zt
