# Install rules (included from CMakeLists.txt): `cmake --install build --prefix P` gives
#   P/lib/libdptrain.so* and libdptrain.a, P/include/dptrain/*.h (dptrain.h, version.h),
#   P/lib/pkgconfig/dptrain.pc, P/lib/cmake/dptrain/ (find_package(dptrain): targets
#   dptrain::dptrain and dptrain::dptrain_static), P/bin/dptrain, P/share/man/man1/dptrain.1,
#   and README.md, docs/ and examples/ in P/share/doc/dptrain.
include(CMakePackageConfigHelpers)
set(DPT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/dptrain)

install(TARGETS dptrain EXPORT dptrainTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS dptrain_static EXPORT dptrainStaticTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS dptrain_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/include/dptrain ${DPT_GEN_INCLUDE}/dptrain
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")

# ==== pkg-config ====
# Libs.private: the flags static linking needs, from what this build found.
# (each -L once, and none for the linker's default directory)
set(DPT_PC_LIBS_PRIVATE "")
set(seen_dirs "-L/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}" "-L/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/")
foreach(flag ${OPENBLAS_LDFLAGS} ${LAPACKE_LDFLAGS} ${CJSON_LDFLAGS} ${FFTW_LDFLAGS} -lz -lcrypto)
  if(flag MATCHES "^-L")
    if(flag IN_LIST seen_dirs)
      continue()
    endif()
    list(APPEND seen_dirs ${flag})
  endif()
  string(APPEND DPT_PC_LIBS_PRIVATE " ${flag}")
endforeach()
if(DPT_OPENBLAS_RPATH)  # the OpenMP OpenBLAS at run time too (see CMakeLists.txt)
  string(APPEND DPT_PC_LIBS_PRIVATE " -Wl,-rpath,${DPT_OPENBLAS_RPATH}")
endif()
if(DPT_HAVE_MPI)
  foreach(lib ${MPI_C_LIBRARIES})
    string(APPEND DPT_PC_LIBS_PRIVATE " ${lib}")
  endforeach()
endif()
foreach(lib ${OpenMP_C_LIB_NAMES} m)
  string(APPEND DPT_PC_LIBS_PRIVATE " -l${lib}")
endforeach()
string(STRIP "${DPT_PC_LIBS_PRIVATE}" DPT_PC_LIBS_PRIVATE)
file(RELATIVE_PATH DPT_PC_TO_PREFIX /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
configure_file(${CMAKE_SOURCE_DIR}/cmake/dptrain.pc.in ${CMAKE_BINARY_DIR}/dptrain.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/dptrain.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# ==== CMake package ====
set(DPT_CONFIG_MPI_NOTE "")
if(DPT_HAVE_MPI)
  set(DPT_CONFIG_MPI_NOTE ", MPI")
endif()
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/dptrainConfig.cmake.in
  ${CMAKE_BINARY_DIR}/dptrainConfig.cmake INSTALL_DESTINATION ${DPT_CMAKE_DIR})
# An 0.y release may break the ABI at every minor version (the SONAME is 0.y).
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(DPT_COMPAT SameMinorVersion)
else()
  set(DPT_COMPAT SameMajorVersion)
endif()
write_basic_package_version_file(${CMAKE_BINARY_DIR}/dptrainConfigVersion.cmake
  COMPATIBILITY ${DPT_COMPAT})
install(FILES ${CMAKE_BINARY_DIR}/dptrainConfig.cmake ${CMAKE_BINARY_DIR}/dptrainConfigVersion.cmake
  DESTINATION ${DPT_CMAKE_DIR})
install(EXPORT dptrainTargets NAMESPACE dptrain:: DESTINATION ${DPT_CMAKE_DIR})
install(EXPORT dptrainStaticTargets NAMESPACE dptrain:: DESTINATION ${DPT_CMAKE_DIR})

# ==== man page, generated from the real --help by help2man ====
find_program(DPT_HELP2MAN help2man)
if(DPT_HELP2MAN)
  set(DPT_MAN ${CMAKE_BINARY_DIR}/man/dptrain.1)
  add_custom_command(OUTPUT ${DPT_MAN}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/man
    # a sanitizer build's binary: its leak report at exit would fail the build
    COMMAND ${CMAKE_COMMAND} -E env ASAN_OPTIONS=detect_leaks=0
            sh ${CMAKE_SOURCE_DIR}/cmake/man-page.sh $<TARGET_FILE:dptrain_cli> ${DPT_MAN}
    DEPENDS dptrain_cli ${CMAKE_SOURCE_DIR}/cmake/man-page.sh
    COMMENT "Generating the man page dptrain.1 from dptrain --help (help2man)")
  add_custom_target(dptrain_man ALL DEPENDS ${DPT_MAN})
  install(FILES ${DPT_MAN} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
else()
  message(WARNING "help2man not found (Debian: help2man): no man page will be built or installed")
endif()

# ==== documentation and examples ====
install(FILES ${CMAKE_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs)
if(EXISTS ${CMAKE_SOURCE_DIR}/examples)
  install(DIRECTORY ${CMAKE_SOURCE_DIR}/examples/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)
endif()
