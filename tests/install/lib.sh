# Shared by tests/install/*.sh (sourced after `set -u`).
# skip_if_sanitized VALUE WHAT: exits 77 (ctest: skipped) with the reason when VALUE (the
# build's DPT_SANITIZE) is on: an ASan-instrumented libdptrain.so needs the ASan runtime
# loaded first, which WHAT (programs built the way a third party builds) does not have.
skip_if_sanitized() {
  case "$1" in ON|on|1|TRUE|true|YES|yes)
    echo "skipped: in the sanitizer build (DPT_SANITIZE) libdptrain.so needs the ASan runtime loaded first, which"
    echo "$2 does not have; the Release build runs this test"
    exit 77 ;;
  esac
}
