#include "io/token_dataset.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>

#include "io/fs_util.h"
#include "runtime/signals.h"
#include "util/crc32c.h"
#include "util/error.h"

namespace zt {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kChunkTokens = int64_t{1} << 20;  // HDF5 chunk and streaming buffer
constexpr const char* kTokensDataset = "tokens";
constexpr const char* kLossMaskDataset = "loss_mask";
constexpr const char* kDocStartsDataset = "doc_starts";

std::string in_file(const std::string& path) {
  return "token dataset '" + path + "'";
}

// ZT_DEBUG_STALL_DATASET=SECONDS (tests): sleeps that long, or until a stop signal is recorded.
void stall_if_requested() {
  const char* value = std::getenv("ZT_DEBUG_STALL_DATASET");
  if (!value || !*value) return;
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(std::atof(value));
  while (std::chrono::steady_clock::now() < until && !received_stop_signal())
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// TokenDatasetWriter

TokenDatasetWriter::TokenDatasetWriter(std::string path, int64_t vocab_size, std::string tokenizer,
                                       bool overwrite)
    : path_(std::move(path)),
      tmp_path_(temp_sibling(path_)),
      vocab_size_(vocab_size),
      tokenizer_(std::move(tokenizer)),
      overwrite_(overwrite),
      dtype_(vocab_size <= 65536 ? DType::kUint16 : DType::kUint32) {
  ZT_CHECK(vocab_size_ > 0 && vocab_size_ <= std::numeric_limits<int32_t>::max(),
           "vocab size must be in [1, 2^31), got " + std::to_string(vocab_size_));
  check_output_file_writable(path_, overwrite_);
  std::error_code ec;
  if (!dir_parent(path_).empty()) fs::create_directories(dir_parent(path_), ec);
  file_ = h5::create_file(tmp_path_);
  dataset_ =
      h5::create_dataset(file_, kTokensDataset, dtype_, {0}, in_file(tmp_path_), kChunkTokens);
}

TokenDatasetWriter::~TokenDatasetWriter() {
  if (finished_) return;
  dataset_.reset();
  mask_dataset_.reset();
  file_.reset();
  std::error_code ec;
  fs::remove(tmp_path_, ec);
}

void TokenDatasetWriter::stop_if_requested() const {
  if (received_stop_signal())
    fail_if_stopped("while writing token dataset '" + path_ + "': nothing written");
}

void TokenDatasetWriter::append(const uint32_t* tokens, int64_t count, const std::string& source,
                                const uint8_t* loss_mask) {
  ZT_CHECK(!finished_, "token dataset '" + path_ + "' is already finished");
  stop_if_requested();
  for (int64_t i = 0; i < count; ++i) {
    ZT_CHECK(tokens[i] < static_cast<uint64_t>(vocab_size_),
             source + ": token " + std::to_string(tokens[i]) + " (dataset position " +
                 std::to_string(size_ + i) + ") is not below the vocab size " +
                 std::to_string(vocab_size_));
    ZT_CHECK(!loss_mask || loss_mask[i] <= 1,
             source + ": loss mask value " + std::to_string(loss_mask ? loss_mask[i] : 0) +
                 " (dataset position " + std::to_string(size_ + i) + ") is not 0 or 1");
  }
  if (count == 0) return;
  const std::string where = in_file(tmp_path_);
  if (size_ == 0 && loss_mask)
    mask_dataset_ =
        h5::create_dataset(file_, kLossMaskDataset, DType::kUint8, {0}, where, kChunkTokens);
  ZT_CHECK(mask_dataset_.valid() == (loss_mask != nullptr),
           source + ": a loss mask must come with every token of '" + path_ + "' or with none");
  h5::set_extent(dataset_, size_ + count, where);
  h5::write_box(dataset_, DType::kUint32, {size_}, {count}, tokens, where);
  if (loss_mask) {
    h5::set_extent(mask_dataset_, size_ + count, where);
    h5::write_box(mask_dataset_, DType::kUint8, {size_}, {count}, loss_mask, where);
  }
  if (size_ == 0) stall_if_requested();
  size_ += count;
}

void TokenDatasetWriter::add_document_start(int64_t offset) {
  ZT_CHECK(!finished_, "token dataset '" + path_ + "' is already finished");
  ZT_CHECK(offset >= 0 && (doc_starts_.empty() || offset >= doc_starts_.back()),
           "token dataset '" + path_ + "': document start " + std::to_string(offset) +
               " is before the previous start " +
               std::to_string(doc_starts_.empty() ? int64_t{0} : doc_starts_.back()));
  if (doc_starts_.empty() || offset > doc_starts_.back()) doc_starts_.push_back(offset);
}

void TokenDatasetWriter::finish() {
  ZT_CHECK(!finished_, "token dataset '" + path_ + "' finished twice");
  ZT_CHECK(size_ > 0, "no tokens to write to '" + path_ + "'");
  const std::string where = in_file(tmp_path_);
  while (!doc_starts_.empty() && doc_starts_.back() >= size_) doc_starts_.pop_back();
  if (!doc_starts_.empty()) {
    ZT_CHECK(doc_starts_.front() == 0, "token dataset '" + path_ +
                                           "': the first document starts at " +
                                           std::to_string(doc_starts_.front()) + ", not at 0");
    const auto n = static_cast<int64_t>(doc_starts_.size());
    h5::Id d = h5::create_dataset(file_, kDocStartsDataset, DType::kUint64, {n}, where);
    h5::write_box(d, DType::kInt64, {0}, {n}, doc_starts_.data(), where);
    d.close(where);
  }
  h5::write_attr_int64(dataset_, "vocab_size", vocab_size_, where);
  h5::write_attr_string(dataset_, "tokenizer", tokenizer_, where);
  h5::write_attr_int64(file_, "vocab_size", vocab_size_, where);
  h5::write_attr_string(file_, "tokenizer", tokenizer_, where);
  if (!tokenizer_files_.empty()) {
    for (const auto& [name, text] : tokenizer_files_.files) {
      if (!named_chat_template_name(name).empty())
        h5::create_group_once(file_, kNamedChatTemplateDir, where);
      h5::Id d = h5::create_dataset(file_, name, DType::kUint8, {static_cast<int64_t>(text.size())},
                                    where);
      if (!text.empty())
        h5::write_box(d, DType::kUint8, {0}, {static_cast<int64_t>(text.size())}, text.data(),
                      where);
      d.close(where);
    }
    h5::write_attr_int64(file_, "bos_token_id", tokenizer_files_.bos_token_id, where);
    h5::write_attr_int64(file_, "eos_token_id", tokenizer_files_.eos_token_id, where);
  }
  dataset_.close(where);
  if (mask_dataset_.valid()) mask_dataset_.close(where);
  file_.close(where);
  fsync_path(tmp_path_);
  stop_if_requested();  // the last moment a stop keeps the dataset from being published
  move_into_place(tmp_path_, path_, overwrite_);
  finished_ = true;
}

// ---------------------------------------------------------------------------------------------
// TokenDataset

TokenDataset::TokenDataset(const std::string& path) : path_(path) {
  h5::require_readable_hdf5(path_, "token dataset");
  file_ = h5::open_file(path_);
  const std::string where = in_file(path_) + ", dataset '/tokens'";
  ZT_CHECK(h5::has_dataset(file_, kTokensDataset), where + " does not exist");
  dataset_ = h5::open_dataset(file_, kTokensDataset, where);
  const auto shape = h5::dataset_shape(dataset_, where);
  ZT_CHECK(shape.size() == 1, where + " must be 1-D, has shape " + h5::shape_string(shape));
  size_ = shape[0];
  dtype_ = h5::dataset_dtype(dataset_, where);
  ZT_CHECK(dtype_ == DType::kUint16 || dtype_ == DType::kUint32,
           where + " has element type " + dtype_name(dtype_) + ", expected uint16 or uint32");
  // Attributes live on the file (root group); datasets written by others may carry them on
  // /tokens only.
  const hid_t holder = H5Aexists(file_, "vocab_size") > 0 ? file_.get() : dataset_.get();
  vocab_size_ = h5::read_attr_int64(holder, "vocab_size", in_file(path_));
  tokenizer_ = H5Aexists(holder, "tokenizer") > 0
                   ? h5::read_attr_string(holder, "tokenizer", in_file(path_))
                   : "unknown";
  ZT_CHECK(vocab_size_ > 0, in_file(path_) + ": vocab_size must be positive");
  if (h5::has_dataset(file_, kLossMaskDataset)) {
    const std::string at = in_file(path_) + ", dataset '/loss_mask'";
    mask_dataset_ = h5::open_dataset(file_, kLossMaskDataset, at);
    const auto mask_shape = h5::dataset_shape(mask_dataset_, at);
    ZT_CHECK(mask_shape == std::vector<int64_t>{size_},
             at + " has shape " + h5::shape_string(mask_shape) + ", expected [" +
                 std::to_string(size_) + "] (one value per token of '/tokens')");
    const DType mask_dtype = h5::dataset_dtype(mask_dataset_, at);
    ZT_CHECK(mask_dtype == DType::kUint8,
             at + " has element type " + dtype_name(mask_dtype) + ", expected uint8");
  }
  if (h5::has_dataset(file_, kDocStartsDataset)) read_document_starts();
}

void TokenDataset::read_document_starts() {
  const std::string at = in_file(path_) + ", dataset '/doc_starts'";
  const h5::Id d = h5::open_dataset(file_, kDocStartsDataset, at);
  const auto shape = h5::dataset_shape(d, at);
  ZT_CHECK(shape.size() == 1 && shape[0] > 0,
           at + " has shape " + h5::shape_string(shape) + ", expected one or more offsets");
  const DType dtype = h5::dataset_dtype(d, at);
  ZT_CHECK(dtype == DType::kUint64,
           at + " has element type " + dtype_name(dtype) + ", expected uint64");
  ZT_CHECK(shape[0] <= size_, at + " holds " + std::to_string(shape[0]) +
                                  " document starts, more than the " + std::to_string(size_) +
                                  " tokens");
  // Read in place: uint64 on disk, held as int64 once every entry is checked to lie below the
  // token count (a dataset with millions of documents is not copied).
  doc_starts_.resize(static_cast<size_t>(shape[0]));
  h5::read_box(d, DType::kUint64, {0}, {shape[0]}, doc_starts_.data(), at);
  auto entry = [&](size_t i) { return static_cast<uint64_t>(doc_starts_[i]); };
  ZT_CHECK(entry(0) == 0,
           at + ": the first document starts at " + std::to_string(entry(0)) + ", not at token 0");
  for (size_t i = 1; i < doc_starts_.size(); ++i)
    ZT_CHECK(entry(i) > entry(i - 1) && entry(i) < static_cast<uint64_t>(size_),
             at + ": entry " + std::to_string(i) + " (" + std::to_string(entry(i)) +
                 ") is not above the entry before it (" + std::to_string(entry(i - 1)) +
                 ") and below the " + std::to_string(size_) + " tokens");
}

int64_t TokenDataset::document_start_of(int64_t position) const {
  if (doc_starts_.empty()) return 0;
  return *(std::upper_bound(doc_starts_.begin(), doc_starts_.end(), position) - 1);
}

void TokenDataset::check_range(int64_t begin, int64_t count, const char* what) const {
  ZT_CHECK(begin >= 0 && count >= 0 && begin + count <= size_,
           in_file(path_) + ": " + what + " range [" + std::to_string(begin) + ", " +
               std::to_string(begin + count) + ") is outside its " + std::to_string(size_) +
               " tokens");
}

void TokenDataset::read(int64_t begin, int64_t count, int32_t* out) const {
  check_range(begin, count, "token");
  if (count == 0) return;
  // uint32 -> int32 is exact because the vocab is below 2^31.
  h5::read_box(dataset_, DType::kInt32, {begin}, {count}, out, in_file(path_));
}

void TokenDataset::read_loss_mask(int64_t begin, int64_t count, uint8_t* out) const {
  ZT_CHECK(has_loss_mask(), in_file(path_) + " has no '/loss_mask'");
  check_range(begin, count, "loss mask");
  if (count == 0) return;
  h5::read_box(mask_dataset_, DType::kUint8, {begin}, {count}, out, in_file(path_));
  for (int64_t i = 0; i < count; ++i)
    ZT_CHECK(out[i] <= 1, in_file(path_) + ", dataset '/loss_mask': value " +
                              std::to_string(out[i]) + " at index " + std::to_string(begin + i) +
                              " is not 0 or 1");
}

int64_t TokenDataset::counted_tokens() const {
  if (!has_loss_mask()) return size_;
  std::vector<uint8_t> buf(static_cast<size_t>(std::min(size_, kChunkTokens)));
  int64_t counted = 0;
  for (int64_t off = 0; off < size_; off += kChunkTokens) {
    const int64_t n = std::min(kChunkTokens, size_ - off);
    read_loss_mask(off, n, buf.data());
    counted += std::count(buf.begin(), buf.begin() + n, uint8_t{1});
  }
  return counted;
}

TokenizerFiles TokenDataset::tokenizer_files() const {
  TokenizerFiles tokenizer;
  const std::string where = in_file(path_);
  std::vector<std::string> names = tokenizer_file_names();
  for (const std::string& file : h5::member_names(file_, kNamedChatTemplateDir, where)) {
    const std::string path = std::string(kNamedChatTemplateDir) + "/" + file;
    if (!named_chat_template_name(path).empty()) names.push_back(path);
  }
  for (const std::string& name : names) {
    if (!h5::has_dataset(file_, name)) continue;
    const h5::Id d = h5::open_dataset(file_, name, where);
    const auto shape = h5::dataset_shape(d, where + ", dataset '/" + name + "'");
    ZT_CHECK(shape.size() == 1, where + ": '/" + name + "' must be 1-D bytes");
    std::string text(static_cast<size_t>(shape[0]), '\0');
    if (!text.empty()) h5::read_box(d, DType::kUint8, {0}, {shape[0]}, text.data(), where);
    tokenizer.files[name] = std::move(text);
  }
  if (tokenizer.empty()) return tokenizer;
  tokenizer.bos_token_id = h5::read_attr_int64(file_, "bos_token_id", where);
  tokenizer.eos_token_id = h5::read_attr_int64(file_, "eos_token_id", where);
  return tokenizer;
}

template <typename Fn>
void TokenDataset::for_each_chunk(Fn&& fn) const {
  std::vector<int32_t> buf(static_cast<size_t>(std::min(size_, kChunkTokens)));
  for (int64_t off = 0; off < size_; off += kChunkTokens) {
    const int64_t n = std::min(kChunkTokens, size_ - off);
    read(off, n, buf.data());
    fn(off, buf.data(), n);
  }
}

void TokenDataset::check_max_token(int64_t vocab) const {
  for_each_chunk([&](int64_t off, const int32_t* tokens, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
      ZT_CHECK(tokens[i] >= 0 && tokens[i] < vocab,
               in_file(path_) + ": token " + std::to_string(tokens[i]) + " at index " +
                   std::to_string(off + i) + " is not below the vocab size " +
                   std::to_string(vocab));
  });
}

void TokenDataset::min_max(int32_t* min_token, int32_t* max_token) const {
  int32_t lo = std::numeric_limits<int32_t>::max(), hi = std::numeric_limits<int32_t>::min();
  for_each_chunk([&](int64_t, const int32_t* tokens, int64_t n) {
    const auto [mn, mx] = std::minmax_element(tokens, tokens + n);
    lo = std::min(lo, *mn);
    hi = std::max(hi, *mx);
  });
  *min_token = size_ > 0 ? lo : 0;
  *max_token = size_ > 0 ? hi : 0;
}

// ---------------------------------------------------------------------------------------------
// prepare-data

namespace {

// llm.c shard: a header of 256 little-endian int32 (magic, version, token count), then the
// tokens: GPT-2 (magic 20240520, version 1, uint16) or Llama 3 (magic 20240801, version 7,
// uint32), as llm.c's dev/data/data_common.py writes them.
struct LlmcFormat {
  int32_t magic, version;
  int token_bytes;
  const char* tokenizer;
  int64_t vocab_size;
  int64_t document_separator;  // written before each document
};
constexpr int64_t kGpt2EndOfText = 50256;
constexpr LlmcFormat kLlmcFormats[] = {
    {kLlmcMagic, 1, 2, "gpt2", kGpt2VocabSize, kGpt2EndOfText},
    {kLlmcLlama3Magic, 7, 4, "llama3", kLlama3VocabSize, 128000},
};

// A file format whose bytes a byte-level model would learn as if they were text: a compressed
// file, or a table (Parquet, Arrow) whose rows --tokenizer with --jsonl reads, or an llm.c shard,
// which --bin reads.
struct BinaryFormat {
  const char* name;
  bool table;
  const char* reader = nullptr;  // the option that reads it, where it is not text or a table
};

// What a file is when it is compressed (gzip, xz, zstd, or pzstd's skippable frame first, bzip2),
// an llm.c token shard (its magic and version, as --bin reads them), Parquet or Arrow (a stream, as
// Hugging Face datasets writes its files, or an IPC file); nullopt for anything else. `head`: its
// first bytes; `tail`: its last 4; `size`: its size. bzip2's "BZh" is checked with its block size
// and its first block's magic, and Parquet's "PAR1" with the footer's or, for a file cut short, the
// control character a page header starts with, since text may start with either. An Arrow stream's
// continuation marker (0xFFFFFFFF) is no UTF-8 text; an Arrow IPC file's magic is checked with the
// two zero bytes that pad it.
std::optional<BinaryFormat> binary_format(std::string_view head, std::string_view tail,
                                          int64_t size) {
  static constexpr std::pair<std::string_view, BinaryFormat> kMagics[] = {
      {{"\x1f\x8b", 2}, {"gzip-compressed", false}},
      {{"\xfd\x37\x7a\x58\x5a\x00", 6}, {"xz-compressed", false}},
      {{"\x28\xb5\x2f\xfd", 4}, {"zstd-compressed", false}},
      {{"\xff\xff\xff\xff", 4}, {"an Arrow file", true}},
      {{"ARROW1\0\0", 8}, {"an Arrow file", true}}};
  for (const auto& [magic, format] : kMagics)
    if (head.starts_with(magic)) return format;
  if (head.size() >= 4 && (static_cast<unsigned char>(head[0]) & 0xF0) == 0x50 &&
      head.substr(1, 3) == "\x2a\x4d\x18")
    return BinaryFormat{"zstd-compressed", false};
  if (head.size() >= 10 && head.starts_with("BZh") && head[3] >= '1' && head[3] <= '9' &&
      (head.substr(4, 6) == "1AY&SY" || head.substr(4, 6) == std::string_view("\x17rE8P\x90", 6)))
    return BinaryFormat{"bzip2-compressed", false};
  const bool control_after_magic =
      head.size() > 4 && static_cast<unsigned char>(head[4]) < 0x20 &&
      std::string_view("\t\n\r").find(head[4]) == std::string_view::npos;
  if (head.starts_with("PAR1") && ((size >= 12 && tail == "PAR1") || control_after_magic))
    return BinaryFormat{"a Parquet file", true};
  // llm.c's shards: a 1024-byte header of int32 whose first two are a format's magic and version.
  if (head.size() >= 8 && size >= 1024) {
    int32_t magic = 0, version = 0;
    std::memcpy(&magic, head.data(), 4);
    std::memcpy(&version, head.data() + 4, 4);
    for (const LlmcFormat& f : kLlmcFormats)
      if (f.magic == magic && f.version == version)
        return BinaryFormat{"an llm.c token shard", false, "--bin"};
  }
  return std::nullopt;
}

// Refuses a byte-level text file that is compressed, Parquet or Arrow (binary_format), naming it:
// its first 10 bytes, its size and its last 4, read through one stream.
void check_not_binary(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  ZT_CHECK(in.good(), "cannot open text file '" + path + "'");
  const auto size = static_cast<int64_t>(in.tellg());
  std::string head(static_cast<size_t>(std::min<int64_t>(10, size)), '\0');
  std::string tail(static_cast<size_t>(std::min<int64_t>(4, size)), '\0');
  in.seekg(0);
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  in.seekg(size - static_cast<int64_t>(tail.size()));
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  ZT_CHECK(!in.fail(), "error reading text file '" + path + "'");
  const std::optional<BinaryFormat> format = binary_format(head, tail, size);
  ZT_CHECK(!format, "text file '" + path + "' is " + format->name +
                        ": byte-level tokens would learn its bytes as text (" +
                        (format->reader  ? std::string(format->reader) + " reads it)"
                         : format->table ? "--tokenizer with --jsonl reads its rows)"
                                         : "decompress it, or give --tokenizer, which reads it)"));
}

// Byte-level tokenizer: every byte of the file is one token, and the file is one document.
void append_text_file(TokenDatasetWriter& writer, const std::string& path) {
  check_not_binary(path);
  writer.add_document_start(writer.size());
  std::ifstream in(path, std::ios::binary);
  ZT_CHECK(in.good(), "cannot open text file '" + path + "'");
  std::vector<char> bytes(static_cast<size_t>(kChunkTokens));
  std::vector<uint32_t> tokens(bytes.size());
  int64_t total = 0;
  while (in) {
    in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    const auto n = static_cast<int64_t>(in.gcount());
    for (int64_t i = 0; i < n; ++i)
      tokens[static_cast<size_t>(i)] = static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
    writer.append(tokens.data(), n, "text file '" + path + "'");
    total += n;
  }
  ZT_CHECK(!in.bad(), "error reading text file '" + path + "'");
  ZT_CHECK(total > 0, "text file '" + path + "' is empty");
}

struct LlmcHeader {
  LlmcFormat format;
  int64_t tokens;
};

LlmcHeader read_llmc_header(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ZT_CHECK(in.good(), "cannot open token file '" + path + "'");
  std::array<int32_t, 256> header{};
  in.read(reinterpret_cast<char*>(header.data()), sizeof header);
  ZT_CHECK(in.gcount() == static_cast<std::streamsize>(sizeof header),
           "'" + path + "' is too short for an llm.c .bin header (1024 bytes)");
  const LlmcFormat* format = nullptr;
  for (const LlmcFormat& f : kLlmcFormats)
    if (f.magic == header[0]) format = &f;
  ZT_CHECK(format != nullptr,
           "'" + path + "' has bad magic " + std::to_string(header[0]) + " (expected " +
               std::to_string(kLlmcMagic) + " or " + std::to_string(kLlmcLlama3Magic) +
               ", an llm.c .bin token file; a headerless nanoGPT file needs --nanogpt-bin)");
  ZT_CHECK(header[1] == format->version, "'" + path + "' has unsupported .bin version " +
                                             std::to_string(header[1]) + " (expected " +
                                             std::to_string(format->version) + " for magic " +
                                             std::to_string(format->magic) + ")");
  ZT_CHECK(header[2] >= 0, "'" + path + "' has a negative token count");
  const auto body_bytes = static_cast<int64_t>(fs::file_size(path)) - 1024;
  const int64_t width = format->token_bytes;
  ZT_CHECK(body_bytes >= width * header[2],
           "'" + path + "' is truncated: header promises " + std::to_string(header[2]) +
               " tokens but the file holds " + std::to_string(body_bytes / width));
  return {*format, header[2]};
}

// The token that separates documents in a token file: llm.c writes it before each document
// (dev/data/fineweb.py: GPT-2's <|endoftext|> 50256, Llama 3's <|begin_of_text|> 128000),
// nanoGPT after each one (data/openwebtext/prepare.py: 50256). A file is cut into documents at
// its separators only: llm.c splits documents across shards, and the shards are concatenated.
struct DocumentSeparator {
  int64_t token = -1;  // -1: none known, the tokens are one stream
  bool precedes_document = true;
};

// `count` little-endian tokens of `width` bytes from `in` (at its position) into the writer, with a
// document start at each separator.
void append_tokens(TokenDatasetWriter& writer, std::ifstream& in, int64_t count, int width,
                   const std::string& path, const DocumentSeparator& separator) {
  std::vector<uint8_t> raw(static_cast<size_t>(std::min(count, kChunkTokens) * width));
  std::vector<uint32_t> tokens(static_cast<size_t>(std::min(count, kChunkTokens)));
  for (int64_t done = 0; done < count;) {
    const int64_t n = std::min(kChunkTokens, count - done);
    in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(n * width));
    ZT_CHECK(in.gcount() == n * width, "error reading tokens of '" + path + "'");
    for (int64_t i = 0; i < n; ++i) {
      uint32_t t = 0;
      for (int b = width - 1; b >= 0; --b) t = t << 8 | raw[static_cast<size_t>(i * width + b)];
      tokens[static_cast<size_t>(i)] = t;
      if (static_cast<int64_t>(t) == separator.token)
        writer.add_document_start(writer.size() + i + (separator.precedes_document ? 0 : 1));
    }
    writer.append(tokens.data(), n, "'" + path + "'");
    done += n;
  }
}

void append_llmc_bin(TokenDatasetWriter& writer, const std::string& path,
                     const LlmcFormat& expected) {
  const LlmcHeader header = read_llmc_header(path);
  ZT_CHECK(header.format.magic == expected.magic,
           "'" + path + "' holds " + header.format.tokenizer + " tokens (magic " +
               std::to_string(header.format.magic) + ") but the first file holds " +
               expected.tokenizer + " tokens: one dataset, one tokenizer");
  std::ifstream in(path, std::ios::binary);
  in.seekg(1024);
  append_tokens(writer, in, header.tokens, header.format.token_bytes, path,
                {header.format.document_separator, true});
}

// nanoGPT's prepare.py output: headerless uint16 tokens (numpy's tofile of a uint16 array).
void append_nanogpt_bin(TokenDatasetWriter& writer, const std::string& path,
                        const DocumentSeparator& separator) {
  const auto bytes = static_cast<int64_t>(fs::file_size(path));
  ZT_CHECK(bytes > 0, "nanoGPT token file '" + path + "' is empty");
  ZT_CHECK(bytes % 2 == 0, "nanoGPT token file '" + path + "' has an odd size (" +
                               std::to_string(bytes) + " bytes): not headerless uint16 tokens");
  std::ifstream in(path, std::ios::binary);
  ZT_CHECK(in.good(), "cannot open token file '" + path + "'");
  append_tokens(writer, in, bytes / 2, 2, path, separator);
}

}  // namespace

int64_t prepare_token_dataset(const std::vector<std::string>& inputs, TokenSource kind,
                              const std::string& out, const TokenLabel& label, bool overwrite) {
  ZT_CHECK(!inputs.empty(), "no input files given");
  for (const auto& path : inputs) {
    ZT_CHECK(fs::exists(path), "input file '" + path + "' does not exist");
    ZT_CHECK(fs::is_regular_file(path), "input '" + path + "' is not a regular file");
  }
  int64_t vocab_size = label.vocab_size;
  std::string tokenizer = label.tokenizer;
  LlmcFormat llmc{};
  switch (kind) {
    case TokenSource::kText:
      ZT_CHECK(vocab_size == 0 || vocab_size == kByteVocabSize,
               "text uses 256 byte tokens: a vocabulary size does not apply");
      vocab_size = kByteVocabSize;
      tokenizer = "byte";
      break;
    case TokenSource::kLlmcBin:
      llmc = read_llmc_header(inputs.front()).format;
      if (vocab_size == 0) vocab_size = llmc.vocab_size;
      if (tokenizer.empty()) tokenizer = llmc.tokenizer;
      break;
    case TokenSource::kNanoGptBin:
      ZT_CHECK(vocab_size > 0,
               "nanoGPT .bin files carry no header: give the vocabulary size (50257 for "
               "nanoGPT's GPT-2 tokens, meta.pkl's vocab_size for character-level data)");
      if (tokenizer.empty()) tokenizer = "unknown";
      break;
  }
  TokenDatasetWriter writer(out, vocab_size, tokenizer, overwrite);
  // nanoGPT's GPT-2 data ends each document with <|endoftext|>; other headerless data (such as
  // character-level text) has no separator to cut at and stays one stream.
  const DocumentSeparator nanogpt_separator{
      vocab_size == kGpt2VocabSize ? kGpt2EndOfText : int64_t{-1}, false};
  if (kind == TokenSource::kLlmcBin || nanogpt_separator.token >= 0) writer.add_document_start(0);
  for (const auto& path : inputs) {
    if (kind == TokenSource::kText) append_text_file(writer, path);
    if (kind == TokenSource::kLlmcBin) append_llmc_bin(writer, path, llmc);
    if (kind == TokenSource::kNanoGptBin) append_nanogpt_bin(writer, path, nanogpt_separator);
  }
  writer.finish();
  return writer.size();
}

std::string TokenDataset::identity() const {
  constexpr int64_t kSample = 65536;
  std::vector<int32_t> tokens(static_cast<size_t>(std::min(kSample, size_)));
  std::vector<uint8_t> mask(has_loss_mask() ? tokens.size() : 0);
  uint32_t crc = 0;
  for (const int64_t begin : {int64_t{0}, std::max<int64_t>(0, size_ - kSample)}) {
    read(begin, static_cast<int64_t>(tokens.size()), tokens.data());
    crc = crc32c_extend(crc, tokens.data(), tokens.size() * sizeof(int32_t));
    if (mask.empty()) continue;
    read_loss_mask(begin, static_cast<int64_t>(mask.size()), mask.data());
    crc = crc32c_extend(crc, mask.data(), mask.size());
  }
  std::string documents;
  if (has_documents())
    documents =
        ", documents " + std::to_string(doc_starts_.size()) + " (starts CRC-32C " +
        crc32c_hex(crc32c_extend(0, doc_starts_.data(), doc_starts_.size() * sizeof(int64_t))) +
        ")";
  return std::to_string(size_) + " " + dtype_name(dtype_) + " tokens" +
         (has_loss_mask() ? " with a loss mask" : "") + documents + ", vocabulary " +
         std::to_string(vocab_size_) + ", tokenizer " + tokenizer_ + ", sample CRC-32C " +
         crc32c_hex(crc);
}

}  // namespace zt
