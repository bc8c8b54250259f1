#include "app/python_step.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "util/error.h"

extern char** environ;

namespace zt {

std::string default_python() {
  const char* env = std::getenv("ZT_PYTHON");
  return env && *env ? env : "python3";
}

namespace {

// The opening of every tokenizer step (see run_tokenizer_step).
constexpr const char* kLoadTokenizerPython = R"PY(
import json, os, sys
try:
    from tokenizers import Tokenizer
except ImportError as e:
    sys.exit(f"the Python step cannot import the tokenizers library ({e}); install it with "
             "./run.sh deps and pass --python .venv/bin/python (or set ZT_PYTHON)")
tok_dir = tok_path if os.path.isdir(tok_path) else os.path.dirname(tok_path)
tok_file = os.path.join(tok_path, "tokenizer.json") if os.path.isdir(tok_path) else tok_path
if not os.path.isfile(tok_file):
    sys.exit(f"{tok_file}: no tokenizer.json (give the file or a directory holding it)")
try:
    tok = Tokenizer.from_file(tok_file)
except Exception as e:
    sys.exit(f"{tok_file}: not a tokenizers file: {e}")
tok.no_truncation()
tok.no_padding()
files = {}
for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
    path = tok_file if name == "tokenizer.json" else os.path.join(tok_dir, name)
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            files[name] = f.read()

def special_id(key):
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        if name not in files:
            continue
        value = json.loads(files[name]).get(key)
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str) and tok.token_to_id(value) is not None:
            return tok.token_to_id(value)
    return -1
)PY";

// Runs args[0] (found on PATH) with args; its stdout and stderr are ours. Returns its exit status.
int run_process(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
  ZT_CHECK(rc == 0, "cannot start '" + args[0] + "': " + std::strerror(rc) +
                        " (give an interpreter with the tokenizers library: --python PATH)");
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    ZT_CHECK(errno == EINTR, "waiting for '" + args[0] + "' failed");
  ZT_CHECK(WIFEXITED(status), "'" + args[0] + "' was killed by signal " +
                                  std::to_string(WTERMSIG(status)) + " (" +
                                  strsignal(WTERMSIG(status)) + ")");
  return WEXITSTATUS(status);
}

}  // namespace

void run_tokenizer_step(const std::string& python, const std::string& unpack, const char* body,
                        const std::vector<std::string>& args) {
  std::vector<std::string> argv = {
      python, "-c", "import sys\n" + unpack + " = sys.argv[1:]\n" + kLoadTokenizerPython + body};
  argv.insert(argv.end(), args.begin(), args.end());
  const int status = run_process(argv);
  ZT_CHECK(status == 0, "the tokenizer step failed (" + python + " exited with " +
                            std::to_string(status) + "; its message is above)");
}

ScratchDir::ScratchDir(std::string path) : path_(std::move(path)) {
  std::filesystem::create_directories(path_);
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace zt
