# GNU plotutils' libplot (Debian libplot-dev): no .pc, no CMake config.
find_path(PLOT_INCLUDE_DIR plot.h)
find_library(PLOT_LIBRARY plot)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(Plot REQUIRED_VARS PLOT_LIBRARY PLOT_INCLUDE_DIR)
if(Plot_FOUND AND NOT TARGET Plot::Plot)
  add_library(Plot::Plot UNKNOWN IMPORTED)
  set_target_properties(Plot::Plot PROPERTIES IMPORTED_LOCATION ${PLOT_LIBRARY}
                        INTERFACE_INCLUDE_DIRECTORIES ${PLOT_INCLUDE_DIR})
endif()
