// Stop signals (runtime/signals.h): SIGUSR1/SIGTERM are recorded, not fatal; a SIGTERM a
// launcher relays is the same request, a second one later exits at once with 143; the previous
// handlers come back afterwards. prepare-data stopped while its Python step runs ends that step,
// and stopped while it writes its dataset ends the writing: either way nothing is left behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/signals.h"
#include "test_io_support.h"
#include "util/error.h"

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
  // Outside the handlers' lifetime no stop is pending, whatever the last one recorded.
  EXPECT_EQ(received_stop_signal(), 0);
  // A child takes SIGTERMs: the first is recorded; one at once after it and one a second later
  // (mpirun's relay, by default) are the same request, and it lives on.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    StopSignalHandlers handlers;
    raise(SIGTERM);
    if (received_stop_signal() != SIGTERM) _exit(1);
    raise(SIGTERM);
    usleep(1000 * 1000);
    raise(SIGTERM);
    _exit(received_stop_signal() == SIGTERM ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "a relayed SIGTERM ended the process";
  // Past the window (here ZT_SIGTERM_RELAY_SECONDS's 0.4 s, as the Slurm scripts set it from
  // mpirun's kill wait) a SIGTERM ends it with 143.
  ASSERT_EQ(setenv("ZT_SIGTERM_RELAY_SECONDS", "0.4", 1), 0);
  const pid_t late = fork();
  ASSERT_GE(late, 0);
  if (late == 0) {
    StopSignalHandlers handlers;
    raise(SIGTERM);
    usleep(100 * 1000);
    raise(SIGTERM);  // inside the window
    usleep(700 * 1000);
    raise(SIGTERM);
    _exit(2);  // not reached
  }
  ASSERT_EQ(waitpid(late, &status, 0), late);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), kSecondTermExitCode);
  ASSERT_EQ(setenv("ZT_SIGTERM_RELAY_SECONDS", "soon", 1), 0);
  try {
    StopSignalHandlers handlers;
    ADD_FAILURE() << "a window of 'soon' was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ZT_SIGTERM_RELAY_SECONDS must be seconds"),
              std::string::npos)
        << e.what();
  }
  unsetenv("ZT_SIGTERM_RELAY_SECONDS");
  // Outside the handlers' lifetime the default action is back (checked without dying).
  struct sigaction current;
  ASSERT_EQ(sigaction(SIGUSR1, nullptr, &current), 0);
  EXPECT_EQ(current.sa_handler, SIG_DFL);
}

// prepare-data's tokenizer step is a child process: a SIGTERM to prepare-data alone (`kill`,
// `timeout`) used to kill it and leave the step running and its scratch directory behind. The
// step is played by a script that records its pid and sleeps.
TEST(StopSignals, PrepareDataStoppedDuringItsTokenizerStepEndsTheStepAndLeavesNothing) {
  testing::TempDir tmp;
  const std::string step = tmp / "python.sh", pid_file = tmp / "step.pid", out = tmp / "d.h5";
  {
    std::ofstream f(step);
    f << "#!/bin/sh\necho $$ > '" << pid_file << ".tmp' && mv '" << pid_file << ".tmp' '"
      << pid_file << "'\nexec sleep 60\n";
  }
  std::filesystem::permissions(step, std::filesystem::perms::owner_all);
  {
    std::ofstream f(tmp / "run.sh");
    f << ZT_BINARY << " prepare-data --python '" << step << "' --tokenizer '" << ZT_SOURCE_DIR
      << "/inputs/data' --text '" << ZT_SOURCE_DIR << "/inputs/data/sample.txt' --out '" << out
      << "' & z=$!\n"
      << "n=0; while [ ! -s '" << pid_file << "' ] && [ $n -lt 400 ]; do sleep 0.05; "
      << "n=$((n+1)); done\n"
      << "kill -TERM $z; wait $z; echo \"exit=$?\"\n"
      << "kill -0 $(cat '" << pid_file << "') 2>/dev/null && echo step-still-running; true\n";
  }
  ASSERT_EQ(std::system(("sh '" + tmp / "run.sh" + "' > '" + tmp / "log" + "' 2>&1").c_str()), 0);
  const std::string log = testing::read_file(tmp / "log");
  EXPECT_NE(log.find("stopped by SIGTERM while '" + step + "' ran"), std::string::npos) << log;
  EXPECT_NE(log.find("exit=1"), std::string::npos) << log;
  EXPECT_EQ(log.find("step-still-running"), std::string::npos) << log;
  for (const auto& entry : std::filesystem::directory_iterator(tmp.path()))
    EXPECT_EQ(entry.path().filename().string().rfind("d.h5", 0), std::string::npos)
        << entry.path() << " was left behind";
}

// Stopped while the dataset is half written (ZT_DEBUG_STALL_DATASET holds the writer after its
// first chunk, the temporary file on disk): the default action used to kill prepare-data and
// leave OUT.tmp-<pid> behind.
TEST(StopSignals, PrepareDataStoppedWhileWritingItsDatasetLeavesNothing) {
  testing::TempDir tmp;
  const std::string out = tmp / "d.h5";
  {
    std::ofstream f(tmp / "run.sh");
    f << "ZT_DEBUG_STALL_DATASET=60 " << ZT_BINARY << " prepare-data --text '" << ZT_SOURCE_DIR
      << "/inputs/data/sample.txt' --out '" << out << "' & z=$!\n"
      << "n=0; while ! ls '" << out << "'.tmp-* >/dev/null 2>&1 && [ $n -lt 400 ]; do "
      << "sleep 0.05; n=$((n+1)); done\n"
      << "kill -TERM $z; wait $z; echo \"exit=$?\"\n";
  }
  ASSERT_EQ(std::system(("sh '" + tmp / "run.sh" + "' > '" + tmp / "log" + "' 2>&1").c_str()), 0);
  const std::string log = testing::read_file(tmp / "log");
  EXPECT_NE(log.find("stopped by SIGTERM while writing token dataset '" + out + "'"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("exit=1"), std::string::npos) << log;
  for (const auto& entry : std::filesystem::directory_iterator(tmp.path()))
    EXPECT_EQ(entry.path().filename().string().rfind("d.h5", 0), std::string::npos)
        << entry.path() << " was left behind";
}

}  // namespace
}  // namespace zt
