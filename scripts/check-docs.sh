#!/usr/bin/env bash
# Checks the documents keep their shape (issue #36); run by scripts/test-all.sh near the start.
#  1. No commit hash outside history files: a word of 7-40 hex digits in a tracked *.md file
#     that is the prefix of a commit of `git rev-list --all` fails, unless the file's name
#     contains HISTORY (bench/HISTORY.md: run logs and per-commit notes live there).
#  2. README.md is at most 250 lines.
#  3. docs/DESIGN.md's "Where unsafe lives" table equals scripts/unsafe-table.sh's count.
# Exits 1 naming every file, line and hash that breaks a rule.
set -euo pipefail
cd "$(dirname "$0")/.."
fail=0

revs=$(mktemp); trap 'rm -f "$revs"' EXIT
git rev-list --all >"$revs"
hits=0
while IFS= read -r f; do
  case "$(basename "$f")" in *HISTORY*) continue ;; esac
  [ -f "$f" ] || continue
  # line:word for every 7-40 hex-digit word of the file
  while IFS=: read -r line word; do
    if grep -q "^$word" "$revs"; then
      echo "check-docs: $f:$line: commit hash $word (move it to a history file, e.g. bench/HISTORY.md)" >&2
      hits=$((hits + 1))
    fi
  done < <(grep -noEw '[0-9a-f]{7,40}' "$f" || true)
done < <(git ls-files -- '*.md')
if [ "$hits" -gt 0 ]; then
  echo "check-docs: $hits commit hash(es) outside history files" >&2; fail=1
else
  echo "check-docs: no commit hash outside history files"
fi

lines=$(wc -l <README.md)
if [ "$lines" -gt 250 ]; then
  echo "check-docs: README.md has $lines lines (at most 250)" >&2; fail=1
else
  echo "check-docs: README.md has $lines lines (at most 250)"
fi

bash scripts/unsafe-table.sh --check || fail=1
exit "$fail"
