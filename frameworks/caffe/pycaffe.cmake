# learnerkit: included at the end of the source's python/CMakeLists.txt (frameworks/caffe/Dockerfile.j2), where
# the pycaffe target (all of Caffe in one extension, _caffe.so) is defined.

# The build compiles the C++ sources as a unity build (CMAKE_UNITY_BUILD: a few large translation units parse
# Caffe's headers a few times instead of once per file, several times faster). hungarian.cpp defines the
# macros INF and verbose, which break the files batched after it: it is compiled on its own.
set_source_files_properties(${PROJECT_SOURCE_DIR}/src/caffe/3rdparty/hungarian.cpp
                            PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)

# GPU builds (CPU_ONLY=OFF): the packaging compiles no CUDA sources, so compile every src/caffe/*.cu with
# BVLC's cmake/Cuda.cmake (FindCUDA, CUDA_ARCH_BIN/CUDA_ARCH_PTX) and link the CUDA runtime, cuBLAS and cuRAND.
if(NOT CPU_ONLY)
  include(${PROJECT_SOURCE_DIR}/cmake/Cuda.cmake)
  if(NOT HAVE_CUDA)
    message(FATAL_ERROR "no CUDA toolkit found under CUDA_TOOLKIT_ROOT_DIR=${CUDA_TOOLKIT_ROOT_DIR}")
  endif()
  caffe_cuda_compile(learnerkit_cuda_objects ${cuda})
  target_sources(pycaffe PRIVATE ${learnerkit_cuda_objects})
  target_include_directories(pycaffe PRIVATE ${CUDA_INCLUDE_DIRS})
  target_link_libraries(pycaffe ${CUDA_CUDART_LIBRARY} ${CUDA_curand_LIBRARY} ${CUDA_CUBLAS_LIBRARIES})
endif()
