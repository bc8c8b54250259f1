#include "runtime/signals.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>

#include "util/error.h"

namespace zt {

namespace {

volatile sig_atomic_t g_stop_signal = 0;
// When the first SIGTERM arrived (CLOCK_MONOTONIC, ms); 0: none yet. Read and written in the
// handler, which a lock-free atomic allows.
std::atomic<int64_t> g_first_term_ms{0};
static_assert(std::atomic<int64_t>::is_always_lock_free);
// How long after the first SIGTERM another is its relay (set before the handler is installed).
int64_t g_relay_ms = int64_t{kRelayedTermSeconds} * 1000;

// ZT_SIGTERM_RELAY_SECONDS when set (the Slurm scripts set it from mpirun's kill wait, whose
// relay comes that late), else kRelayedTermSeconds.
int64_t relay_window_ms() {
  const char* text = std::getenv("ZT_SIGTERM_RELAY_SECONDS");
  if (!text || !*text) return int64_t{kRelayedTermSeconds} * 1000;
  char* end = nullptr;
  errno = 0;
  const double seconds = std::strtod(text, &end);
  ZT_CHECK(errno == 0 && *end == '\0' && seconds >= 0 && seconds <= 86400,
           std::string("ZT_SIGTERM_RELAY_SECONDS must be seconds between 0 and 86400, got '") +
               text + "'");
  return static_cast<int64_t>(seconds * 1000);
}

int64_t monotonic_ms() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);                                        // async-signal-safe
  return static_cast<int64_t>(now.tv_sec) * 1000 + now.tv_nsec / 1000000 + 1;  // never 0
}

extern "C" void on_stop_signal(int signal_number) {
  if (signal_number == SIGTERM) {
    const int64_t now = monotonic_ms(), first = g_first_term_ms.load();
    if (first == 0)
      g_first_term_ms.store(now);
    else if (now - first >= g_relay_ms)
      _exit(kSecondTermExitCode);
    // else the same request again, relayed by a launcher: the stop goes on.
  }
  g_stop_signal = signal_number;
}

struct sigaction g_previous_usr1, g_previous_term;
bool g_installed = false;

void install(int signal_number, struct sigaction* previous) {
  struct sigaction action;
  std::memset(&action, 0, sizeof action);
  action.sa_handler = on_stop_signal;
  action.sa_flags = SA_RESTART;  // blocking I/O resumes; the flag is read at the step boundary
  ZT_CHECK(sigemptyset(&action.sa_mask) == 0, "sigemptyset failed");
  ZT_CHECK(sigaction(signal_number, &action, previous) == 0, "cannot install the handler of " +
                                                                 stop_signal_name(signal_number) +
                                                                 ": " + std::strerror(errno));
}

}  // namespace

StopSignalHandlers::StopSignalHandlers() {
  ZT_CHECK(!g_installed, "stop signal handlers are already installed");
  g_stop_signal = 0;
  g_first_term_ms = 0;
  g_relay_ms = relay_window_ms();
  install(SIGUSR1, &g_previous_usr1);
  install(SIGTERM, &g_previous_term);
  g_installed = true;
}

StopSignalHandlers::~StopSignalHandlers() {
  sigaction(SIGUSR1, &g_previous_usr1, nullptr);
  sigaction(SIGTERM, &g_previous_term, nullptr);
  g_installed = false;
}

bool stop_signal_handlers_installed() {
  return g_installed;
}

int received_stop_signal() {
  return g_installed ? g_stop_signal : 0;
}

void fail_if_stopped(const std::string& what) {
  if (const int signal_number = received_stop_signal())
    fail("stopped by " + stop_signal_name(signal_number) + " " + what);
}

std::string stop_signal_name(int signal_number) {
  if (signal_number == SIGUSR1) return "SIGUSR1";
  if (signal_number == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(signal_number);
}

void write_pid_file_if_requested(int rank) {
  const char* dir = std::getenv("ZT_DEBUG_PID_DIR");
  if (!dir || !*dir) return;
  const std::string path = std::string(dir) + "/rank-" + std::to_string(rank) + ".pid";
  const std::string tmp = path + ".tmp";  // renamed into place: readers never see half a file
  std::ofstream out(tmp, std::ios::trunc);
  out << ::getpid() << "\n";
  out.close();
  ZT_CHECK(!out.fail(), "cannot write pid file '" + tmp + "'");
  ZT_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0,
           "cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(errno));
}

}  // namespace zt
