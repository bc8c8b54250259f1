#include "app/python_step.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <vector>

#include "io/fs_util.h"
#include "runtime/signals.h"
#include "util/error.h"

extern char** environ;

namespace zt {

std::string default_python() {
  const char* env = std::getenv("ZT_PYTHON");
  if (env && *env) return env;
  // The project's environment: beside the build directory the executable runs from (a checkout
  // moved since its build), else in the source tree it was built from.
  std::vector<std::filesystem::path> venvs;
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) venvs.push_back(exe.parent_path().parent_path() / ".venv");
  venvs.emplace_back(ZT_PROJECT_VENV);
  for (const std::filesystem::path& venv : venvs) {
    const std::filesystem::path python = venv / "bin" / "python";
    if (::access(python.c_str(), X_OK) == 0) return python.string();
  }
  return "python3";
}

namespace {

// What runs a step: `python -c WRAPPER ERROR_FILE STEP_FILE STEP args...` runs the Python text in
// STEP_FILE (STEP when STEP_FILE is "") with sys.argv[1:] the args; a sys.exit with a message (how
// a step refuses its input) writes the message into ERROR_FILE for run_tokenizer_step (onto stderr
// when it cannot), and exits 1. The step travels in a file: as one argument it would be bounded
// by Linux's 128 KiB per argument (MAX_ARG_STRLEN).
constexpr const char* kStepWrapperPython = R"PY(
import sys
# At the top level (a function around the step would cost stack frames the step's JSON reading
# counts on), under names no step uses.
_zerotrain_error_file, _zerotrain_step_file, _zerotrain_step = sys.argv[1:4]
del sys.argv[1:4]
if _zerotrain_step_file:
    with open(_zerotrain_step_file, encoding="utf-8") as _zerotrain_in:
        _zerotrain_step = _zerotrain_in.read()
try:
    exec(compile(_zerotrain_step, "<zerotrain step>", "exec"))
except SystemExit as _zerotrain_refusal:
    if _zerotrain_refusal.code is None or isinstance(_zerotrain_refusal.code, int):
        raise
    try:
        if not _zerotrain_error_file:
            raise OSError("no error file")
        with open(_zerotrain_error_file, "w", encoding="utf-8") as _zerotrain_out:
            _zerotrain_out.write(str(_zerotrain_refusal.code))
    except OSError:
        sys.stderr.write(f"{_zerotrain_refusal.code}\n")
    sys.exit(1)
)PY";

// The opening of every tokenizer step (see run_tokenizer_step).
constexpr const char* kLoadTokenizerPython = R"PY(
import json, os, sys

def one_line_error(kind, value, traceback):
    # A failure nobody foresaw is still one line naming the tokenizer, not a traceback.
    sys.stderr.write(f"{tok_path}: the tokenizer step failed: {kind.__name__}: {value}\n")

sys.excepthook = one_line_error

def call_name(call):
    """The function name of a tool call or a tool schema, {"type": "function", "function":
    {"name", ...}} as OpenAI and TRL write them, or {"name", ...}; None when it names none."""
    inner = call.get("function", call) if isinstance(call, dict) else None
    name = inner.get("name") if isinstance(inner, dict) else None
    return name if isinstance(name, str) and name else None

# A tokenizer step needs no tensor library. transformers imports torch when it finds one (over a
# second and some 200 MB per step, for one type hint); told not to, it imports neither, nor does it
# advise that models are then unavailable.
os.environ.update(USE_TORCH="0", USE_TF="0", USE_FLAX="0", TRANSFORMERS_NO_ADVISORY_WARNINGS="1")
try:
    import transformers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast
except ImportError as e:
    sys.exit(f"{sys.executable} cannot import transformers ({e}): ./run.sh deps makes the "
             "project's environment .venv/, which zerotrain finds on its own; or give "
             "--python PATH (or ZT_PYTHON) of an interpreter with transformers and tokenizers")
transformers.logging.set_verbosity_error()  # no notes about lengths or legacy behaviour
if os.path.isdir(tok_path):
    tok_dir, tok_file = tok_path, os.path.join(tok_path, "tokenizer.json")
