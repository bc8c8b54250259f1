// Running a short Python program as a step of a command (the Hugging Face tokenizers library is a
// Python package): the interpreter is found on PATH, its output is ours, and its scratch files live
// in a directory removed on every exit path.
#pragma once
#include <string>
#include <vector>

namespace zt {

// The opening of every Python step that loads a Hugging Face tokenizer: given `tok_path` (a
// tokenizer.json or a directory holding it) it defines tok_dir, tok_file and tok, a `tokenizers`
// Tokenizer with its stored truncation and padding turned off (transformers does the same before
// encoding a document); a missing library or a bad file exits 1 with one line naming it.
extern const char* const kLoadTokenizerPython;

// The interpreter a command uses unless told (--python): $ZT_PYTHON, else python3.
std::string default_python();

// Runs args[0] (found on PATH) with args; its stdout and stderr are ours. Returns its exit status.
// Fails naming the program when it cannot start or is killed by a signal.
int run_python_step(const std::vector<std::string>& args);

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
