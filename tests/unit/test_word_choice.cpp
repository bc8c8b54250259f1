// util/word_choice.h: one table reads a word into its value, names the value and refuses any other
// word naming the setting and the words it takes.
#include <gtest/gtest.h>

#include <string>

#include "util/error.h"
#include "util/word_choice.h"

namespace zt {
namespace {

enum class Shade { kLight, kDark, kDim };
constexpr WordChoice<Shade> kShades[] = {
    {Shade::kLight, "light"}, {Shade::kDark, "dark"}, {Shade::kDim, "dim"}};
constexpr WordChoice<Shade> kTwoShades[] = {{Shade::kLight, "light"}, {Shade::kDark, "dark"}};

TEST(WordChoice, EachWordReadsAsItsValueAndNamesItBack) {
  for (const WordChoice<Shade>& c : kShades) {
    EXPECT_EQ(parse_word(c.word, kShades, "--shade"), c.value) << c.word;
    EXPECT_STREQ(word_of(c.value, kShades), c.word);
  }
  EXPECT_EQ(word_alternatives(kShades), "light, dark or dim");
  EXPECT_EQ(word_alternatives(kTwoShades), "light or dark");
  // A value the table does not hold is named by its first word.
  EXPECT_STREQ(word_of(Shade::kDim, kTwoShades), "light");
}

TEST(WordChoice, AnyOtherWordIsRefusedNamingTheSettingAndItsWords) {
  for (const char* bad : {"", "Dark", "dark ", "darker", "dim"}) {
    try {
      parse_word(bad, kTwoShades, "--shade");
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()),
                "--shade must be light or dark, got '" + std::string(bad) + "'");
    }
  }
}

}  // namespace
}  // namespace zt
