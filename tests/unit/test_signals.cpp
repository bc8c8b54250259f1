// Stop signals (runtime/signals.h): SIGUSR1/SIGTERM are recorded, not fatal; a second SIGTERM
// exits at once with 143; the previous handlers come back afterwards.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/signals.h"

namespace zt {
namespace {

TEST(StopSignals, FirstSignalIsRecordedSecondSigtermExits143) {
  {
    StopSignalHandlers handlers;
    EXPECT_EQ(received_stop_signal(), 0);
    ASSERT_EQ(raise(SIGUSR1), 0);
    EXPECT_EQ(received_stop_signal(), SIGUSR1);
    EXPECT_EQ(stop_signal_name(SIGUSR1), "SIGUSR1");
  }
  // A child takes two SIGTERMs: the first is recorded, the second ends it with 143.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    StopSignalHandlers handlers;
    raise(SIGTERM);
    if (received_stop_signal() != SIGTERM) _exit(1);
    raise(SIGTERM);
    _exit(2);  // not reached
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), kSecondTermExitCode);
  // Outside the handlers' lifetime the default action is back (checked without dying).
  struct sigaction current;
  ASSERT_EQ(sigaction(SIGUSR1, nullptr, &current), 0);
  EXPECT_EQ(current.sa_handler, SIG_DFL);
}

}  // namespace
}  // namespace zt
