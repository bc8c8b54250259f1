# zt_cuda: every source in a folder named `cuda` under src/ (docs/ARCHITECTURE.md): the CUDA
# backend (src/backend/cuda), the device communicators (src/comm/cuda: the staged MPI one, and the
# NCCL one when NCCL is found, files nccl_*), the cuDNN fused attention (files cudnn_*, when cuDNN
# and its frontend headers are found), the CUPTI kernel profiler (files cupti_*, when CUPTI is found) and the CUDA error checks (src/util/cuda). Included
# by the top-level CMakeLists only when nvcc was found (ZEROTRAIN_HAVE_CUDA); zt_core leaves
# these folders out.
#   .cu   device code, nvcc, C++17, sm_80 + sm_90a code and compute_80 PTX (which the driver
#         compiles for newer GPUs: Blackwell's sm_100 and sm_120), warnings are errors
#   .cpp  host code that calls the CUDA runtime / cuBLASLt (opened at run time) / NCCL, the host C++20 compiler with the
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
set(ZT_CUPTI_SOURCES ${ZT_CUDA_SOURCES})
list(FILTER ZT_CUPTI_SOURCES INCLUDE REGEX "/cuda/cupti_[^/]*$")
list(FILTER ZT_CUDA_SOURCES EXCLUDE REGEX "/cuda/cupti_[^/]*$")
set(ZT_CUDNN_SOURCES ${ZT_CUDA_SOURCES})
list(FILTER ZT_CUDNN_SOURCES INCLUDE REGEX "/cuda/cudnn_[^/]*$")
list(FILTER ZT_CUDA_SOURCES EXCLUDE REGEX "/cuda/cudnn_[^/]*$")
add_library(zt_cuda STATIC ${ZT_CUDA_SOURCES})
target_compile_options(zt_cuda PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_80,code=compute_80 -gencode=arch=compute_90a,code=sm_90a -Werror=all-warnings>
  $<$<COMPILE_LANGUAGE:CXX>:${ZT_WARNINGS}>)
# cuBLASLt is not linked: it is opened at run time (backend/cuda/cublaslt_api.h), so that a process
# that runs no GEMM on a GPU does not pay its load (~85 ms a start); dlopen is in libdl.
target_link_libraries(zt_cuda PUBLIC zt_core CUDA::cudart ${CMAKE_DL_LIBS})
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

# ---- cuDNN fused attention (backend/cuda/cudnn_*: cuDNN 9 + the header-only cuDNN frontend) ----
# The frontend headers come from PyPI's nvidia-cudnn-frontend wheel, fetched by ./run.sh into
# .deps/; libcudnn and cudnn.h from the CUDA toolkit. Without either, zt_cuda builds without the
# fused path and `--attention fused` is refused with the reason.
set(ZEROTRAIN_CUDNN_FRONTEND_DIR "${PROJECT_SOURCE_DIR}/.deps/cudnn-frontend-1.16.0/include"
  CACHE PATH "Folder holding cudnn_frontend.h")
find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include
  /usr/include)
find_library(CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64
  /usr/lib/x86_64-linux-gnu)
if(CUDNN_INCLUDE_DIR AND CUDNN_LIBRARY AND EXISTS "${ZEROTRAIN_CUDNN_FRONTEND_DIR}/cudnn_frontend.h")
  set(ZEROTRAIN_HAVE_CUDNN ON)
  add_library(zt_cudnn_lib UNKNOWN IMPORTED)
  set_target_properties(zt_cudnn_lib PROPERTIES IMPORTED_LOCATION ${CUDNN_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${CUDNN_INCLUDE_DIR})
  # The frontend's headers are third-party: SYSTEM keeps our warnings-as-errors off them.
  target_sources(zt_cuda PRIVATE ${ZT_CUDNN_SOURCES})
  target_include_directories(zt_cuda SYSTEM PRIVATE ${ZEROTRAIN_CUDNN_FRONTEND_DIR})
  target_link_libraries(zt_cuda PUBLIC zt_cudnn_lib)
  target_compile_definitions(zt_cuda PUBLIC ZEROTRAIN_HAVE_CUDNN=1)
else()
  set(ZEROTRAIN_HAVE_CUDNN OFF)
endif()
message(STATUS "zerotrain cuDNN fused attention: ${ZEROTRAIN_HAVE_CUDNN} (${CUDNN_LIBRARY}, "
  "frontend ${ZEROTRAIN_CUDNN_FRONTEND_DIR})")

# ---- CUPTI kernel profiler (backend/cuda/cupti_*: `train --profile-steps`) ----
# Only cupti.h is needed here: the library is loaded at run time (dlopen) when a profile is asked
# for, so zerotrain starts where CUDA has no CUPTI. Without the header, --profile-steps is refused
# with the reason.
find_path(CUPTI_INCLUDE_DIR cupti.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include
  /usr/local/cuda/extras/CUPTI/include)
if(CUPTI_INCLUDE_DIR)
  set(ZEROTRAIN_HAVE_CUPTI ON)
  target_sources(zt_cuda PRIVATE ${ZT_CUPTI_SOURCES})
  target_include_directories(zt_cuda PRIVATE ${CUPTI_INCLUDE_DIR})
  target_compile_definitions(zt_cuda PUBLIC ZEROTRAIN_HAVE_CUPTI=1)
else()
  set(ZEROTRAIN_HAVE_CUPTI OFF)
endif()
message(STATUS "zerotrain CUPTI kernel profiler: ${ZEROTRAIN_HAVE_CUPTI} (${CUPTI_INCLUDE_DIR})")
