# zt_cuda: every source in a folder named `cuda` under src/ (docs/ARCHITECTURE.md): the CUDA
# backend (src/backend/cuda), the device communicators (src/comm/cuda: the staged MPI one, and the
# NCCL one when NCCL is found, files nccl_*) and the CUDA error checks (src/util/cuda). Included
# by the top-level CMakeLists only when nvcc was found (ZEROTRAIN_HAVE_CUDA); zt_core leaves
# these folders out.
#   .cu   device code, nvcc, C++17, sm_80 + sm_90a, warnings are errors
#   .cpp  host code that calls the CUDA runtime / cuBLASLt / NCCL, the host C++20 compiler with the
#         project's warnings
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(CMAKE_CUDA_ARCHITECTURES OFF)
find_package(CUDAToolkit REQUIRED)

file(GLOB ZT_CUDA_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/*/cuda/*.cu
  ${PROJECT_SOURCE_DIR}/src/*/cuda/*.cpp)
set(ZT_NCCL_SOURCES ${ZT_CUDA_SOURCES})
list(FILTER ZT_NCCL_SOURCES INCLUDE REGEX "/cuda/nccl_[^/]*$")
list(FILTER ZT_CUDA_SOURCES EXCLUDE REGEX "/cuda/nccl_[^/]*$")
add_library(zt_cuda STATIC ${ZT_CUDA_SOURCES})
target_compile_options(zt_cuda PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90a,code=sm_90a -Werror=all-warnings>
  $<$<COMPILE_LANGUAGE:CXX>:${ZT_WARNINGS}>)
target_link_libraries(zt_cuda PUBLIC zt_core CUDA::cudart CUDA::cublasLt)
target_compile_definitions(zt_cuda PUBLIC ZEROTRAIN_HAVE_CUDA=1)

# ---- NCCL (header and library from the CUDA toolkit or /usr/local, /usr) ----
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/include /usr/include)
find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64
  /usr/local/lib /usr/lib/x86_64-linux-gnu)
if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
  set(ZEROTRAIN_HAVE_NCCL ON)
  add_library(zt_nccl_lib UNKNOWN IMPORTED)
  set_target_properties(zt_nccl_lib PROPERTIES IMPORTED_LOCATION ${NCCL_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
  target_sources(zt_cuda PRIVATE ${ZT_NCCL_SOURCES})
  target_link_libraries(zt_cuda PUBLIC zt_nccl_lib)
  target_compile_definitions(zt_cuda PUBLIC ZEROTRAIN_HAVE_NCCL=1)
else()
  set(ZEROTRAIN_HAVE_NCCL OFF)
endif()
message(STATUS "zerotrain NCCL communicator: ${ZEROTRAIN_HAVE_NCCL} (${NCCL_LIBRARY})")
