// A tokenizer step (app/python_step.h) longer than Linux's 128 KiB per argument (MAX_ARG_STRLEN)
// still runs: its text travels in a file. The step refuses here at once (no transformers, or no
// tokenizer at the path given), and that refusal must come back as this call's error, not a
// failure to start the interpreter ("Argument list too long").
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "app/python_step.h"

namespace zt {
namespace {

TEST(PythonStep, AStepLongerThanOneArgumentRuns) {
  const std::string body = "# " + std::string(200 * 1024, 'x') + "\nsys.exit('not reached')\n";
  std::string error;
  try {
    run_tokenizer_step(default_python(), "tok_path,", body, {"/no/such/dir/tokenizer.json"});
  } catch (const std::exception& e) {
    error = e.what();
  }
  EXPECT_EQ(error.find("Argument list too long"), std::string::npos) << error;
  const bool refused_by_the_step =
      error.find("cannot import transformers") != std::string::npos ||
      error.find("/no/such/dir/tokenizer.json: no tokenizer.json") != std::string::npos;
  EXPECT_TRUE(refused_by_the_step) << error;
}

}  // namespace
}  // namespace zt
