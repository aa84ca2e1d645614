# RETRO_GPU_ONLY=ON (included from the top-level CMakeLists.txt): the CUDA kernels, the CPU code they
# are checked against, the CUDA backend's run path, and retro_gpu_check. Needs only a C++20 compiler, CUDA and CMake: no HDF5, FAISS,
# BLAS, GTest, Google Benchmark, fmt or JSON library (the GPU machines have none of them).
include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  message(FATAL_ERROR "RETRO_GPU_ONLY=ON needs a CUDA compiler (nvcc)")
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
# The libraries the GPU machines lack, made absent here too: each of their headers in this folder is an
# #error, so a stray include fails the build on every machine (CI builds this configuration), not first
# on a lent GPU.
include_directories(BEFORE ${CMAKE_SOURCE_DIR}/cmake/gpu_only_absent)
set(RETRO_WARNINGS -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers -Wno-restrict
  -Wno-unknown-pragmas)  # no OpenMP here: the reference k-means runs its omp loops serially

# The reference sources: exact/partial attention, cluster ranking, k-means (built with its plain-loop
# product instead of BLAS, and serial without OpenMP), the check harness; and what the CUDA backend's
# run path (kernels/run) needs, all JSON- and HDF5-free: the wave index and its head (the CPU method's
# own index code), the block cache, the evaluator, the cost model's layer time and the prediction.
add_library(retro_ref STATIC
  ${CMAKE_SOURCE_DIR}/lib/attention/attention.cpp
  ${CMAKE_SOURCE_DIR}/lib/attention/group_attention.cpp
  ${CMAKE_SOURCE_DIR}/lib/attention/group_flash.cpp
  ${CMAKE_SOURCE_DIR}/lib/attention/group_flash_avx2.cpp
  ${CMAKE_SOURCE_DIR}/lib/attention/cluster_rank.cpp
  ${CMAKE_SOURCE_DIR}/lib/cluster/kmeans.cpp
  ${CMAKE_SOURCE_DIR}/lib/cluster/pq.cpp
  ${CMAKE_SOURCE_DIR}/lib/cluster/wave_index.cpp
  ${CMAKE_SOURCE_DIR}/lib/methods/wave_head.cpp
  ${CMAKE_SOURCE_DIR}/lib/methods/quest_pages.cpp
  ${CMAKE_SOURCE_DIR}/lib/methods/pq_head.cpp
  ${CMAKE_SOURCE_DIR}/lib/cluster/simhash.cpp
  ${CMAKE_SOURCE_DIR}/lib/methods/magicpig_head.cpp
  ${CMAKE_SOURCE_DIR}/lib/methods/budget.cpp
  ${CMAKE_SOURCE_DIR}/lib/core/top_k.cpp
  ${CMAKE_SOURCE_DIR}/lib/trace/trace.cpp
  ${CMAKE_SOURCE_DIR}/lib/metrics/evaluator.cpp
  ${CMAKE_SOURCE_DIR}/lib/system/block_cache.cpp
  ${CMAKE_SOURCE_DIR}/lib/system/hardware_spec.cpp
  ${CMAKE_SOURCE_DIR}/lib/system/layer_time.cpp
  ${CMAKE_SOURCE_DIR}/lib/gpu/prediction.cpp
  ${CMAKE_SOURCE_DIR}/lib/gpu/gpu_methods.cpp
  ${CMAKE_SOURCE_DIR}/lib/gpu/step_sample.cpp
  ${CMAKE_SOURCE_DIR}/lib/gpu/point_run.cpp
  ${CMAKE_SOURCE_DIR}/lib/gpu/replicas.cpp
  ${CMAKE_SOURCE_DIR}/lib/gpu/measured.cpp
  ${CMAKE_SOURCE_DIR}/lib/metrics/selection_output.cpp
  ${CMAKE_SOURCE_DIR}/lib/core/threads.cpp
  ${CMAKE_SOURCE_DIR}/lib/core/memory.cpp
  ${CMAKE_SOURCE_DIR}/lib/core/check.cpp)
target_include_directories(retro_ref PUBLIC ${CMAKE_SOURCE_DIR}/lib)
target_compile_definitions(retro_ref PRIVATE RETRO_NO_BLAS=1)
target_compile_options(retro_ref PRIVATE ${RETRO_WARNINGS})
set(RETRO_REF_LIB retro_ref)
add_subdirectory(${CMAKE_SOURCE_DIR}/kernels/run ${CMAKE_BINARY_DIR}/kernels/run)
add_subdirectory(${CMAKE_SOURCE_DIR}/kernels ${CMAKE_BINARY_DIR}/kernels)
message(STATUS "retro-bench: RETRO_GPU_ONLY build (kernels, references, the run path, retro_gpu_check)")
