#!/usr/bin/env bash
# test_shellcheck.sh: every shell script under scripts/ (by extension .sh or
# .sbatch, or by a shell #! line) passes shellcheck at its default severity.
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh

if ! command -v shellcheck >/dev/null; then
  fail shellcheck_installed "shellcheck is missing (scripts/install_deps.sh installs it)"
  finish
fi
scripts=()
while IFS= read -r -d '' f; do
  case "$f" in
    *.sh | *.sbatch) scripts+=("$f") ;;
    *) if head -n 1 "$f" | grep -Eq '^#!.*[/ ](ba|da|k)?sh( |$)'; then scripts+=("$f"); fi ;;
  esac
done < <(find scripts -type f -print0 | sort -z)
if [ "${#scripts[@]}" -lt 3 ]; then fail shellcheck_finds_scripts "found only: ${scripts[*]}"; fi
for f in "${scripts[@]}"; do
  if out=$(shellcheck -x "$f" 2>&1); then ok "shellcheck_${f//[^A-Za-z0-9]/_}"; else fail "shellcheck_${f//[^A-Za-z0-9]/_}" "$(printf '%s' "$out" | head -n 6 | tr '\n' ' ')"; fi
done
finish
