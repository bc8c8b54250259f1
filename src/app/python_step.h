// Running a short Python program as a step of a command (the Hugging Face tokenizers library is a
// Python package): the interpreter is found on PATH, its output is ours, and its scratch files live
// in a directory removed on every exit path.
#pragma once
#include <string>
#include <vector>

namespace zt {

// The interpreter a command uses unless told (--python): $ZT_PYTHON, else python3.
std::string default_python();

// Runs a Python step that uses a Hugging Face tokenizer: `python -c SCRIPT args...`, where SCRIPT
// assigns sys.argv[1:] to `unpack` (Python names, `tok_path` among them: a tokenizer.json or a
// directory holding it), then runs the shared opening, then `body`. The opening defines tok_dir,
// tok_file, tok (a `tokenizers` Tokenizer with its stored truncation and padding turned off, as
// transformers does before encoding a document), files (the text of tokenizer.json,
// tokenizer_config.json and special_tokens_map.json where present) and special_id(key) (the id
// of a special token those configs name, -1 when none). The step reports its own errors as one
// line on stderr; this fails naming the interpreter when it cannot start, is killed or exits
// non-zero.
void run_tokenizer_step(const std::string& python, const std::string& unpack, const char* body,
                        const std::vector<std::string>& args);

// A scratch directory (created), removed with its contents when this goes out of scope.
class ScratchDir {
 public:
  explicit ScratchDir(std::string path);
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace zt
