# Run at every build by the target dptrain_build_id (cmake -DSRC_DIR=... -DOUT=... -P this):
# writes OUT, a header defining DPT_BUILD_ID as the source revision the library is built
# from (`git describe --always --dirty --abbrev=12` of SRC_DIR: a commit, "-dirty" when the
# tree had uncommitted changes; "unknown" outside a git checkout, e.g. a source tarball). It
# rewrites OUT only when the revision changed, so an unchanged tree recompiles nothing.
execute_process(COMMAND git -C "${SRC_DIR}" describe --always --dirty --abbrev=12
  OUTPUT_VARIABLE id RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT rc EQUAL 0 OR id STREQUAL "" OR NOT id MATCHES "^[A-Za-z0-9._+-]+$")
  set(id "unknown")
endif()
set(text "/* Generated at every build by cmake/build_id.cmake: the source revision. */\n#define DPT_BUILD_ID \"${id}\"\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
