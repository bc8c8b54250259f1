// Token datasets: text (byte tokenizer), llm.c and nanoGPT .bin round trips, tokenizer files,
// range reads, validation.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <numeric>

#include <nlohmann/json.hpp>

#include "io/hdf5_util.h"
#include "io/token_dataset.h"
#include "test_io_support.h"
#include "test_token_data_support.h"
#include "util/error.h"

namespace zt {
namespace {

using testing::TempDir;

// An llm.c/nanoGPT shard: 256 int32 header (magic, version, count) then uint16 tokens.
std::string llmc_bin(const std::vector<uint16_t>& tokens, int32_t magic = kLlmcMagic,
                     int32_t version = 1, int64_t claimed = -1) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = static_cast<int32_t>(claimed >= 0 ? claimed : static_cast<int64_t>(tokens.size()));
  std::string bytes(reinterpret_cast<const char*>(header.data()), header.size() * 4);
  bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
  return bytes;
}

std::vector<int32_t> read_all(const TokenDataset& d) {
  std::vector<int32_t> out(static_cast<size_t>(d.size()));
  d.read(0, d.size(), out.data());
  return out;
}

TEST(IoTokenDataset, TextFilesRoundTripAsBytes) {
  TempDir tmp;
  const char raw[] = "caf\xc3\xa9 \xff\x00 end";  // UTF-8, a stray byte, a NUL
  const std::string a = "Hello, world!\n", b(raw, sizeof raw - 1);
  testing::write_file(tmp / "a.txt", a);
  testing::write_file(tmp / "b.txt", b);
  const int64_t n = prepare_token_dataset({tmp / "a.txt", tmp / "b.txt"}, TokenSource::kText,
                                          tmp / "out.h5", {}, false);
  const std::string all = a + b;
  EXPECT_EQ(n, static_cast<int64_t>(all.size()));
  const TokenDataset d(tmp / "out.h5");
  EXPECT_EQ(d.size(), n);
  EXPECT_EQ(d.vocab_size(), 256);
  EXPECT_EQ(d.tokenizer(), "byte");
  EXPECT_EQ(d.dtype(), DType::kUint16);
  const auto tokens = read_all(d);
  for (size_t i = 0; i < all.size(); ++i)
    ASSERT_EQ(tokens[i], static_cast<unsigned char>(all[i])) << i;
  std::vector<int32_t> part(5);
  d.read(7, 5, part.data());
  EXPECT_EQ(part, std::vector<int32_t>(tokens.begin() + 7, tokens.begin() + 12));
  EXPECT_THROW(d.read(n - 2, 5, part.data()), Error);
  int32_t lo = 0, hi = 0;
  d.min_max(&lo, &hi);
  EXPECT_EQ(lo, *std::min_element(tokens.begin(), tokens.end()));
  EXPECT_EQ(hi, 255);
  EXPECT_NO_THROW(d.check_max_token(256));
}

// An llm.c shard's bytes: its 256 int32 header (magic, version, 4 tokens) and 4 uint16 tokens.
std::string llmc_shard(int32_t magic, int32_t version) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = 4;
  std::string bytes(reinterpret_cast<const char*>(header.data()), header.size() * 4);
  return bytes + std::string(8, '\x01');
}

