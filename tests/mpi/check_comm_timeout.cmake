# Runs zt_comm_timeout under mpirun -np 2 and asserts that the job failed, quickly, with the
# communicator's timeout report. Inputs: MPIEXEC, NUMPROC_FLAG, EXE, MAX_SECONDS.
foreach(var MPIEXEC NUMPROC_FLAG EXE MAX_SECONDS)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_comm_timeout.cmake: ${var} is not set")
  endif()
endforeach()

string(TIMESTAMP started "%s" UTC)
execute_process(
  COMMAND ${MPIEXEC} --oversubscribe ${NUMPROC_FLAG} 2 ${EXE}
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err
  TIMEOUT ${MAX_SECONDS})
string(TIMESTAMP finished "%s" UTC)
math(EXPR elapsed "${finished} - ${started}")
message("exit: ${rc}, elapsed: ${elapsed} s\n--- stdout ---\n${out}\n--- stderr ---\n${err}")

if(rc MATCHES "timeout")
  message(FATAL_ERROR "the job hung: still running after ${MAX_SECONDS} s")
endif()
if(rc EQUAL 0)
  message(FATAL_ERROR "the job exited 0; a timed-out collective must end it non-zero")
endif()
set(report "${out}${err}")
foreach(expected
    "COMMUNICATION TIMEOUT on rank 0 of 2"
    "collective all_gather"
    "5 elements per rank"
    "step 42"
    "phase 'skipped_by_rank_1'")
  string(FIND "${report}" "${expected}" found)
  if(found EQUAL -1)
    message(FATAL_ERROR "the timeout report lacks \"${expected}\"")
  endif()
endforeach()
message("OK: the timed-out collective ended the job (exit ${rc}) after ${elapsed} s")
