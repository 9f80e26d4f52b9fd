# Host-side helpers shared by the vm-tests scripts (sourced, not run).

vm_top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
vm_dir=$vm_top/vm-tests

vm_log() { echo "vm-tests: $*" >&2; }
vm_die() {
  echo "vm-tests: error: $*" >&2
  exit "${VM_DIE_STATUS:-4}"
}

# Where downloaded and unpacked kernels live (git-ignored).
vm_cache_dir() { echo "${SLUICE_VM_CACHE:-$vm_dir/cache}"; }

# vm_uncompressed_kernel IMAGE OUT: writes the ELF vmlinux inside a bzImage
# to OUT if it can be found and is bootable directly (it carries the PVH
# entry note QEMU needs to boot an ELF); returns non-zero otherwise. Booting
# the uncompressed ELF saves the in-guest decompression, which under TCG
# costs seconds per boot.
vm_uncompressed_kernel() {
  local img=$1 out=$2 magic off cmd
  # magic bytes -> decompressor (the kernel's own set of formats)
  for spec in $'\xfd7zXZ:xz -dc --single-stream' \
              $'\x28\xb5\x2f\xfd:zstd -dcq' \
              $'\x1f\x8b\x08:gzip -dc' \
              $'\x02\x21\x4c\x18:lz4 -dc' \
              $'\x89\x4c\x5a\x4f:lzop -dc' \
              $'BZh91AY&SY:bzip2 -dc'; do
    magic=${spec%%:*}
    cmd=${spec#*:}
    command -v "${cmd%% *}" >/dev/null || continue
    # Try every occurrence: the magic bytes can also appear by chance.
    for off in $(LC_ALL=C grep -abo -F -- "$magic" "$img" 2>/dev/null | cut -d: -f1 | head -5); do
      tail -c +$((off + 1)) "$img" | $cmd > "$out.tmp" 2>/dev/null
      if [ -s "$out.tmp" ] && [ "$(head -c 4 "$out.tmp" | od -An -tx1 | tr -d ' ')" = 7f454c46 ]; then
        # XEN_ELFNOTE_PHYS32_ENTRY (18): the PVH entry point.
        if readelf -n "$out.tmp" 2>/dev/null | grep -q 'Xen.*(0x00000012)'; then
          mv "$out.tmp" "$out"
          return 0
        fi
        rm -f "$out.tmp"
        return 1
      fi
    done
  done
  rm -f "$out.tmp"
  return 1
}
