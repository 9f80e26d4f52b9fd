#!/usr/bin/env bash
# Boots a kernel under QEMU (software emulation: no KVM needed) with this
# project's build, runs the vm-tests suite inside, and exits with the guest's
# result. See vm-tests/README.md.
#
# Exit status:
#   0  the guest ran the suite and every step passed (or was skipped with a reason)
#   1  the guest ran the suite and a step failed
#   2  the guest died without a result: kernel panic, oops, init crash, power-off
#   3  the guest did not finish within --timeout (hang)
#   4  the run could not start (no kernel, no QEMU, bad arguments, build missing)
set -euo pipefail
. "$(dirname "$0")/lib.sh"

usage() {
  cat <<EOF
usage: vm-tests/run-vm.sh [options]
  --build DIR        sluice build directory (default: \$SLUICE_BUILD_DIR or ./build)
  --kernel IMAGE     kernel to boot (bzImage or vmlinux); default: Debian 12's
                     newest 6.1 kernel, fetched and cached by fetch-kernel.sh
  --modules DIR      that kernel's modules (/lib/modules/<release>), or "none"
                     when everything the suite needs is built in
  --steps REGEX      run only the suite steps whose file name matches
  --steps-dir DIR    also run the steps in DIR (*.sh), after filtering
  --timeout SEC      bound on the whole guest run (default 240)
  --step-timeout SEC default bound on one suite step (default 150)
  --smp N            virtual CPUs (default 1: fastest under TCG on a busy 2-core host)
  --mem MB           guest memory (default 1536)
  --append ARGS      extra kernel command line
  --accel tcg|kvm    QEMU accelerator (default tcg: software emulation)
  --env NAME=VALUE   environment for the suite steps (repeatable; no spaces)
  --log FILE         guest console log (default BUILD/vm-tests/console.log)
  --init-test MODE   failure-path self test instead of the suite:
                     panic (guest kernel panics), hang (guest never finishes)
  -q, --quiet        do not stream the guest console (it is still logged)
EOF
}

build=${SLUICE_BUILD_DIR:-$vm_top/build}
kernel="" modules="" steps="" steps_dir="" timeout=240 step_timeout=150
smp=1 mem=1536 append="" log="" mode=suite quiet=0 guest_env="" accel=tcg
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --kernel) kernel=$2; shift 2 ;;
    --modules) modules=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --steps-dir) steps_dir=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --step-timeout) step_timeout=$2; shift 2 ;;
    --smp) smp=$2; shift 2 ;;
    --mem) mem=$2; shift 2 ;;
    --append) append=$2; shift 2 ;;
    --accel) accel=$2; shift 2 ;;
    --env)
      [[ $2 =~ ^[A-Za-z_][A-Za-z0-9_]*=[^[:space:]\'\"]*$ ]] || vm_die "--env $2: want NAME=VALUE without spaces or quotes"
      guest_env="$guest_env $2"; shift 2 ;;
    --log) log=$2; shift 2 ;;
    --init-test) mode=$2; shift 2 ;;
    -q|--quiet) quiet=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; vm_die "unknown argument: $1" ;;
  esac
done
case $mode in suite|panic|hang) ;; *) vm_die "--init-test: panic or hang, not '$mode'" ;; esac
case $accel in tcg|kvm) ;; *) vm_die "--accel: tcg or kvm, not '$accel'" ;; esac
for n in "$timeout" "$step_timeout" "$smp" "$mem"; do
  [[ $n =~ ^[0-9]+$ ]] || vm_die "not a number: $n"
done

[ "$(id -u)" -eq 0 ] || vm_die "run as root (the guest runs the build's BPF tests as root over a root-owned share)"
for t in qemu-system-x86_64 busybox cpio gzip modprobe depmod timeout; do
  command -v "$t" >/dev/null || vm_die "$t not found (tc-scripts/install-deps.sh installs it)"
done
busybox_bin=$(command -v busybox)
ldd "$busybox_bin" >/dev/null 2>&1 && vm_die "$busybox_bin is dynamically linked; install busybox-static"

build=$(cd "$build" 2>/dev/null && pwd) || vm_die "build directory not found (build first: cmake -S . -B build && cmake --build build)"
[ -f "$build/CMakeCache.txt" ] || vm_die "$build is not a CMake build directory"
[ -f "$build/vm-tests/bpf-objects.tsv" ] || vm_die "$build/vm-tests/bpf-objects.tsv missing: reconfigure with cmake"
if [ -n "$steps_dir" ]; then
  steps_dir=$(cd "$steps_dir" && pwd) || vm_die "--steps-dir not found"
fi
src=$vm_top
for p in "$src" "$build" "$steps_dir"; do
  case $p in *\'*|*' '*) vm_die "paths with quotes or spaces are not supported: $p" ;; esac
