#include "app/run_agreement.h"

#include <cstdint>
#include <map>

#include "util/crc32c.h"
#include "util/error.h"

namespace zt {
namespace {

// "key\tvalue\n" per setting; keys and values hold no tab or newline that matters here (they are
// split back at the first tab of each line).
std::string serialize(const RunSettings& settings) {
  std::string text;
  for (const auto& [key, value] : settings) text += key + "\t" + value + "\n";
  return text;
}

std::map<std::string, std::string> parse(const std::string& text) {
  std::map<std::string, std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = text.find('\n', pos);
    const std::string line = text.substr(pos, end - pos);
    const size_t tab = line.find('\t');
    out[line.substr(0, tab)] = tab == std::string::npos ? "" : line.substr(tab + 1);
    pos = end == std::string::npos ? text.size() : end + 1;
  }
  return out;
}

}  // namespace

void agree_on_run(Communicator& comm, const RunSettings& settings) {
  const std::string text = serialize(settings);
  const int world = comm.world_size();
  int64_t crc = crc32c(text.data(), text.size());
  std::vector<int64_t> crcs(static_cast<size_t>(world));
  comm.all_gather_blocking(&crc, crcs.data(), 1);
  bool same = true;
  for (int64_t c : crcs) same = same && c == crc;
  if (same) return;
  // They differ: every rank's text to every rank (lengths first, then padded texts).
  int64_t length = static_cast<int64_t>(text.size());
  std::vector<int64_t> lengths(static_cast<size_t>(world));
  comm.all_gather_blocking(&length, lengths.data(), 1);
  int64_t longest = 0;
  for (int64_t l : lengths) longest = std::max(longest, l);
  std::vector<uint8_t> mine(static_cast<size_t>(longest), 0), all(mine.size() * world);
  std::copy(text.begin(), text.end(), mine.begin());
  comm.all_gather_blocking(mine.data(), all.data(), mine.size());
  std::vector<std::map<std::string, std::string>> per_rank;
  for (int r = 0; r < world; ++r) {
    const char* begin = reinterpret_cast<const char*>(all.data()) + r * longest;
    per_rank.push_back(parse(std::string(begin, static_cast<size_t>(lengths[r]))));
  }
  std::string message = "the ranks disagree on the run:";
  int shown = 0;
  for (const auto& [key, value] : settings) {  // in this rank's order; every rank has the keys
    bool differs = false;
    for (const auto& other : per_rank)
      differs = differs || other.count(key) == 0 || other.at(key) != value;
    if (!differs) continue;
    if (shown++ == 8) {
      message += "; ...";
      break;
    }
    message += (shown > 1 ? ";" : "") + std::string(" ") + key + ":";
    for (int r = 0; r < world; ++r) {
      const auto it = per_rank[r].find(key);
      message += " rank " + std::to_string(r) + " " +
                 (it == per_rank[r].end() ? "(none)" : "'" + it->second + "'");
    }
  }
  throw AgreedError(message);
}

}  // namespace zt
