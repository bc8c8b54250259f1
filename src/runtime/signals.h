// Graceful stop on SIGUSR1 / SIGTERM (a scheduler's "time is nearly up"), so a job can save a
// checkpoint and exit with code 124 instead of dying mid-step.
//
// The handler only records the signal in a sig_atomic_t (async-signal-safe); at each step
// boundary the training loop all-reduces received_stop_signal() (app/train_checkpointing.cpp) so
// every rank takes the same decision even when only one rank was signalled. A SIGTERM within
// kRelayedTermSeconds of the first is the same request relayed (Slurm signals every task, and a
// launcher in the job relays its own: mpirun after its odls_base_sigkill_timeout, 1 s by
// default), and the stop goes on; a later one means "now": the handler calls _exit(143).
// Checkpoints stay consistent because a checkpoint only becomes visible by the final rename of its
// directory (checkpoint/checkpoint.h).
#pragma once
#include <string>

namespace zt {

// Exit code of a run stopped early by a stop request, after saving a resumable checkpoint.
constexpr int kStoppedExitCode = 124;
// Exit code of the immediate exit on a second SIGTERM (128 + SIGTERM).
constexpr int kSecondTermExitCode = 143;
// A SIGTERM this soon after the first is a launcher's relay of it, not a second request
// (ZT_SIGTERM_RELAY_SECONDS overrides it: mpirun relays after its odls_base_sigkill_timeout).
constexpr int kRelayedTermSeconds = 3;

// Installs the SIGUSR1/SIGTERM handlers for its lifetime and restores the previous ones on
// destruction. Clears any stop recorded before. One instance at a time.
class StopSignalHandlers {
 public:
  StopSignalHandlers();
  ~StopSignalHandlers();
  StopSignalHandlers(const StopSignalHandlers&) = delete;
  StopSignalHandlers& operator=(const StopSignalHandlers&) = delete;
};

// Whether a StopSignalHandlers is alive (a command that installed them for its whole run keeps
// them through the steps that would install their own).
bool stop_signal_handlers_installed();
// The signal number this process received (SIGUSR1 or SIGTERM) while the handlers are alive; 0
// when none, and whenever no StopSignalHandlers is alive.
int received_stop_signal();
// Throws zt::Error "stopped by SIGTERM WHAT" (or SIGUSR1) when a stop was received; `what` says
// what was under way ("while writing ..."). The one form of a command's stop message.
void fail_if_stopped(const std::string& what);
// "SIGUSR1", "SIGTERM", or "signal N".
std::string stop_signal_name(int signal_number);

// Debug aid for tests: when the environment variable ZT_DEBUG_PID_DIR names a directory, writes
// DIR/rank-R.pid holding this process's pid (so a test can signal one rank of an mpirun job).
void write_pid_file_if_requested(int rank);

}  // namespace zt