done

# --- kernel -------------------------------------------------------------
release=""
if [ -z "$kernel" ]; then
  [ -z "$modules" ] || vm_die "--modules needs --kernel"
  env_out=$("$vm_dir/fetch-kernel.sh") || vm_die "could not get the default kernel"
  eval "$env_out"
  kernel=$SLUICE_VM_KERNEL modules=$SLUICE_VM_MODULES release=$SLUICE_VM_RELEASE
else
  [ -f "$kernel" ] || vm_die "--kernel $kernel: no such file"
  [ -n "$modules" ] || vm_die "--kernel needs --modules DIR (/lib/modules/<release> of that kernel) or --modules none"
  if [ "$modules" != none ]; then
    [ -d "$modules" ] || vm_die "--modules $modules: no such directory"
    modules=$(cd "$modules" && pwd)
    release=$(basename "$modules")
  fi
  if [ "$(head -c 4 "$kernel" | od -An -tx1 | tr -d ' ')" != 7f454c46 ]; then
    # A bzImage: boot its uncompressed ELF if it has a PVH entry (faster).
    unz=$build/vm-tests/kernel-cache/$(basename "$kernel")-$(stat -c %s-%Y "$kernel").vmlinux
    mkdir -p "$(dirname "$unz")"
    if [ -f "$unz" ] || vm_uncompressed_kernel "$kernel" "$unz"; then kernel=$unz; fi
  fi
fi

# --- initramfs ----------------------------------------------------------
work=$(mktemp -d /tmp/sluice-vm.XXXXXX)
qpid=""
tpid=""
cleanup() {
  [ -n "$qpid" ] && kill "$qpid" 2>/dev/null || true
  [ -n "$tpid" ] && kill "$tpid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ird=$work/initramfs
mkdir -p "$ird"/{bin,sbin,usr/bin,usr/sbin,dev,proc,sys,etc,newroot,lower,upper}
cp "$busybox_bin" "$ird/bin/busybox"
cp "$vm_dir/guest/init" "$ird/init"
chmod 755 "$ird/init"

missing_suite=""
: > "$ird/etc/modules.load"
if [ "$modules" != none ]; then
  base=$(dirname "$(dirname "$(dirname "$modules")")")  # DIR/lib/modules/<release> -> DIR
  [ "$base/lib/modules/$release" = "$modules" ] || vm_die "--modules must be a .../lib/modules/<release> directory"
  if [ ! -f "$modules/modules.dep" ]; then
    depmod -b "$base" "$release" || vm_die "no modules.dep in $modules and depmod failed"
  fi
  kdir=$ird/lib/modules/$release
  mkdir -p "$kdir"
  for f in modules.builtin modules.builtin.modinfo modules.order; do
    [ -f "$modules/$f" ] && cp "$modules/$f" "$kdir/"
  done
  while read -r mod need _; do
    case $mod in ''|\#*) continue ;; esac
    if ! deps=$(modprobe -d "$base" -S "$release" --show-depends "$mod" 2>/dev/null); then
      if [ "$need" = boot ]; then
        vm_die "kernel $release has no module '$mod' (needed to boot the suite: $vm_dir/modules.list)"
      fi
      vm_log "warning: kernel $release has no module '$mod'; suite steps that need it will say so"
      missing_suite="$missing_suite $mod"
      continue
    fi
    while read -r verb path _; do
      [ "$verb" = insmod ] || continue   # "builtin <name>" needs nothing
      rel=${path#"$modules"/}
      dst=$kdir/$rel
      case $rel in *.ko.xz) dst=${dst%.xz} ;; *.ko.zst) dst=${dst%.zst} ;; *.ko.gz) dst=${dst%.gz} ;; esac
      [ -f "$dst" ] && continue
      mkdir -p "$(dirname "$dst")"
      case $path in
        *.ko.xz) xz -dc "$path" > "$dst" ;;
        *.ko.zst) zstd -dcq "$path" > "$dst" ;;
        *.ko.gz) gzip -dc "$path" > "$dst" ;;
        *) cp "$path" "$dst" ;;
      esac
      echo "${dst#"$ird"/}" >> "$ird/etc/modules.load"
    done <<<"$deps"
  done < "$vm_dir/modules.list"
  # For modules the kernel asks for on its own (busybox modprobe in the initramfs).
  depmod -b "$ird" "$release"
fi

# Top-level host directories the guest sees (read-only): /usr and /etc, plus
# /bin /sbin /lib* as symlinks on a merged-/usr system or shares otherwise.
shares=""   # "tag:path" ...
links=""    # "name:target" ...
share() { shares="$shares $1:$2"; }
for d in bin sbin lib lib32 lib64 libx32; do
  if [ -L "/$d" ]; then links="$links $d:$(readlink "/$d")"
  elif [ -d "/$d" ]; then share "root_$d" "/$d"; fi
