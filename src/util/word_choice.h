// A setting that is one of a few words (an option's value, a key in a saved file), read into its
// enum and written back from one table, so that the words, the refusal and the names cannot
// drift apart.
#pragma once
#include <cstddef>
#include <string>

#include "util/error.h"

namespace zt {

template <typename E>
struct WordChoice {
  E value;
  const char* word;
};

// "a, b or c": the words of `choices`, in order.
template <typename E, size_t N>
std::string word_alternatives(const WordChoice<E> (&choices)[N]) {
  std::string text;
  for (size_t i = 0; i < N; ++i)
    text += (i == 0 ? "" : i + 1 == N ? " or " : ", ") + std::string(choices[i].word);
  return text;
}

// The value `text` names; anything else is a zt::Error "<what> must be a, b or c, got 'text'".
template <typename E, size_t N>
E parse_word(const std::string& text, const WordChoice<E> (&choices)[N], const std::string& what) {
  for (const WordChoice<E>& c : choices)
    if (text == c.word) return c.value;
  fail(what + " must be " + word_alternatives(choices) + ", got '" + text + "'");
}

// The word of `value`; the first word when the table does not hold it.
template <typename E, size_t N>
const char* word_of(E value, const WordChoice<E> (&choices)[N]) {
  for (const WordChoice<E>& c : choices)
    if (c.value == value) return c.word;
  return choices[0].word;
}

}  // namespace zt