else:
    tok_dir, tok_file = os.path.dirname(tok_path) or ".", tok_path
if not os.path.isfile(tok_file):
    sys.exit(f"{tok_file}: no tokenizer.json (give the file or a directory holding it)")
def config_class(directory):
    """tokenizer_config.json's tokenizer_class; None where it names none or cannot be read (the
    loader then says why)."""
    try:
        with open(os.path.join(directory, "tokenizer_config.json"), encoding="utf-8") as f:
            value = json.load(f).get("tokenizer_class")
        return value if isinstance(value, str) else None
    except (OSError, ValueError, AttributeError):
        return None

try:
    if (os.path.basename(tok_file) == "tokenizer.json"
            and os.path.isfile(os.path.join(tok_dir, "tokenizer_config.json"))):
        # As AutoTokenizer.from_pretrained(DIR) loads it: tokenizer_config.json's class, added
        # tokens (added_tokens_decoder), special tokens and chat template. transformers 5 saves a
        # tokenizer that tokenizer.json alone defines (Llama 3's, Mistral's) as class
        # "TokenizersBackend", which transformers 4 calls PreTrainedTokenizerFast.
        if config_class(tok_dir) == "TokenizersBackend":
            tok = PreTrainedTokenizerFast.from_pretrained(tok_dir, local_files_only=True)
        else:
            tok = AutoTokenizer.from_pretrained(tok_dir, local_files_only=True)
    else:
        tok = PreTrainedTokenizerFast(tokenizer_file=tok_file)
except Exception as e:
    sys.exit(f"{tok_dir}: transformers cannot load the tokenizer: {type(e).__name__}: {e}")
# A special token the configs name but tokenizer.json lacks would be added as a new id beyond the
# model's vocabulary (transformers does so silently): refused, naming it.
from tokenizers import Tokenizer as RawTokenizer
raw = RawTokenizer.from_file(tok_file)
for key in ("bos_token", "eos_token"):
    token = getattr(tok, key, None)
    if token is not None and raw.token_to_id(str(token)) is None:
        sys.exit(f"{tok_dir}: the {key} {str(token)!r} that tokenizer_config.json or "
                 f"special_tokens_map.json names is not a token of {tok_file}")
del raw
# Where transformers 4.5x and later save the chat templates: chat_template.jinja ("default") and
# additional_chat_templates/NAME.jinja (the named others). Where there are any, they replace the
# config's, as transformers 5 loads them: one string, or a dict by name.
def saved_chat_templates(directory):
    found = {}
    jinja = os.path.join(directory, "chat_template.jinja")
    if os.path.isfile(jinja):
        with open(jinja, encoding="utf-8") as f:
            found["default"] = f.read()
    named = os.path.join(directory, "additional_chat_templates")
    for name in sorted(os.listdir(named)) if os.path.isdir(named) else ():
        path = os.path.join(named, name)
        if name.endswith(".jinja") and name != ".jinja" and os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                found[name[:-len(".jinja")]] = f.read()
    return found

saved = saved_chat_templates(tok_dir)
if saved:
    tok.chat_template = saved["default"] if list(saved) == ["default"] else saved

def special_id(key):
    token = getattr(tok, key, None)
    return -1 if token is None else tok.convert_tokens_to_ids(token)
)PY";

// Waits for the child `pid` to end, into `status`. A SIGTERM or SIGUSR1 meanwhile (a scheduler's
// stop, a `kill`, `timeout`) ends the child too and fails, so that the command unwinds and removes
// its scratch and temporary files instead of dying with the child left running. (A second SIGTERM,
// not a launcher's relay of the first, exits at once, runtime/signals.h, and may leave both.)
// StopSignalHandlers must be installed (before the child starts, so that no signal is missed).
void wait_unless_stopped(pid_t pid, const std::string& program, int& status) {
  for (;;) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    ZT_CHECK(done >= 0 || errno == EINTR, "waiting for '" + program + "' failed");
    // Checked after the wait: a stop that came as the step ended (a whole process group
    // signalled) is the command's stop too, not the step's failure or success.
    if (received_stop_signal()) {
      if (done != pid) {
        kill(pid, SIGTERM);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
      }
      fail_if_stopped("while '" + program + "' ran");
    }
    if (done == pid) return;
    usleep(10000);  // 10 ms: a step runs for seconds, its end is noticed at once
  }
}

