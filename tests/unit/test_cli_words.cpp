// Words on a command line that no option takes: a second value of an option that takes one
// (`--lora-targets q_proj v_proj`, as Hugging Face's argument parsers take lists; `--data a.h5
// b.h5`; an unquoted `--chat What is`) is refused naming the word and the option before it, on
// every command, with nothing written. Boost drops such a word in silence when a command has no
// positional arguments, which trained three of four LoRA targets away.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "test_io_support.h"

namespace zt {
namespace {

using testing::expect_failure_naming;
using testing::q;
using testing::run_zerotrain;
using testing::TempDir;
namespace fs = std::filesystem;

TEST(CliWords, AWordNoOptionTakesIsRefusedNamingItOnEveryCommand) {
  TempDir tmp;
  const std::string out = q(tmp / "out");
  std::ofstream(tmp / "a.txt") << "some text to learn\n";
  ASSERT_EQ(run_zerotrain("prepare-data --text " + q(tmp / "a.txt") + " " + q(tmp / "a.txt") +
                          " --out " + q(tmp / "data.h5"))
                .exit_code,
            0);  // a list option (--text) still takes several words
  ASSERT_EQ(run_zerotrain("init --preset tiny --seed 1 --out " + q(tmp / "model")).exit_code, 0);
  const std::string data = q(tmp / "data.h5"), model = q(tmp / "model");
  const std::string train = "train --model " + model + " --data " + data + " --out " + out;
  struct Case {
    std::string args;
    std::vector<std::string> named;
  };
  const Case cases[] = {
      {train + " --lora-rank 4 --lora-targets q_proj v_proj k_proj",
       {"unexpected words 'v_proj', 'k_proj' after '--lora-targets q_proj'",
        "takes one comma-separated list: --lora-targets q_proj,v_proj,k_proj"}},
      {train + " --trainable lm_head embed_tokens",
       {"unexpected word 'embed_tokens' after '--trainable lm_head'",
        "repeat it for each pattern: --trainable A --trainable B"}},
      {"train --model " + model + " --data " + data + " " + q(tmp / "b.h5") + " --out " + out,
       {"unexpected word '" + (tmp / "b.h5") + "' after '--data " + (tmp / "data.h5") +
        "': each option takes one value"}},
      {train + " --overwrite=true stray", {"unexpected word 'stray' after '--overwrite=true'"}},
      {"eval --model " + model + " --data " + data + " extra", {"unexpected word 'extra'"}},
      {"generate --model " + model + " --chat What is the capital",
       {"unexpected words 'is', 'the', 'capital' after '--chat What'",
        "quote a value that holds spaces"}},
      {"prepare-data --text " + q(tmp / "a.txt") + " --out " + q(tmp / "x.h5") +
           " --chat-template stray",
       {"unexpected word 'stray' after '--chat-template', a switch that takes no value (give it "
        "alone to turn it on"}},
      {"estimate stray --preset tiny",
       {"unexpected word 'stray': estimate takes no positional arguments"}},
      {"init --preset tiny --seed 1 --out " + out + " tiny",
       {"unexpected word 'tiny' after '--out"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    expect_failure_naming(run_zerotrain(c.args), c.named);
    EXPECT_FALSE(fs::exists(tmp / "out"));
    EXPECT_FALSE(fs::exists(tmp / "x.h5"));
  }
  // A command with positional arguments refuses one too many, naming it.
  expect_failure_naming(run_zerotrain("info " + model + " " + data),
                        {"zerotrain info: error: unexpected word '" + (tmp / "data.h5") +
                         "': info takes 1 positional argument"});
}

}  // namespace
}  // namespace zt
