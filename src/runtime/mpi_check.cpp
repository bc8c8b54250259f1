#include "runtime/mpi_check.h"

#include <mpi.h>

#include <string>

#include "util/error.h"

namespace zt {

void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) length = 0;
  fail(std::string(call) + " failed: " +
       (length > 0 ? std::string(text, static_cast<size_t>(length))
                   : "MPI error code " + std::to_string(rc)));
}

}  // namespace zt