// A compressed file or a Parquet file given as byte-level text is refused naming the file and
// its format (its bytes would be learned as text); text that merely starts like bzip2's "BZh" or
// Parquet's "PAR1" is text. The heads are those gzip, xz, zstd, pzstd (a skippable frame first),
// bzip2 -9 and pyarrow write (oracle_prepare_files runs the tools themselves).
TEST(IoTokenDataset, CompressedParquetOrArrowFilesAreNotByteLevelText) {
  TempDir tmp;
  const std::pair<std::string, const char*> heads[] = {
      {std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00", 8) + "rest", "gzip-compressed"},
      {std::string("\xfd\x37\x7a\x58\x5a\x00\x00\x04", 8) + "rest", "xz-compressed"},
      {std::string("\x28\xb5\x2f\xfd\x24\x0c", 6) + "rest", "zstd-compressed"},
      {std::string("\x50\x2a\x4d\x18\x04\x00\x00\x00", 8) + "rest", "zstd-compressed"},
      {"BZh91AY&SYrest", "bzip2-compressed"},
      {"PAR1\x15\x04restPAR1", "a Parquet file"},
      {"PAR1\x15\x04cut short", "a Parquet file"},
      {std::string("\xff\xff\xff\xff\xb8\x03\x00\x00", 8) + "rest", "an Arrow file"},
      {std::string("ARROW1\x00\x00", 8) + "rest", "an Arrow file"},
      {llmc_shard(kLlmcMagic, 1), "an llm.c token shard"},
      {llmc_shard(kLlmcLlama3Magic, 7), "an llm.c token shard"}};
  for (const auto& [head, format] : heads) {
    testing::write_file(tmp / "data", head);
    try {
      prepare_token_dataset({tmp / "data"}, TokenSource::kText, tmp / "o.h5", {}, false);
      FAIL() << format << " was accepted as text";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(tmp / "data"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(format), std::string::npos) << e.what();
      if (std::string(format) == "an llm.c token shard") {
        EXPECT_NE(std::string(e.what()).find("--bin reads it"), std::string::npos) << e.what();
      }
    }
    EXPECT_TRUE(testing::no_output_left(tmp / "o.h5"));
  }
  for (const std::string text :
       {"BZh9 opens a bzip2 stream, and this is text.\n", "PAR1 of the report is done.\n",
        "ARROW1 is a fine name for a band.\n"}) {
    testing::write_file(tmp / "text.txt", text);
    EXPECT_EQ(prepare_token_dataset({tmp / "text.txt"}, TokenSource::kText, tmp / "t.h5", {}, true),
              static_cast<int64_t>(text.size()));
  }
}

TEST(IoTokenDataset, LlmcBinFilesConcatenateInOrder) {
  TempDir tmp;
  std::vector<uint16_t> first(3000), second(17);
  std::iota(first.begin(), first.end(), 0);
  std::iota(second.begin(), second.end(), 50000);
  testing::write_file(tmp / "a.bin", llmc_bin(first));
  testing::write_file(tmp / "b.bin", llmc_bin(second));
  prepare_token_dataset({tmp / "a.bin", tmp / "b.bin"}, TokenSource::kLlmcBin, tmp / "out.h5", {},
                        false);
  const TokenDataset d(tmp / "out.h5");
  EXPECT_EQ(d.size(), 3017);
  EXPECT_EQ(d.vocab_size(), kGpt2VocabSize);
  EXPECT_EQ(d.tokenizer(), "gpt2");
  const auto tokens = read_all(d);
  EXPECT_EQ(tokens[2999], 2999);
  EXPECT_EQ(tokens[3000], 50000);
  EXPECT_EQ(tokens[3016], 50016);
  // The first offending index is named when validating against a smaller vocab.
  try {
    d.check_max_token(2500);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("index 2500"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(tmp / "out.h5"), std::string::npos) << e.what();
  }
}

// llm.c's Llama 3 shards: magic 20240801, version 7, uint32 tokens.
TEST(IoTokenDataset, LlmcLlama3FilesAreUint32AndLabelledLlama3) {
  TempDir tmp;
  std::vector<int32_t> header(256, 0);
  header[0] = kLlmcLlama3Magic;
  header[1] = 7;
  header[2] = 4;
  const std::vector<uint32_t> tokens = {0, 65535, 65536, 128000};
  std::string bytes(reinterpret_cast<const char*>(header.data()), header.size() * 4);
  bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 4);
  testing::write_file(tmp / "l3.bin", bytes);
  prepare_token_dataset({tmp / "l3.bin"}, TokenSource::kLlmcBin, tmp / "l3.h5", {}, false);
  const TokenDataset d(tmp / "l3.h5");
  EXPECT_EQ(d.tokenizer(), "llama3");
  EXPECT_EQ(d.vocab_size(), kLlama3VocabSize);
  EXPECT_EQ(d.dtype(), DType::kUint32);
  EXPECT_EQ(read_all(d), (std::vector<int32_t>{0, 65535, 65536, 128000}));
  // Version 1 with the Llama 3 magic, and a GPT-2 shard after a Llama 3 one, are refused.
  header[1] = 1;
  testing::write_file(
      tmp / "v1.bin",
      std::string(reinterpret_cast<const char*>(header.data()), 1024) + bytes.substr(1024));
  EXPECT_THROW(
      prepare_token_dataset({tmp / "v1.bin"}, TokenSource::kLlmcBin, tmp / "v1.h5", {}, false),
      Error);
  testing::write_file(tmp / "g.bin", llmc_bin({1, 2, 3}));
  try {
    prepare_token_dataset({tmp / "l3.bin", tmp / "g.bin"}, TokenSource::kLlmcBin, tmp / "m.h5", {},
                          false);
    FAIL() << "a GPT-2 shard after a Llama 3 one was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(tmp / "g.bin"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("gpt2"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(testing::no_output_left(tmp / "m.h5"));
}

// nanoGPT's prepare.py writes np.array(ids, dtype=np.uint16).tofile(path): no header.
TEST(IoTokenDataset, NanoGptHeaderlessFilesNeedTheirVocabulary) {
  TempDir tmp;
  const std::vector<uint16_t> tokens = {5, 64, 0, 50256, 7};
  testing::write_file(tmp / "train.bin",
                      std::string(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2));
  EXPECT_THROW(
      prepare_token_dataset({tmp / "train.bin"}, TokenSource::kNanoGptBin, tmp / "n.h5", {}, false),
      Error);
  prepare_token_dataset({tmp / "train.bin"}, TokenSource::kNanoGptBin, tmp / "n.h5",
                        {kGpt2VocabSize, ""}, false);
  const TokenDataset d(tmp / "n.h5");
  EXPECT_EQ(d.tokenizer(), "unknown");
  EXPECT_EQ(d.vocab_size(), kGpt2VocabSize);
  EXPECT_EQ(read_all(d), (std::vector<int32_t>{5, 64, 0, 50256, 7}));
  prepare_token_dataset({tmp / "train.bin"}, TokenSource::kNanoGptBin, tmp / "n.h5",
                        {50304, "gpt2"}, true);
  EXPECT_EQ(TokenDataset(tmp / "n.h5").tokenizer(), "gpt2");
  // A token past the vocabulary, an odd size and an empty file are refused naming the file.
  EXPECT_THROW(prepare_token_dataset({tmp / "train.bin"}, TokenSource::kNanoGptBin, tmp / "s.h5",
                                     {65, ""}, false),
               Error);
  testing::write_file(tmp / "odd.bin", "abc");
  testing::write_file(tmp / "empty.bin", "");
  for (const char* name : {"odd.bin", "empty.bin"}) {
    try {
      prepare_token_dataset({tmp / name}, TokenSource::kNanoGptBin, tmp / "o.h5",
                            {kGpt2VocabSize, ""}, false);
      FAIL() << name << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(tmp / name), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(testing::no_output_left(tmp / "s.h5"));
}

TEST(IoTokenDataset, LargeVocabUsesUint32AndOutOfVocabTokensFail) {
  TempDir tmp;
  TokenDatasetWriter w(tmp / "big.h5", 100000, "custom");
  const std::vector<uint32_t> tokens = {0, 70000, 99999};
  w.append(tokens.data(), 3, "test");
  const std::vector<uint32_t> bad = {100000};
  EXPECT_THROW(w.append(bad.data(), 1, "test"), Error);
  w.finish();
  const TokenDataset d(tmp / "big.h5");
  EXPECT_EQ(d.dtype(), DType::kUint32);
  EXPECT_EQ(read_all(d), (std::vector<int32_t>{0, 70000, 99999}));
  // A .bin token above the vocab is rejected and no output is left.
  testing::write_file(tmp / "x.bin", llmc_bin({1, 2, 60000}));
  EXPECT_THROW(prepare_token_dataset({tmp / "x.bin"}, TokenSource::kLlmcBin, tmp / "x.h5",
                                     {kGpt2VocabSize, ""}, false),
               Error);
  EXPECT_TRUE(testing::no_output_left(tmp / "x.h5"));
}

// The tokenizer files travel with the tokens, and out again with bos/eos in generation_config.
TEST(IoTokenDataset, TokenizerFilesRoundTripAndWriteAGenerationConfig) {
  TempDir tmp;
  TokenDatasetWriter w(tmp / "t.h5", 400, "hf:tok");
  TokenizerFiles files;
  files.files["tokenizer.json"] = std::string("{\"model\": {}}\n") + std::string(100000, 'x');
  files.files["tokenizer_config.json"] = "{}";
  files.files["additional_chat_templates/tool_use.jinja"] = "{{ tools }}";  // in a subdirectory
  files.bos_token_id = 0;
  files.eos_token_id = 1;
  w.set_tokenizer_files(files);
  const std::vector<uint32_t> tokens = {0, 399, 5};
  w.append(tokens.data(), 3, "test");
  w.finish();
  const TokenDataset d(tmp / "t.h5");
  const TokenizerFiles back = d.tokenizer_files();
  EXPECT_EQ(back.files, files.files);
  EXPECT_EQ(back.bos_token_id, 0);
  EXPECT_EQ(back.eos_token_id, 1);
  std::filesystem::create_directories(tmp / "model");
  write_tokenizer_files(back, tmp / "model");
  const auto generation =
      nlohmann::json::parse(std::ifstream(tmp / "model/generation_config.json"));
  EXPECT_EQ(generation, (nlohmann::json{{"bos_token_id", 0}, {"eos_token_id", 1}}));
  // What a model directory holds reads back, the written generation_config.json with it.
  TokenizerFiles read = read_tokenizer_files(tmp / "model");
  EXPECT_EQ(read.files.size(), 4u);
  read.files.erase("generation_config.json");
  EXPECT_EQ(read.files, files.files);
  // info lists the files and the templates' names; a template list it cannot read is reported
  // in its line, not fatal.
  testing::RunResult r = testing::run_zerotrain("info --json " + tmp / "t.h5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto info = nlohmann::json::parse(r.output);
  EXPECT_EQ(info["tokenizer_files"], (nlohmann::json{"additional_chat_templates/tool_use.jinja",
                                                     "tokenizer.json", "tokenizer_config.json"}));
  EXPECT_EQ(info["chat_templates"], (nlohmann::json{"tool_use"}));
  files.files["tokenizer_config.json"] = R"({"chat_template": 3})";
  files.files.erase("additional_chat_templates/tool_use.jinja");
  TokenDatasetWriter odd(tmp / "odd.h5", 400, "hf:tok");
  odd.set_tokenizer_files(files);
  odd.append(tokens.data(), 3, "test");
  odd.finish();
  r = testing::run_zerotrain("info " + tmp / "odd.h5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tokenizer_files: tokenizer.json, tokenizer_config.json (chat templates "
                          "unreadable: "),
            std::string::npos)
      << r.output;
  // A dataset without a tokenizer has none, and writes nothing.
  testing::write_file(tmp / "a.txt", "abc");
  prepare_token_dataset({tmp / "a.txt"}, TokenSource::kText, tmp / "b.h5", {}, false);
  EXPECT_TRUE(TokenDataset(tmp / "b.h5").tokenizer_files().empty());
  r = testing::run_zerotrain("info --json " + tmp / "b.h5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(nlohmann::json::parse(r.output).contains("tokenizer_files"));
}

// Named chat templates: tokenizer_config.json's list form, or chat_template.jinja ("default") and
// additional_chat_templates/NAME.jinja, which replace the config's (as transformers 5 loads them).
TEST(IoTokenizerFiles, ChatTemplatesAreReadByNameAsTransformersLoadsThem) {
  const auto templates_of = [](const TokenizerFiles& files) {
    const auto config = files.files.find("tokenizer_config.json");
    return chat_templates(files,
                          config == files.files.end() ? nlohmann::json::object()
                                                      : nlohmann::json::parse(config->second),
                          "dir/tokenizer_config.json");
  };
  TokenizerFiles t;
  EXPECT_TRUE(templates_of(t).empty());
  t.files["tokenizer_config.json"] = R"({"chat_template": "plain"})";
  EXPECT_EQ(templates_of(t), (std::map<std::string, std::string>{{"default", "plain"}}));
  t.files["tokenizer_config.json"] =
      R"({"chat_template": [{"name": "default", "template": "D"}, {"name": "rag", "template": "R"}]})";
  EXPECT_EQ(templates_of(t), (std::map<std::string, std::string>{{"default", "D"}, {"rag", "R"}}));
  t.files["additional_chat_templates/tool_use.jinja"] = "T";
  EXPECT_EQ(templates_of(t), (std::map<std::string, std::string>{{"tool_use", "T"}}));
  t.files["chat_template.jinja"] = "J";
  EXPECT_EQ(templates_of(t),
            (std::map<std::string, std::string>{{"default", "J"}, {"tool_use", "T"}}));
  t.files["additional_chat_templates/default.jinja"] = "F";  // read after chat_template.jinja
  EXPECT_EQ(templates_of(t).at("default"), "F");
  EXPECT_EQ(named_chat_template_name("additional_chat_templates/tool_use.jinja"), "tool_use");
  EXPECT_EQ(named_chat_template_name("additional_chat_templates/..jinja"),
            ".");  // a file "..jinja"
  EXPECT_EQ(named_chat_template_file("."), "additional_chat_templates/..jinja");
  EXPECT_EQ(named_chat_template_name("chat_template.jinja"), "");
  EXPECT_EQ(named_chat_template_name("additional_chat_templates/.jinja"), "");
  EXPECT_THROW(named_chat_template_file("../x"), Error);
  EXPECT_THROW(named_chat_template_file(""), Error);
  // A list entry that is not {"name", "template"} strings, or a name given twice, names the file.
  for (const char* bad : {R"({"chat_template": [{"name": "default"}]})",
                          R"({"chat_template": [{"name": "a", "template": "x"},
                                                {"name": "a", "template": "y"}]})",
                          R"({"chat_template": 3})"}) {
    TokenizerFiles b;
    b.files["tokenizer_config.json"] = bad;
    try {
      templates_of(b);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("dir/tokenizer_config.json: \"chat_template\""),
                std::string::npos)
          << e.what();
    }
  }
}

