// Running a short Python program as a step of a command (Hugging Face's transformers and
// tokenizers are Python packages): the interpreter is the project's environment unless told, its
// output is ours, and its scratch files live in a directory removed on every exit path.
#pragma once
#include <string>
#include <vector>

namespace zt {

// The interpreter a command uses unless told (--python): $ZT_PYTHON, else the project's
// environment .venv/ (next to the executable's build directory, or in the source tree it was
// built from), else python3.
std::string default_python();
// The --python option's help, shared by the commands that take it.
constexpr const char* kPythonOptionHelp =
    "Python with transformers and tokenizers (auto: $ZT_PYTHON, else the project's .venv/ made "
    "by ./run.sh deps, else python3)";

// Runs a Python step that uses a Hugging Face tokenizer: `python -c WRAPPER ERROR_FILE SCRIPT_FILE
// "" args...` (SCRIPT_FILE a private file holding SCRIPT; where none can be made, "" SCRIPT), the
// wrapper running SCRIPT, which assigns sys.argv[1:] (the args) to `unpack` (Python
// names, `tok_path` among them: a tokenizer.json or a directory holding it), then runs the shared
// opening, then `body`. The opening defines tok_dir, tok_file, tok (the tokenizer as transformers'
// AutoTokenizer.from_pretrained(tok_dir) loads it when tokenizer_config.json is beside
// tokenizer.json: its class, added tokens, special tokens and chat template, chat_template.jinja
// preferred; a bare tokenizer file as PreTrainedTokenizerFast) and special_id(key) (the id of the
// special token "bos_token", "eos_token", ... or -1 when none). A step refuses its input with
// sys.exit(message): the message, handed back through a private file, is this function's error. An
// unforeseen error is one line on the step's stderr; this then fails naming the interpreter, as
// when it cannot start, is killed or exits non-zero, and when this process gets a SIGTERM or
// SIGUSR1 while the step runs (the step is ended first).
void run_tokenizer_step(const std::string& python, const std::string& unpack,
                        const std::string& body, const std::vector<std::string>& args);

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
