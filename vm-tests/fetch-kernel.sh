#!/usr/bin/env bash
# Fetches the default vm-tests kernel: the newest Debian 12 6.1 kernel
# package (linux-image-6.1.0-N-amd64-unsigned) from Debian's archive through
# apt, unpacked (never installed) into the cache, with modules.dep built and
# the uncompressed vmlinux extracted. Prints, on stdout:
#   SLUICE_VM_KERNEL=<image>  SLUICE_VM_MODULES=<modules dir>  SLUICE_VM_RELEASE=<uname -r>
# Reuses the cache when the newest package is already there; apt is asked
# at most once per SLUICE_VM_APT_TTL seconds (default 3600) per cache, so a
# test run that boots several times does not pay for it each time.
#
# Environment:
#   SLUICE_VM_CACHE        cache directory (default vm-tests/cache, git-ignored)
#   SLUICE_VM_KERNEL_PKG   another Debian kernel image package to use instead
#                          (e.g. linux-image-6.1.0-55-amd64-unsigned)
set -euo pipefail
. "$(dirname "$0")/lib.sh"

cache=$(vm_cache_dir)
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9

newest_cached() {
  local d
  for d in $(ls -d "$cache"/linux-image-*/ 2>/dev/null | sort -V -r); do
    [ -e "$d/.complete" ] && { echo "${d%/}"; return 0; }
  done
  return 1
}

emit() {
  local d=$1
  # shellcheck disable=SC1091
  . "$d/kernel.env"
  echo "SLUICE_VM_KERNEL=$d/$KERNEL"
  echo "SLUICE_VM_MODULES=$d/root/lib/modules/$RELEASE"
  echo "SLUICE_VM_RELEASE=$RELEASE"
  vm_log "kernel $RELEASE ($(basename "$d")) in $d"
}

candidate() { apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}'; }

pick_package() {
  local names p v
  names=$(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64-unsigned$' 2>/dev/null |
          awk '{print $1}' | sort -V -r)
  for p in $names; do
    v=$(candidate "$p")
    if [ -n "$v" ] && [ "$v" != "(none)" ]; then
      echo "$p $v"
      return 0
    fi
  done
  return 1
}

ttl=${SLUICE_VM_APT_TTL:-3600}
if [ -z "${SLUICE_VM_KERNEL_PKG:-}" ] && [ -f "$cache/.newest" ]; then
  d=$(cat "$cache/.newest")
  age=$(( $(date +%s) - $(stat -c %Y "$cache/.newest") ))
  if [ "$age" -lt "$ttl" ] && [ -e "$d/.complete" ]; then
    emit "$d"
    exit 0
  fi
fi

pkg=${SLUICE_VM_KERNEL_PKG:-}
if [ -n "$pkg" ]; then
  ver=$(candidate "$pkg")
  if [ -z "$ver" ] || [ "$ver" = "(none)" ]; then
    [ "$(id -u)" -eq 0 ] && apt-get update -qq >&2 || true
    ver=$(candidate "$pkg")
  fi
  [ -n "$ver" ] && [ "$ver" != "(none)" ] || vm_die "apt has no package $pkg"
else
  if ! sel=$(pick_package); then
    # Fresh machine: package lists not downloaded yet.
    if [ "$(id -u)" -eq 0 ]; then
      vm_log "no Debian 6.1 kernel package known to apt; running apt-get update"
      apt-get update -qq >&2 || true
    fi
    sel=$(pick_package) || sel=""
  fi
  if [ -z "$sel" ]; then
    if d=$(newest_cached); then
      vm_log "apt offers no linux-image-6.1.0-*-amd64-unsigned; using the cached kernel"
      emit "$d"
      exit 0
    fi
    vm_die "apt offers no linux-image-6.1.0-*-amd64-unsigned package (is Debian 12's archive in the apt sources?)"
  fi
  read -r pkg ver <<<"$sel"
fi

dest=$cache/${pkg}_${ver//:/%}
remember() { [ -n "${SLUICE_VM_KERNEL_PKG:-}" ] || echo "$dest" > "$cache/.newest"; }
if [ -e "$dest/.complete" ]; then
  remember
  emit "$dest"
  exit 0
fi

vm_log "downloading $pkg $ver (apt-get download; unpacked into $cache, not installed)"
t0=$(date +%s)
rm -rf "$dest"
mkdir -p "$dest/dl"
if ! (cd "$dest/dl" && apt-get download -q -o APT::Sandbox::User=root "$pkg=$ver" >&2); then
  rm -rf "$dest"
  # Stale package lists name a file the archive no longer has: refresh once.
  if [ -z "${SLUICE_VM_FETCH_RETRY:-}" ] && [ "$(id -u)" -eq 0 ]; then
    vm_log "apt-get download failed; running apt-get update and trying again"
    apt-get update -qq >&2 || true
    flock -u 9
    SLUICE_VM_FETCH_RETRY=1 exec "$0" "$@"
  fi
  if d=$(newest_cached); then
    vm_log "apt-get download $pkg=$ver failed; using the cached kernel"
    emit "$d"
    exit 0
  fi
  vm_die "apt-get download $pkg=$ver failed"
fi
deb=$(ls "$dest"/dl/*.deb)
dpkg-deb -x "$deb" "$dest/root"
rm -rf "$dest/dl"

release=$(ls "$dest/root/lib/modules" | head -1)
[ -n "$release" ] || vm_die "$pkg has no /lib/modules/<release>"
image=$(ls "$dest"/root/boot/vmlinuz-* | head -1)
# The package ships no modules.dep (its postinst runs depmod); make it here.
depmod -b "$dest/root" "$release"
kernel=${image#"$dest"/}
if vm_uncompressed_kernel "$image" "$dest/vmlinux"; then
  kernel=vmlinux
else
  vm_log "could not extract a bootable vmlinux from $image; booting the compressed image"
fi
printf 'RELEASE=%s\nKERNEL=%s\nPACKAGE=%s\nVERSION=%s\n' "$release" "$kernel" "$pkg" "$ver" > "$dest/kernel.env"
touch "$dest/.complete"
vm_log "unpacked in $(( $(date +%s) - t0 )) s"

# Keep only this kernel of the default series (each takes ~400 MB).
if [ -z "${SLUICE_VM_KERNEL_PKG:-}" ]; then
  for d in "$cache"/linux-image-6.1.0-*-amd64-unsigned_*; do
    [ "$d" = "$dest" ] || [ ! -d "$d" ] || { vm_log "removing older cached kernel $(basename "$d")"; rm -rf "$d"; }
  done
fi
remember
emit "$dest"
