#!/usr/bin/env bash
# The "Where unsafe lives" table of docs/DESIGN.md, counted from the source: for every tracked
# Rust file outside tests/ and fuzz/, the lines that name `unsafe` (`grep -c unsafe`: lint
# attributes such as #![forbid(unsafe_code)] and SAFETY comments that say the word count too),
# grouped by layer (src/<dir>) or crate (<crate>/src).
#   scripts/unsafe-table.sh           print the table
#   scripts/unsafe-table.sh --check   exit 1 if docs/DESIGN.md's table differs (show the diff)
#   scripts/unsafe-table.sh --write   replace docs/DESIGN.md's table with the printed one
# The table sits in DESIGN.md between the lines <!-- unsafe-table:begin --> and
# <!-- unsafe-table:end -->.
set -euo pipefail
cd "$(dirname "$0")/.."
design=docs/DESIGN.md
begin='<!-- unsafe-table:begin -->'
end='<!-- unsafe-table:end -->'

table() {
  echo '| where | files and lines naming `unsafe` | lines |'
  echo '|---|---|---:|'
  git ls-files -- '*.rs' ':!:tests/**' ':!:fuzz/**' | LC_ALL=C sort | while read -r f; do
    n=$(grep -c unsafe -- "$f" || true)
    [ "$n" -gt 0 ] || continue
    case "$f" in
      src/*/*) g=$(echo "$f" | cut -d/ -f1-2); rel=${f#"$g"/} ;;
      */src/*) g=${f%%/src/*}/src; rel=${f#"$g"/} ;;
      *) g=$(dirname "$f"); rel=$(basename "$f") ;;
    esac
    printf '%s\t%s\t%s\n' "$g" "$rel" "$n"
  done | awk -F'\t' '
    $1 != g { if (g != "") printf "| `%s` | %s | %d |\n", g, list, sum; g = $1; list = ""; sum = 0 }
    { list = list (list == "" ? "" : ", ") "`" $2 "` " $3; sum += $3; total += $3 }
    END { if (g != "") printf "| `%s` | %s | %d |\n", g, list, sum; printf "| all | | %d |\n", total }'
}

current() { awk -v b="$begin" -v e="$end" '$0 == e { p = 0 } p { print } $0 == b { p = 1 }' "$design"; }

case "${1:-}" in
  "") table ;;
  --check)
    if ! grep -qxF "$begin" "$design" || ! grep -qxF "$end" "$design"; then
      echo "unsafe-table: $design has no $begin ... $end block" >&2; exit 1
    fi
    if ! diff <(current) <(table) >/tmp/unsafe-table.$$.diff; then
      echo "unsafe-table: the table in $design differs from the source (< document, > source):" >&2
      cat /tmp/unsafe-table.$$.diff >&2; rm -f /tmp/unsafe-table.$$.diff
      echo "unsafe-table: run 'bash scripts/unsafe-table.sh --write' and commit the result" >&2
      exit 1
    fi
    rm -f /tmp/unsafe-table.$$.diff
    echo "unsafe-table: $design matches the source" ;;
  --write)
    t=$(mktemp); table >"$t"
    awk -v b="$begin" -v e="$end" -v t="$t" '
      $0 == b { print; while ((getline l < t) > 0) print l; skip = 1; next }
      $0 == e { skip = 0 }
      !skip { print }' "$design" >"$design.new"
    mv "$design.new" "$design"; rm -f "$t"
    echo "unsafe-table: $design updated" ;;
  *) echo "usage: $0 [--check|--write]" >&2; exit 2 ;;
esac