// --chat-template-file: the file's text, or an error naming it; the template then replaces every
// template of the tokenizer files, in chat_template.jinja and in the config (keys kept in order).
TEST(IoTokenizerFiles, AChatTemplateFileReplacesEveryTemplateOfTheTokenizer) {
  const TempDir tmp;
  const std::string file = tmp / "chatml.jinja";
  const std::string text = "{% for m in messages %}<|im_start|>{{ m.role }}\n{% endfor %}";
  testing::write_file(file, text);
  EXPECT_EQ(read_chat_template_file(file), text);
  // Newlines as Python reads a text file: CRLF and a lone CR are "\n"; a byte-order mark stays.
  testing::write_file(tmp / "crlf.jinja", "\xEF\xBB\xBF{{ a }}\r\n{{ b }}\r{{ c }}\n");
  EXPECT_EQ(read_chat_template_file(tmp / "crlf.jinja"), "\xEF\xBB\xBF{{ a }}\n{{ b }}\n{{ c }}\n");
  testing::write_file(tmp / "empty.jinja", " \r\n");
  testing::write_file(tmp / "bytes.jinja", "{{ x }}\xff");
  testing::write_file(tmp / "tokenizer_config.json", R"({"chat_template": "x"})");
  for (const auto& [path, says] : std::vector<std::pair<std::string, std::string>>{
           {tmp / "absent.jinja", "does not exist"},
           {tmp.path().string(), "is a directory"},
           {tmp / "empty.jinja", "is empty (3 bytes of whitespace)"},
           {tmp / "bytes.jinja", "is not UTF-8 text"},
           {tmp / "tokenizer_config.json", "is a JSON object, not a Jinja template"}}) {
    try {
      read_chat_template_file(path);
      ADD_FAILURE() << path;
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("chat template '" + path + "' " + says), std::string::npos) << what;
    }
  }

  // The config's template is replaced in its text, every other byte kept (a number that a parse
  // and a dump would turn into 1e+30 included); the files hold no other template.
  const std::string value = nlohmann::json(text).dump();
  const std::string config_tail =
      R"(, "eos_token": "e", "model_max_length": 1000000000000000019884624838656})";
  TokenizerFiles t;
  t.files["tokenizer.json"] = "{}";
  t.files["tokenizer_config.json"] =
      R"({"tokenizer_class": "X", "chat_template": [{"name": "default", "template": "{}"}])" +
      config_tail;
  t.files["chat_template.jinja"] = "J";
  t.files["additional_chat_templates/tool_use.jinja"] = "T";
  replace_chat_template(t, text, "tok");
  EXPECT_EQ(t.files.size(), 3u);
  EXPECT_EQ(t.files.at("chat_template.jinja"), text);
  EXPECT_EQ(t.files.at("tokenizer_config.json"),
            R"({"tokenizer_class": "X", "chat_template": )" + value + config_tail);
  EXPECT_EQ(chat_templates(t, nlohmann::json::parse(t.files.at("tokenizer_config.json")), "c"),
            (std::map<std::string, std::string>{{"default", text}}));
  // A config without a template gets one first; an empty one, alone; a key given twice, the
  // last (as Python's json keeps it); a byte-order mark before the object stays.
  for (const auto& [config, want] : std::vector<std::pair<std::string, std::string>>{
           {"{\n  \"a\": 1\n}", "{\"chat_template\": " + value + ", \n  \"a\": 1\n}"},
           {" { } ", " {\"chat_template\": " + value + " } "},
           {R"({"chat_template": "a", "b": [1, {"c": "]"}], "chat_template": null})",
            R"({"chat_template": "a", "b": [1, {"c": "]"}], "chat_template": )" + value + "}"},
           {"\xEF\xBB\xBF{\"a\": \"\\\"\"}",
            "\xEF\xBB\xBF{\"chat_template\": " + value + ", \"a\": \"\\\"\"}"}}) {
    TokenizerFiles c;
    c.files["tokenizer_config.json"] = config;
    replace_chat_template(c, text, "tok");
    EXPECT_EQ(c.files.at("tokenizer_config.json"), want) << config;
    EXPECT_EQ(nlohmann::json::parse(want).at("chat_template"), text) << want;
  }
  TokenizerFiles bare;  // a tokenizer.json alone: the template goes beside it
  bare.files["tokenizer.json"] = "{}";
  replace_chat_template(bare, text, "tok");
  EXPECT_EQ(bare.files.at("chat_template.jinja"), text);
  EXPECT_EQ(bare.files.count("tokenizer_config.json"), 0u);
  TokenizerFiles broken;
  broken.files["tokenizer_config.json"] = "[1]";
  try {
    replace_chat_template(broken, text, "dir/tok");
    ADD_FAILURE() << "a config that is not an object";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dir/tok: tokenizer_config.json is not a JSON object"),
              std::string::npos);
  }
}

