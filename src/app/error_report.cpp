#include "app/error_report.h"

#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <new>

#include "io/fs_util.h"
#include "runtime/mpi_runtime.h"

namespace zt {
namespace {

// " (rank R of N)" when the launcher started several ranks (Open MPI, PMIx or Slurm variables),
// so that N error lines of one job say whose they are; "" for a single process.
std::string rank_label() {
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return v && *v ? std::string(v) : std::string();
  };
  std::string rank = env("OMPI_COMM_WORLD_RANK"), size = env("OMPI_COMM_WORLD_SIZE");
  if (rank.empty()) rank = env("PMIX_RANK");
  if (rank.empty() || size.empty()) {
    rank = rank.empty() ? env("SLURM_PROCID") : rank;
    size = size.empty() ? env("SLURM_NTASKS") : size;
  }
  if (rank.empty() || size.empty() || size == "1") return "";
  return " (rank " + rank + " of " + size + ")";
}

// "zerotrain CMD: error (rank R of N): WHAT" as one write(2), so that the lines of several ranks
// failing at once never interleave mid-line in a shared log. A WHAT that opens with "CMD: " (a
// command's own checks name it) loses that opening: the line names the command once.
void print_error_line(const std::string& command, const char* kind, const std::string& what) {
  const std::string own_prefix = command + ": ";
  const std::string said = what.rfind(own_prefix, 0) == 0 ? what.substr(own_prefix.size()) : what;
  const std::string line = "zerotrain " + command + ": " + kind + rank_label() + ": " + said + "\n";
  std::cerr.flush();
  for (size_t done = 0; done < line.size();) {
    const ssize_t n = ::write(STDERR_FILENO, line.data() + done, line.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
}

}  // namespace

int report_error_and_end_mpi(const std::string& command) {
  try {
    throw;
  } catch (const AgreedError& e) {
    print_error_line(command, "error", e.what());
    end_mpi_after_error(/*agreed=*/true, 1);
  } catch (const Error& e) {
    print_error_line(command, "error", e.what());
    end_mpi_after_error(/*agreed=*/false, 1);
  } catch (const std::bad_alloc&) {
    print_error_line(command, "error",
                     "out of memory: an allocation failed (the model, the batch or a buffer is "
                     "larger than this host's memory; see `zerotrain estimate`)");
    end_mpi_after_error(/*agreed=*/false, 1);
  } catch (const std::filesystem::filesystem_error& e) {
    // The environment refused (a read-only or full file system, a permission): not a defect.
    const std::string text = environment_filesystem_error_text(e);
    print_error_line(command, text.empty() ? "internal error" : "error",
                     text.empty() ? e.what() : text);
    end_mpi_after_error(/*agreed=*/false, 1);
  } catch (const std::exception& e) {
    print_error_line(command, "internal error", e.what());
    end_mpi_after_error(/*agreed=*/false, 1);
  } catch (...) {
    print_error_line(command, "internal error", "an exception of unknown type");
    end_mpi_after_error(/*agreed=*/false, 1);
  }
  return 1;
}

}  // namespace zt