// Runs args[0] (found on PATH) with args; its stdout and stderr are ours. Returns its exit status.
int run_process(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  // The command's own handlers when it installed them (prepare-data does, for its whole run);
  // the child starts with the default actions either way (exec).
  std::optional<StopSignalHandlers> stop_handlers;
  if (!stop_signal_handlers_installed()) stop_handlers.emplace();
  fail_if_stopped("before '" + args[0] + "' started");  // the command was stopped already
  const int rc = posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
  ZT_CHECK(rc == 0, "cannot start '" + args[0] + "': " + std::strerror(rc) +
                        " (./run.sh deps makes the project's environment .venv/, which zerotrain "
                        "finds on its own; or give --python PATH of an interpreter with "
                        "transformers)");
  int status = 0;
  wait_unless_stopped(pid, args[0], status);
  ZT_CHECK(WIFEXITED(status), "'" + args[0] + "' was killed by signal " +
                                  std::to_string(WTERMSIG(status)) + " (" +
                                  strsignal(WTERMSIG(status)) + ")");
  return WEXITSTATUS(status);
}

// A private file (mkstemp: created anew, mode 0600, in $TMPDIR, else /tmp), empty or holding
// `text`, removed when this goes out of scope; its path is "" when it could be made and written
// in neither (a step's refusal then stays on its stderr, and the step travels as an argument).
class PrivateTempFile {
 public:
  explicit PrivateTempFile(const std::string& text = "") {
    std::error_code ec;
    const std::filesystem::path tmpdir = std::filesystem::temp_directory_path(ec);
    for (const std::filesystem::path& dir :
         {ec ? std::filesystem::path("/tmp") : tmpdir, std::filesystem::path("/tmp")}) {
      std::string name = (dir / "zt-step-XXXXXX").string();
      const int fd = ::mkstemp(name.data());
      if (fd < 0) continue;
      // Written whole and closed without error, or not used (a truncated step could still run).
      bool written = write_whole(fd, text);
      written = ::close(fd) == 0 && written;
      if (written) {
        path_ = name;
        return;
      }
      ::unlink(name.c_str());
    }
  }
  ~PrivateTempFile() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  PrivateTempFile(const PrivateTempFile&) = delete;
  PrivateTempFile& operator=(const PrivateTempFile&) = delete;
  const std::string& path() const { return path_; }
  static bool write_whole(int fd, const std::string& text) {
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }
  std::string text() const {
    std::ifstream in(path_);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

 private:
  std::string path_;
};

}  // namespace

void run_tokenizer_step(const std::string& python, const std::string& unpack,
                        const std::string& body, const std::vector<std::string>& args) {
  // The step's refusal (its sys.exit message) comes back through a file, to be this command's
  // error: one line naming the file and the record, not a second one naming the interpreter.
  const PrivateTempFile error_file;
  const std::string step =
      "import sys\n" + unpack + " = sys.argv[1:]\n" + kLoadTokenizerPython + body;
  const PrivateTempFile step_file(step);
  std::vector<std::string> argv = {python,
                                   "-c",
                                   kStepWrapperPython,
                                   error_file.path(),
                                   step_file.path(),
                                   step_file.path().empty() ? step : ""};
  argv.insert(argv.end(), args.begin(), args.end());
  const int status = run_process(argv);
  const std::string refusal = status != 0 && !error_file.path().empty() ? error_file.text() : "";
  ZT_CHECK(status == 0, !refusal.empty()
                            ? refusal
                            : "the tokenizer step failed (" + python + " exited with " +
                                  std::to_string(status) + "; its message is above)");
}

ScratchDir::ScratchDir(std::string path) : path_(std::move(path)) {
  std::error_code ec;
  std::filesystem::create_directories(path_, ec);
  ZT_CHECK(!ec, "cannot create the scratch directory '" + path_ + "': " + ec.message() +
                    write_failure_cause(path_));
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace zt