// Held-out data is scored beside training data whose tokenizer encodes alike: the chat templates
// (and the config's formatting) do not count; any other file, key or bos/eos id does.
TEST(IoTokenizerFiles, TokenizersThatDifferInTheirChatTemplatesAloneEncodeAlike) {
  TokenizerFiles plain;
  plain.files["tokenizer.json"] = R"({"model": {}})";
  plain.files["tokenizer_config.json"] = R"({"eos_token": "e", "bos_token": "b"})";
  plain.eos_token_id = 2;
  TokenizerFiles chat = plain;
  replace_chat_template(chat, "{{ messages }}", "tok");
  chat.files["additional_chat_templates/rag.jinja"] = "R";
  EXPECT_TRUE(same_tokenizer_apart_from_chat_templates(plain, chat));
  TokenizerFiles reformatted = plain;
  reformatted.files["tokenizer_config.json"] =
      "{\n  \"bos_token\": \"b\",\n  \"eos_token\": \"e\"\n}";
  EXPECT_TRUE(same_tokenizer_apart_from_chat_templates(reformatted, chat));
  for (const auto& edit : std::vector<std::function<void(TokenizerFiles&)>>{
           [](TokenizerFiles& t) { t.files["tokenizer.json"] = R"({"model": {"x": 1}})"; },
           [](TokenizerFiles& t) { t.files["tokenizer_config.json"] = R"({"eos_token": "x"})"; },
           [](TokenizerFiles& t) { t.files["special_tokens_map.json"] = "{}"; },
           [](TokenizerFiles& t) { t.eos_token_id = 3; },
           [](TokenizerFiles& t) { t.bos_token_id = 0; }}) {
    TokenizerFiles other = chat;
    edit(other);
    EXPECT_FALSE(same_tokenizer_apart_from_chat_templates(plain, other));
  }
}

