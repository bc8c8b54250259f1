// The Hugging Face tokenizer files that travel with the data and the model: `prepare-data
// --tokenizer` stores them in the token dataset, `train` writes them into OUT/final/, `import`
// and `export` copy them between model directories and Hugging Face directories, so that
// AutoTokenizer.from_pretrained works on an export. generation_config.json carries the bos/eos
// ids.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace zt {

// The files, in the order they are listed in messages: tokenizer.json, tokenizer_config.json,
// special_tokens_map.json, generation_config.json, chat_template.jinja (where transformers 4.5x
// saves the chat template), added_tokens.json and tokenizer.model (SentencePiece's model, which
// slow tokenizers and converters read).
const std::vector<std::string>& tokenizer_file_names();

struct TokenizerFiles {
  std::map<std::string, std::string> files;  // file name -> contents (one of the names above)
  int64_t bos_token_id = -1;                 // -1: the tokenizer has none
  int64_t eos_token_id = -1;
  bool empty() const { return files.empty(); }
};

// The files to write beside a model: every file, and generation_config.json with the bos/eos ids
// when the files do not include one.
std::map<std::string, std::string> tokenizer_files_to_write(const TokenizerFiles& tokenizer);

// Writes tokenizer_files_to_write() into `dir` (which must exist). Each file is written whole,
// then renamed into place.
void write_tokenizer_files(const TokenizerFiles& tokenizer, const std::string& dir);

// The tokenizer files at `path`: a directory holding them, or a tokenizer.json file (stored as
// tokenizer.json whatever its name) with the others read from its directory. The bos/eos ids are
// left at -1 for the caller.
TokenizerFiles read_tokenizer_files(const std::string& path);

}  // namespace zt
