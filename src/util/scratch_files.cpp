#include "util/scratch_files.h"

#include <unistd.h>

#include <mutex>
#include <set>

namespace zt {
namespace {

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::set<std::string>& registry() {
  static std::set<std::string> files;
  return files;
}

}  // namespace

void register_scratch_file(const std::string& path) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry().insert(path);
}

void unregister_scratch_file(const std::string& path) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry().erase(path);
}

void remove_scratch_files() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (const std::string& path : registry()) ::unlink(path.c_str());
  registry().clear();
}

}  // namespace zt
