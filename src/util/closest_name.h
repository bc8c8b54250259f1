// Suggestions for a misspelt name (a command-line option, a DeepSpeed config key): the
// Levenshtein distance and the nearest candidate by it.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace zt {

// Insertions, deletions and substitutions that turn `a` into `b`.
size_t edit_distance(const std::string& a, const std::string& b);

// Whether a name `distance` edits from a `given_length`-character one is near enough to be its
// misspelling: at most max(2, a third of the length) edits, and fewer than the length (two edits
// can turn "wd" into "lr").
bool near_enough_to_suggest(size_t distance, size_t given_length);

// The candidate nearest to `given` by edit distance (the first of equals), if it is near enough
// to suggest; "" otherwise (a key of another tool, `_comment`, is no misspelt `comet`).
std::string closest_name(const std::string& given, const std::vector<std::string>& candidates);

}  // namespace zt
