#include "runtime/signals.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "util/error.h"

namespace zt {

namespace {

volatile sig_atomic_t g_stop_signal = 0;
volatile sig_atomic_t g_term_seen = 0;

extern "C" void on_stop_signal(int signal_number) {
  if (signal_number == SIGTERM) {
    if (g_term_seen) _exit(kSecondTermExitCode);
    g_term_seen = 1;
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
  g_term_seen = 0;
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
