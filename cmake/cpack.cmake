# Debian package (included from CMakeLists.txt): in the build directory, `cpack -G DEB`
# writes dptrain_<version>_<arch>.deb holding everything `cmake --install` installs, under
# /usr. Its Depends are the runtime libraries dpkg-shlibdeps finds in the ELF files'
# DT_NEEDED (no -dev package: the static library and headers are for building, and whoever
# builds installs the -dev packages; see docs/install.md). Installs with
# `apt-get install ./dptrain_*.deb`.
set(DPT_PACKAGE_MAINTAINER "dptrain developers <noreply@dptrain.invalid>" CACHE STRING
  "Maintainer field of the Debian package")
set(CPACK_PACKAGE_NAME dptrain)
set(CPACK_PACKAGE_VENDOR "dptrain developers")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "differentially private training of neural networks, privacy accounting and auditing")
set(CPACK_PACKAGE_DESCRIPTION "dptrain trains neural networks with differential privacy \
(DP-SGD, DP-ULR, DP-MAC, PDP-SGD, noisy GD with a KL estimate), accounts for the privacy \
spent (RDP, PLD, KL), keeps a privacy ledger and audits models with membership-inference \
attacks. This package holds the command-line tool dptrain, the C library libdptrain (shared \
and static), its headers, pkg-config file and CMake package, the man page, the documentation \
and example programs.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${DPT_PACKAGE_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)   # dptrain_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)    # Depends from dpkg-shlibdeps
# bin/dptrain needs libdptrain.so from this same package: let dpkg-shlibdeps find it there
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${CMAKE_BINARY_DIR})
# dpkg-shlibdeps says libopenblas0 (any of its builds); the binaries' RPATH asks for the
# OpenMP build (see CMakeLists.txt), so depend on that one by name.
if(DPT_OPENBLAS_RPATH)
  set(CPACK_DEBIAN_PACKAGE_DEPENDS libopenblas0-openmp)
endif()
set(CPACK_GENERATOR DEB)
include(CPack)
