#!/usr/bin/env bash
# The full sluice test suite (README command 2): installs missing Debian
# packages, builds what is missing, runs every ctest label (unit, bpf,
# integration, vm). Extra arguments go to ctest, e.g. `tests/run.sh -L unit`.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
if [ "$(id -u)" -ne 0 ]; then
  echo "tests/run.sh: run as root (BPF, network namespaces, qdiscs)" >&2
  exit 1
fi
tc-scripts/install-deps.sh
build=${SLUICE_BUILD_DIR:-$top/build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)"
cd "$build"
exec ctest --output-on-failure --timeout 900 "$@"
