#!/usr/bin/env bash
# Install every Debian 12 package sluice needs to build, test, run the lab and
# the VM tests. Idempotent: runs `apt-get update` at most once, and only when
# something is missing. Safe to call from every entry point.
set -euo pipefail

PKGS=(
  # build
  cmake make g++ pkg-config git
  clang-16 llvm-16 libbpf-dev bpftool libelf-dev zlib1g-dev
  linux-libc-dev
  # agent libraries
  libboost-dev libboost-system-dev libnl-3-dev libnl-route-3-dev libnl-genl-3-dev
  libtomlplusplus-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  prometheus-cpp-dev libcli11-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  clang-format-14  # tc-scripts/format.sh, the format_check test
  # lab and runtime tools
  iproute2 iperf3 ethtool procps psmisc curl python3 python3-matplotlib jq
  linuxptp  # TOP: ptp4l/pmc, read by the clock manager (software timestamps in the lab)
  # packaging (the .deb test)
  dpkg-dev lintian
  # vm-tests
  qemu-system-x86 busybox-static cpio kmod zstd xz-utils
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages: ${missing[*]}" >&2
  echo "install-deps: run as root (or install them yourself)" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
