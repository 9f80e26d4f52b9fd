#!/usr/bin/env bash
# The sluice test suite (README command 2): installs missing Debian packages,
# builds what is missing, runs ctest. Extra arguments go to ctest, e.g.
# `tests/run.sh -L unit`.
#
#   tests/run.sh              RelWithDebInfo build in build/ (Release: add
#                             --build-type Release), every label
#   tests/run.sh --sanitize   clang, ASan + UBSan (any report fails), in
#                             build-sanitize/; labels unit bpf integration
#   tests/run.sh --sanitize-unit
#                             the same build directory, only the unit tests
#                             (what CI runs: minutes, not the whole tree)
#   tests/run.sh --fuzz       the same build directory, only the fuzz
#                             targets; each libFuzzer target for
#                             SLUICE_FUZZ_SECONDS (default 30) from its seed
#                             corpus (label fuzz)
#   tests/run.sh --build-type Debug|RelWithDebInfo|Release [--cxx clang++]
#                             another build type / compiler, in
#                             build-<type>-<compiler>/
#   --build-only              with any of the above: configure and build
#                             what that run would test, run nothing
# SLUICE_WERROR=1 makes warnings errors (-DSLUICE_WERROR=ON).
# SLUICE_BUILD_DIR overrides the build directory.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
if [ "$(id -u)" -ne 0 ]; then
  echo "tests/run.sh: run as root (BPF, network namespaces, qdiscs)" >&2
  exit 1
fi

stage=full
only=
build_type=RelWithDebInfo
cxx=
build_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --sanitize) stage=sanitize; shift ;;
    --sanitize-unit) stage=sanitize; only=unit_all; shift ;;
    --fuzz) stage=fuzz; shift ;;
    --build-only) build_only=1; shift ;;
    --build-type) build_type=$2; stage=matrix; shift 2 ;;
    --cxx) cxx=$2; stage=matrix; shift 2 ;;
    *) break ;;
  esac
done

tc-scripts/install-deps.sh

cmake_args=(-DCMAKE_BUILD_TYPE="$build_type")
if [ "${SLUICE_WERROR:-}" = 1 ]; then cmake_args+=(-DSLUICE_WERROR=ON); fi
case "$stage" in
  full)
    build=${SLUICE_BUILD_DIR:-$top/build} ;;
  matrix)
    cxx=${cxx:-g++}
    cc=gcc; [[ "$cxx" == clang++* ]] && cc=${cxx/clang++/clang}
    cmake_args+=(-DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_COMPILER="$cc")
    build=${SLUICE_BUILD_DIR:-$top/build-$build_type-${cxx%%+*}} ;;
  sanitize|fuzz)
    # clang++ (14 on Debian 12) has the libFuzzer and sanitizer runtimes.
    build=${SLUICE_BUILD_DIR:-$top/build-sanitize}
    cmake_args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang
                -DSLUICE_SANITIZE=address,undefined -DSLUICE_FUZZ=ON
                -DSLUICE_FUZZ_SECONDS="${SLUICE_FUZZ_SECONDS:-30}")
    if [ "${SLUICE_WERROR:-}" = 1 ]; then cmake_args+=(-DSLUICE_WERROR=ON); fi ;;
esac

cmake -S . -B "$build" "${cmake_args[@]}" >/dev/null
if [ "$stage" = fuzz ]; then
  # Only the fuzz targets (and what they link): fuzzing needs no test binary.
  cmake --build "$build" -j"$(nproc)" --target fuzz_all
elif [ -n "$only" ]; then
  cmake --build "$build" -j"$(nproc)" --target "$only"
else
  cmake --build "$build" -j"$(nproc)"
fi
[ "$build_only" = 1 ] && exit 0
cd "$build"

case "$stage" in
  full|matrix)
    if [ $# -gt 0 ]; then exec ctest --output-on-failure --timeout 900 "$@"; fi
    # Every label: the unit tests one per core (CPU-bound, nothing shared),
    # then the rest (bpf, integration, vm: namespaces, qdiscs, a VM) one at
    # a time.
    rc=0
    ctest --output-on-failure --timeout 900 -L unit -j"$(nproc)" || rc=$?
    ctest --output-on-failure --timeout 900 -LE unit || rc=$?
    exit $rc ;;
  sanitize|fuzz)
    # Every sanitizer report (from tests and from the daemons and tools
    # they start) goes to a file; any file fails the run, even when the
    # process that wrote it did not make its test fail.
    reports=$build/sanitizer-reports
    rm -rf "$reports"
    mkdir -p "$reports"
    export ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=1:abort_on_error=1"
    export UBSAN_OPTIONS="log_path=$reports/ubsan:print_stacktrace=1:halt_on_error=1"
    # The fuzz targets and the unit tests are CPU-bound processes that share
    # no namespace, port or file: one per core (CTEST_PARALLEL_LEVEL
    # overrides). The bpf and integration tests stay serial.
    if [ "$stage" = fuzz ]; then
      # libFuzzer reports on its own stderr (and fails the test).
      unset ASAN_OPTIONS UBSAN_OPTIONS
      [ $# -eq 0 ] && set -- -L fuzz
      export CTEST_PARALLEL_LEVEL=${CTEST_PARALLEL_LEVEL:-$(nproc)}
    elif [ -n "$only" ]; then
      [ $# -eq 0 ] && set -- -L unit
      export CTEST_PARALLEL_LEVEL=${CTEST_PARALLEL_LEVEL:-$(nproc)}
    else
      [ $# -eq 0 ] && set -- -L 'unit|bpf|integration'
    fi
    rc=0
    ctest --output-on-failure --timeout 900 "$@" || rc=$?
    if [ -n "$(ls -A "$reports")" ]; then
      echo "tests/run.sh: sanitizer reports:" >&2
      for f in "$reports"/*; do echo "== $f" >&2; cat "$f" >&2; done
      rc=1
    fi
    exit $rc ;;
esac