// Writes a dataset of `n` tokens, then gives it a /loss_mask dataset of the given type and values.
std::string dataset_with_mask(const TempDir& tmp, const std::string& name, int64_t n, DType type,
                              const std::vector<uint8_t>& mask_bytes) {
  const int64_t elements =
      static_cast<int64_t>(mask_bytes.size()) / static_cast<int64_t>(dtype_size(type));
  return testing::token_dataset_with(tmp / name, n, "loss_mask", type, type, mask_bytes.data(),
                                     elements);
}

// SFT data: /loss_mask round trips through the writer (over several appends), counts its ones,
// is part of the dataset's identity, and a mask of the wrong length, type or values is refused
// naming the file, the dataset and the index.
TEST(IoTokenDataset, LossMaskRoundTripsAndBadMasksAreRefused) {
  TempDir tmp;
  {
    TokenDatasetWriter w(tmp / "sft.h5", 256, "byte");
    const std::vector<uint32_t> tokens = {1, 2, 3, 4, 5};
    const std::vector<uint8_t> mask = {0, 0, 1, 1, 0};
    w.append(tokens.data(), 2, "test", mask.data());
    w.append(tokens.data() + 2, 3, "test", mask.data() + 2);
    EXPECT_THROW(w.append(tokens.data(), 1, "test"), Error);  // the mask must continue
    const std::vector<uint8_t> bad = {2};
    EXPECT_THROW(w.append(tokens.data(), 1, "test", bad.data()), Error);
    w.finish();
    const TokenDataset d(tmp / "sft.h5");
    ASSERT_TRUE(d.has_loss_mask());
    std::vector<uint8_t> back(5);
    d.read_loss_mask(0, 5, back.data());
    EXPECT_EQ(back, mask);
    EXPECT_EQ(d.counted_tokens(), 2);
    EXPECT_NE(d.identity().find("with a loss mask"), std::string::npos) << d.identity();
  }
  {
    TokenDatasetWriter w(tmp / "plain.h5", 256, "byte");
    const std::vector<uint32_t> tokens = {1, 2};
    const std::vector<uint8_t> mask = {1, 1};
    w.append(tokens.data(), 1, "test");
    EXPECT_THROW(w.append(tokens.data() + 1, 1, "test", mask.data()), Error);
  }
  auto expect_refused = [](const std::string& path, const std::vector<std::string>& parts,
                           bool on_read) {
    try {
      const TokenDataset d(path);
      std::vector<uint8_t> all(static_cast<size_t>(d.size()));
      if (on_read) d.read_loss_mask(0, d.size(), all.data());
      FAIL() << "expected an error for " << path;
    } catch (const Error& e) {
      for (const std::string& part : parts)
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_refused(dataset_with_mask(tmp, "short.h5", 4, DType::kUint8, {1, 1, 1}),
                 {"short.h5", "/loss_mask", "[3]", "[4]"}, false);
  const std::vector<uint8_t> wide(4 * sizeof(uint16_t), 0);
  expect_refused(dataset_with_mask(tmp, "wide.h5", 4, DType::kUint16, wide),
                 {"wide.h5", "/loss_mask", "uint16"}, false);
  expect_refused(dataset_with_mask(tmp, "value.h5", 4, DType::kUint8, {1, 0, 3, 1}),
                 {"value.h5", "/loss_mask", "value 3", "index 2"}, true);
}

TEST(IoTokenDataset, ExistingOutputNeedsOverwrite) {
  TempDir tmp;
  testing::write_file(tmp / "a.txt", "abc");
  testing::write_file(tmp / "b.txt", "defg");
  prepare_token_dataset({tmp / "a.txt"}, TokenSource::kText, tmp / "o.h5", {}, false);
  EXPECT_THROW(prepare_token_dataset({tmp / "b.txt"}, TokenSource::kText, tmp / "o.h5", {}, false),
               Error);
  EXPECT_EQ(TokenDataset(tmp / "o.h5").size(), 3);
  prepare_token_dataset({tmp / "b.txt"}, TokenSource::kText, tmp / "o.h5", {}, true);
  EXPECT_EQ(TokenDataset(tmp / "o.h5").size(), 4);
}

// A tokenizer with more tokens than the model's vocab_size (an added token past the embedding's
// rows, which len(tokenizer) counts) trains on its ids, as the Hugging Face Trainer does; an id at
// or past vocab_size is refused, naming it.
TEST(IoTokenDataset, ATokenizerLargerThanTheEmbeddingTrainsOnIdsBelowIt) {
  TempDir tmp;
  const auto write = [&](const std::string& name, uint32_t largest) {
    TokenDatasetWriter w(tmp / name, 257, "hf:tok");  // the tiny preset's vocab_size is 256
    TokenizerFiles files;
    files.files["tokenizer.json"] = "{\"model\": {}}";
    w.set_tokenizer_files(files);
    std::vector<uint32_t> tokens(400);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i * 7 % 200);
    tokens[123] = largest;
    w.append(tokens.data(), tokens.size(), "test");
    w.finish();
  };
  write("below.h5", 255);
  write("past.h5", 256);
  const std::string train = "train --preset tiny --steps 1 --micro-batch 2 --seq-len 16 --out ";
  testing::RunResult r =
      testing::run_zerotrain(train + (tmp / "a") + " --data " + (tmp / "below.h5"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = testing::run_zerotrain(train + (tmp / "b") + " --data " + (tmp / "past.h5"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("token 256 at index 123 is not below the vocab size 256"),
            std::string::npos)
      << r.output;
}

// A --text file beyond 64 MiB is one document, encoded in one tokenizer call whose memory grows
// with it: a note says so before the tokenizer is read (a sparse file; the tokenizer is absent).
TEST(IoTokenDataset, ALargeTextFileForATokenizerIsNoted) {
  TempDir tmp;
  std::ofstream(tmp / "big.txt").close();
  std::filesystem::resize_file(tmp / "big.txt", 65 << 20);
  const auto r =
      testing::run_zerotrain("prepare-data --tokenizer " + testing::q(tmp / "absent") + " --text " +
                             testing::q(tmp / "big.txt") + " --out " + testing::q(tmp / "big.h5"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("(65 MiB) is one document, encoded in one call of the tokenizer"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace zt
