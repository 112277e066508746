#!/usr/bin/env bash
# Fails when a paper is referred to as "seed 0", "seed 000", "Seed-003", "seed003", ... instead of its
# key in docs/references.md ("Castro et al. 2019", ...): in src/, docs/ and the output of
# `cnnergy --help` and `cnnergy COMMAND --help` for every command that help lists.
# Usage: check_citations.sh REPO_ROOT CNNERGY_BINARY
set -uo pipefail
root=$1 cnnergy=$2
# "seed", optional space/dash/underscore, then a 0 (the papers are 000-004): --seed 42, seed_ (rng
# variables) and "seed 1544" (a logged rng seed) do not match.
pattern='seed[ _-]?0'
status=0

if hits=$(grep -rniE "$pattern" "$root/src" "$root/docs"); then
  echo "paper cited as a seed number in the tree (use the key from docs/references.md):"
  echo "$hits"
  status=1
fi

main_help=$("$cnnergy" --help 2>&1) || { echo "cnnergy --help failed"; exit 1; }
# Command names: the indented first words of the command list ("  model-info   per-layer ...").
mapfile -t cmds < <(printf '%s\n' "$main_help" | sed -n '/^\(sub\)\?commands:$/I,/^$/p' | grep -oE '^  [a-z][a-z0-9-]+' | tr -d ' ')
if [ "${#cmds[@]}" -lt 5 ]; then
  echo "could not read the command list from cnnergy --help (found ${#cmds[@]}):"
  echo "$main_help"
  exit 1
fi
if printf '%s\n' "$main_help" | grep -niE "$pattern"; then
  echo "^ in cnnergy --help"
  status=1
fi
for c in "${cmds[@]}"; do
  out=$("$cnnergy" "$c" --help 2>&1)
  rc=$?
  if [ "$rc" -ne 0 ] || [ -z "$out" ]; then
    echo "cnnergy $c --help failed (exit $rc)"
    status=1
    continue
  fi
  if printf '%s\n' "$out" | grep -niE "$pattern"; then
    echo "^ in cnnergy $c --help"
    status=1
  fi
done
[ "$status" -eq 0 ] && echo "no seed-number citations in src/, docs/ or the help of cnnergy and its ${#cmds[@]} commands"
exit "$status"
