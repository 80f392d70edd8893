# Where Slurm is: its headers, its version and the directory slurmd loads
# plugins from (the default of slurm.conf's PluginDir). Used by the plugin's
# install rule, by `unilab-mps doctor --node` (a relative plugstack.conf path
# is looked up there) and by the Debian package's dependencies.
#
# UNILAB_MPS_SLURM_PLUGIN_DIR overrides the plugin directory. Otherwise:
# pkg-config's slurm.pc where Slurm ships one (upstream installs), else next to
# the installed libslurm: <libdir>/slurm-wlm on Debian and Ubuntu (their
# PluginDir), <libdir>/slurm upstream and on RPM-based systems.
find_path(SLURM_INCLUDE_DIR slurm/spank.h)

set(UNILAB_MPS_SLURM_VERSION "")
if(SLURM_INCLUDE_DIR AND EXISTS "${SLURM_INCLUDE_DIR}/slurm/slurm_version.h")
  file(STRINGS "${SLURM_INCLUDE_DIR}/slurm/slurm_version.h" _slurm_vnum REGEX "^#define SLURM_VERSION_NUMBER +0x[0-9a-fA-F]+")
  if(_slurm_vnum MATCHES "0x([0-9a-fA-F][0-9a-fA-F])([0-9a-fA-F][0-9a-fA-F])([0-9a-fA-F][0-9a-fA-F])")
    math(EXPR _slurm_major "0x${CMAKE_MATCH_1}")
    math(EXPR _slurm_minor "0x${CMAKE_MATCH_2}")
    math(EXPR _slurm_micro "0x${CMAKE_MATCH_3}")
    # Slurm spells minor versions with two digits (22.05).
    if(_slurm_minor LESS 10)
      set(_slurm_minor "0${_slurm_minor}")
    endif()
    set(UNILAB_MPS_SLURM_VERSION "${_slurm_major}.${_slurm_minor}.${_slurm_micro}")
    set(UNILAB_MPS_SLURM_SERIES "${_slurm_major}.${_slurm_minor}")
    # SPANK plugins must match Slurm's major.minor (src/common/plugin.c
    # _verify_syms masks the micro version only): the next series is the bound.
    math(EXPR _slurm_next_minor "${_slurm_minor} + 1")
    if(_slurm_next_minor LESS 10)
      set(_slurm_next_minor "0${_slurm_next_minor}")
    endif()
    set(UNILAB_MPS_SLURM_NEXT_SERIES "${_slurm_major}.${_slurm_next_minor}")
  endif()
endif()

# A value this file computed earlier (UNILAB_MPS_SLURM_PLUGIN_DIR_AUTO) is
# computed again: the packages installed since may tell better. One the user
# gave (-DUNILAB_MPS_SLURM_PLUGIN_DIR=..., as the RPM spec does) always stays,
# whether or not that directory exists on the build machine.
if(UNILAB_MPS_SLURM_PLUGIN_DIR AND UNILAB_MPS_SLURM_PLUGIN_DIR STREQUAL UNILAB_MPS_SLURM_PLUGIN_DIR_AUTO)
  unset(UNILAB_MPS_SLURM_PLUGIN_DIR CACHE)
endif()
if(NOT UNILAB_MPS_SLURM_PLUGIN_DIR)
  find_package(PkgConfig QUIET)
  if(PkgConfig_FOUND)
    pkg_get_variable(_slurm_libdir slurm libdir)
  endif()
  find_library(SLURM_LIBRARY slurm)
  if(NOT _slurm_libdir AND SLURM_LIBRARY)
    get_filename_component(_slurm_libdir "${SLURM_LIBRARY}" DIRECTORY)
  endif()
  # libslurm holds its compiled-in default PluginDir as a string: the most
  # direct answer, and the only one on a build machine with libslurm-dev
  # alone (Debian's plugin dir comes with slurm-wlm-basic-plugins, which
  # libslurm-dev does not pull in).
  set(_plugin_dir "")
  if(SLURM_LIBRARY AND _slurm_libdir)
    get_filename_component(_slurm_lib_real "${SLURM_LIBRARY}" REALPATH)
    string(REPLACE "." "\\." _libdir_re "${_slurm_libdir}")
    string(REPLACE "+" "\\+" _libdir_re "${_libdir_re}")
    file(STRINGS "${_slurm_lib_real}" _compiled_dirs REGEX "^${_libdir_re}/slurm(-wlm)?$")
    list(LENGTH _compiled_dirs _n)
    if(_n EQUAL 1)
      set(_plugin_dir "${_compiled_dirs}")
    endif()
  endif()
  if(_plugin_dir)
  elseif(_slurm_libdir AND EXISTS "${_slurm_libdir}/slurm-wlm")
    set(_plugin_dir "${_slurm_libdir}/slurm-wlm")
  elseif(_slurm_libdir)
    set(_plugin_dir "${_slurm_libdir}/slurm")
  else()
    set(_plugin_dir "${CMAKE_INSTALL_FULL_LIBDIR}/slurm")
  endif()
  set(UNILAB_MPS_SLURM_PLUGIN_DIR "${_plugin_dir}" CACHE PATH "Where unilab_mps.so is installed (Slurm's PluginDir)")
  set(UNILAB_MPS_SLURM_PLUGIN_DIR_AUTO "${_plugin_dir}" CACHE INTERNAL "the plugin directory this file computed")
endif()
message(STATUS "Slurm ${UNILAB_MPS_SLURM_VERSION}: plugin directory ${UNILAB_MPS_SLURM_PLUGIN_DIR}")