done
share usr /usr
share etc /etc
share src "$src"
share build "$build"
[ -n "$steps_dir" ] && share steps "$steps_dir"

cat > "$ird/etc/sluice-vm.conf" <<EOF
MODE='$mode'
RELEASE='$release'
SRC='$src'
BUILD='$build'
STEPS='${steps//\'/}'
STEPS_DIR='$steps_dir'
STEP_TIMEOUT='$step_timeout'
SHARES='$shares'
LINKS='$links'
MISSING_MODULES='$missing_suite'
GUEST_ENV='$guest_env'
EOF

(cd "$ird" && find . | cpio -o -H newc --quiet | gzip -1) > "$work/initramfs.gz"

# --- boot ---------------------------------------------------------------
mkdir -p "$build/vm-tests"
[ -n "$log" ] || log=$build/vm-tests/console.log
: > "$log"
virtfs=()
for s in $shares; do
  virtfs+=(-virtfs "local,path=${s#*:},mount_tag=${s%%:*},security_model=none,readonly=on,multidevs=remap")
done
# panic=-1: a panic reboots at once, and -no-reboot turns that into a QEMU
# exit without the exit device: never mistaken for a pass. oops=panic makes
# an oops a panic too.
cmdline="console=ttyS0,115200 panic=-1 oops=panic quiet loglevel=4 $append"
# Software emulation (TCG) by default: on these machines /dev/kvm can exist
# without working (QEMU aborts instead of falling back). --accel kvm where
# KVM really works.
qemu=(qemu-system-x86_64 -machine "q35,accel=$accel" -cpu max -smp "$smp" -m "$mem"
      -nodefaults -no-user-config -display none -no-reboot
      -serial "file:$log"
      -device isa-debug-exit,iobase=0xf4,iosize=0x04
      -kernel "$kernel" -initrd "$work/initramfs.gz" -append "$cmdline"
      "${virtfs[@]}")

vm_log "booting $(basename "$kernel")${release:+ ($release)} under QEMU (accel $accel), $smp vCPU, ${mem} MB, timeout ${timeout}s; console log $log"
t0=$(date +%s%N)
timeout -k 5 "$timeout" "${qemu[@]}" </dev/null &
qpid=$!
if [ "$quiet" = 0 ]; then
  tail -s 0.2 -n +1 -F --pid="$qpid" "$log" 2>/dev/null &
  tpid=$!
fi
set +e
wait "$qpid"
rc=$?
set -e
qpid=""
if [ -n "$tpid" ]; then
  wait "$tpid" 2>/dev/null || true   # tail ends by itself once QEMU is gone
  tpid=""
fi
secs=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')

# --- verdict ------------------------------------------------------------
result=$(grep -a '^SLUICE-VM-RESULT: ' "$log" | tail -1 | tr -d '\r' || true)
# Kernel log lines (timestamped) that mean the kernel itself broke.
panic=$(grep -a -m1 -E 'Kernel panic - not syncing|^\[ *[0-9]+\.[0-9]+\] (BUG: |Oops|general protection fault)' "$log" | tr -d '\r' || true)
warns=$(grep -a -c -E '^\[ *[0-9]+\.[0-9]+\] WARNING: ' "$log" || true)
[ "${warns:-0}" -eq 0 ] || vm_log "note: the guest kernel printed $warns WARNING splat(s); see $log"
verdict() { vm_log "$1 (${secs}s)"; exit "$2"; }
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  verdict "FAIL: the guest did not finish within ${timeout}s (hang?)${panic:+; console shows: $panic}" 3
fi
if [ -n "$panic" ]; then
  verdict "FAIL: guest kernel crashed: $panic" 2
fi
case $rc in
  1)
    if [ "$result" = "SLUICE-VM-RESULT: PASS" ]; then
      counts=$(grep -a -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped' "$log" | tail -1 | tr -d '\r' || true)
      verdict "PASS: guest suite passed on ${release:-$(basename "$kernel")}${counts:+ ($counts)}" 0
    fi
    verdict "FAIL: the guest signalled success but printed no 'SLUICE-VM-RESULT: PASS' line" 2 ;;
  3)
    verdict "FAIL: guest suite failed: ${result#SLUICE-VM-RESULT: }" 1 ;;
  0)
    verdict "FAIL: the guest stopped without reporting a result (reboot, power-off or panic)" 2 ;;
  *)
    if [ $((rc % 2)) -eq 1 ] && [ "$rc" -lt 256 ]; then
      verdict "FAIL: guest reported status $(((rc - 1) / 2)): ${result#SLUICE-VM-RESULT: }" 1
    fi
    verdict "FAIL: QEMU exited with status $rc (see $log)" 2 ;;
esac
