# OpenBLAS, preferring Debian's OpenMP build (libopenblas-openmp-dev) so BLAS
# threads and the engine's OpenMP threads share one runtime and pool.
set(_ob_hints /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp)
set(_ob_inc_hints /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include/aarch64-linux-gnu/openblas-openmp)
find_library(OPENBLAS_LIBRARY NAMES openblas HINTS ${_ob_hints} NO_DEFAULT_PATH)
find_library(OPENBLAS_LIBRARY NAMES openblas)
find_path(OPENBLAS_INCLUDE_DIR cblas.h HINTS ${_ob_inc_hints} NO_DEFAULT_PATH)
find_path(OPENBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(OpenBLAS REQUIRED_VARS OPENBLAS_LIBRARY OPENBLAS_INCLUDE_DIR)
if(OpenBLAS_FOUND AND NOT TARGET OpenBLAS::OpenBLAS)
  add_library(OpenBLAS::OpenBLAS UNKNOWN IMPORTED)
  set_target_properties(OpenBLAS::OpenBLAS PROPERTIES IMPORTED_LOCATION ${OPENBLAS_LIBRARY}
                        INTERFACE_INCLUDE_DIRECTORIES ${OPENBLAS_INCLUDE_DIR})
endif()
