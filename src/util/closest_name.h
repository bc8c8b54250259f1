// Suggestions for a misspelt name (a command-line option, a DeepSpeed config key): the
// Levenshtein distance and the nearest candidate by it.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace zt {

// Insertions, deletions and substitutions that turn `a` into `b`.
size_t edit_distance(const std::string& a, const std::string& b);

// The candidate nearest to `given` by edit distance (the first of equals), if it is near enough
// to be a misspelling: at most max(2, a third of `given`'s length) edits away. "" otherwise (a
// key of another tool, `_comment`, is no misspelt `comet`).
std::string closest_name(const std::string& given, const std::vector<std::string>& candidates);

}  // namespace zt
