// Checked MPI calls: every MPI call's return code goes through check_mpi.
#pragma once

namespace zt {

// Throws zt::Error "<call> failed: <MPI error string>" when rc != MPI_SUCCESS.
void check_mpi(int rc, const char* call);

}  // namespace zt
