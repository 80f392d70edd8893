# Installed extras (examples, docs) and the Debian package (CPack).
#
# Layout (prefix /usr for the package):
#   <Slurm PluginDir>/unilab_mps.so          the SPANK plugin (spank/CMakeLists.txt)
#   bin/unilab-mps                           the CLI (users and admins)
#   sbin/unilab-mps-prolog, -epilog          Prolog=/Epilog= helpers: root-only,
#                                            run by slurmd, so not in users' PATH
#   share/man/man1/unilab-mps.1              generated from cli/help.cpp
#   share/doc/unilab-mps/                    README.md, ADMIN.md, examples/
# The examples are not activated: copying examples/plugstack.conf.d/unilab-mps.conf
# into /etc/slurm/plugstack.conf.d/ and restarting slurmd is the admin's act
# (docs/ADMIN.md), so installing the package never changes a running cluster.

set(UNILAB_MPS_DOCDIR "${CMAKE_INSTALL_DATADIR}/doc/unilab-mps")
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/docs/ADMIN.md DESTINATION ${UNILAB_MPS_DOCDIR})
install(FILES ${PROJECT_SOURCE_DIR}/etc/plugstack.conf.d/unilab-mps.conf
        DESTINATION ${UNILAB_MPS_DOCDIR}/examples/plugstack.conf.d)
install(FILES ${PROJECT_SOURCE_DIR}/etc/slurm.conf.snippet ${PROJECT_SOURCE_DIR}/etc/gres.conf.snippet
        DESTINATION ${UNILAB_MPS_DOCDIR}/examples)

# ---------------------------------------------------------------- CPack: .deb
set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "unilab-mps")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_CONTACT "unilab-mps maintainers <unilab-mps@localhost>")
set(CPACK_PACKAGE_VENDOR "unilab")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "per-job, user-owned NVIDIA CUDA MPS daemons for Slurm")
# CPack puts the summary first and indents every description line itself.
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
    "A Slurm SPANK plugin (srun/sbatch/salloc --unilab-mps), prolog/epilog helpers
and the unilab-mps command: every GPU job gets its own MPS control daemon,
running as the job's user, with UUID-based GPU visibility, per-job thread and
pinned-memory limits, and identity-checked cleanup in the job epilog.")
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_DEBIAN_PACKAGE_RELEASE "1")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION "admin")
set(CPACK_DEBIAN_PACKAGE_PRIORITY "optional")
# libc6, libstdc++6, libgcc-s1 from the binaries (fmt and nlohmann-json are
# header-only here); Slurm by hand: the plugin only loads into the Slurm
# series it was built against (major.minor), and slurm-wlm-basic-plugins is
# what both slurmd and slurm-client depend on, at their exact version: it owns
# the plugin directory and /etc/slurm/plugstack.conf.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# Debug info stays in the build tree; the package ships stripped binaries.
set(CPACK_STRIP_FILES ON)
if(UNILAB_MPS_SLURM_SERIES)
  set(UNILAB_MPS_DEB_SLURM_DEPENDS
      "slurm-wlm-basic-plugins (>= ${UNILAB_MPS_SLURM_SERIES}~), slurm-wlm-basic-plugins (<< ${UNILAB_MPS_SLURM_NEXT_SERIES}~)"
      CACHE STRING "Slurm dependency of the .deb")
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "${UNILAB_MPS_DEB_SLURM_DEPENDS}")
endif()
# postrm: after removal, warn while a plugstack file still names the plugin.
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA "${PROJECT_SOURCE_DIR}/packaging/deb/postrm")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# The NVIDIA tools come from the driver installation (Debian non-free names
# below, or NVIDIA's .run/.deb); their paths are plugin arguments.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "nvidia-smi, nvidia-cuda-mps")
include(CPack)

# ---------------------------------------------------------------- RPM spec
# packaging/unilab-mps.spec (rpmbuild -ta on a release tarball, docs/ADMIN.md)
# carries its own Version: it must be this project's.
file(STRINGS "${PROJECT_SOURCE_DIR}/packaging/unilab-mps.spec" _spec_version REGEX "^Version:")
string(REGEX REPLACE "^Version:[ \t]*" "" _spec_version "${_spec_version}")
if(NOT _spec_version STREQUAL PROJECT_VERSION)
  message(FATAL_ERROR "packaging/unilab-mps.spec says Version: ${_spec_version}, the project is ${PROJECT_VERSION}: make them equal")
endif()
