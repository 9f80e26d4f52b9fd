#!/usr/bin/env bash
# Checks (default) or applies (--fix) sluice's clang-format style on every
# C/C++ source git tracks. The style lives in .clang-format (C++) and in
# bpf/, include/sluice/ and tests/bpf/progs/ (the kernel's layout for BPF C).
# The check runs in ctest (format_check) and therefore in CI; clang-format
# 14 (Debian 12) is the reference: other versions format a few constructs
# differently, so the check refuses to judge with them.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=check
case "${1:-}" in
  --fix) mode=fix ;;
  --check | "") ;;
  *) echo "usage: $0 [--check|--fix]" >&2; exit 2 ;;
esac
cf=${CLANG_FORMAT:-}
if [ -z "$cf" ]; then
  for c in clang-format-14 clang-format; do
    if command -v "$c" >/dev/null; then cf=$c; break; fi
  done
fi
if [ -z "$cf" ]; then
  echo "format.sh: clang-format not installed (tc-scripts/install-deps.sh installs it)" >&2
  exit 2
fi
ver=$("$cf" --version | sed -n 's/.*version \([0-9]*\)\..*/\1/p')
if [ "$ver" != 14 ]; then
  echo "format.sh: $cf is version $ver; the style is checked with clang-format 14" >&2
  exit 77
fi
if git rev-parse --git-dir >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.c' '*.h' '*.cc')
else
  mapfile -t files < <(find agent bench bpf include tests vm-tests -name '*.c' -o -name '*.h' -o -name '*.cc')
fi
# Test data that is wrong on purpose stays as written.
files=("${files[@]/vm-tests\/testdata\/*/}")
files=($(printf '%s\n' "${files[@]}" | sed '/^$/d'))
if [ "$mode" = fix ]; then
  "$cf" -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  if ! "$cf" --dry-run -Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "format.sh: ${#bad[@]} of ${#files[@]} files do not follow .clang-format (fix: tc-scripts/format.sh --fix):"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "format.sh: ${#files[@]} files follow .clang-format"
