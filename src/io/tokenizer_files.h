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

// The files, in the order they are listed in messages.
const std::vector<std::string>& tokenizer_file_names();

struct TokenizerFiles {
  std::map<std::string, std::string> files;  // file name -> contents (one of the names above)
  int64_t bos_token_id = -1;                 // -1: the tokenizer has none
  int64_t eos_token_id = -1;
  bool empty() const { return files.empty(); }
};

// Writes every file into `dir` (which must exist), and generation_config.json with the bos/eos
// ids when the files do not include one. Each file is written whole, then renamed into place.
void write_tokenizer_files(const TokenizerFiles& tokenizer, const std::string& dir);

// Copies the tokenizer files present in `from_dir` into `to_dir`; returns the names copied.
std::vector<std::string> copy_tokenizer_files(const std::string& from_dir,
                                              const std::string& to_dir);

}  // namespace zt
