// Files a process must not leave behind when it ends on an error without unwinding (MPI_Abort
// after a rank-local error or a communication timeout): NVMe swap files, which hold this rank's
// optimizer state (tens of GB at 6b). Their owners register them while they exist; the abort paths
// remove whatever is registered, an unlink each, which cannot wait on any peer.
#pragma once
#include <string>

namespace zt {

void register_scratch_file(const std::string& path);
void unregister_scratch_file(const std::string& path);
// Unlinks every registered file (async-signal-unsafe; for the error paths before MPI_Abort).
void remove_scratch_files();

}  // namespace zt
