#!/usr/bin/env bash
# test/gates/perl_format.sh [--fix] [FILE|DIR...]: dedup's Perl formatted by
# perltidy (Debian package perltidy) with the settings of .perltidyrc at the
# top of the tree, PostgreSQL's.  Default: every .pl and .pm under test/.
# Without --fix, prints a unified diff of what would change and exits 1 if
# anything would; with --fix, rewrites the files.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
fix=
[ "${1:-}" != --fix ] || { fix=1; shift; }
[ $# -ne 0 ] || set -- "$top/test"
command -v perltidy >/dev/null || { echo "perl_format.sh: perltidy not found (Debian package perltidy)" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
changed=0 total=0
while IFS= read -r -d '' f; do
	total=$((total + 1))
	perltidy --profile="$top/.perltidyrc" --standard-error-output -o "$tmp/out" "$f" ||
		{ echo "perl_format.sh: perltidy failed on $f" >&2; exit 2; }
	cmp -s "$f" "$tmp/out" && continue
	changed=$((changed + 1))
	if [ -n "$fix" ]; then
		# perltidy may need a second pass to reach what it leaves alone
		for _ in 1 2; do
			perltidy --profile="$top/.perltidyrc" --standard-error-output -o "$tmp/again" "$tmp/out"
			cmp -s "$tmp/out" "$tmp/again" && break
			mv "$tmp/again" "$tmp/out"
		done
		cat "$tmp/out" >"$f"
	else
		diff -u --label "$f" --label "$f (tidied)" "$f" "$tmp/out" || true
	fi
done < <(find "$@" -type f \( -name '*.pl' -o -name '*.pm' \) -print0 | sort -z)
if [ $changed -ne 0 ]; then
	echo "perl_format.sh: $changed of $total files $([ -n "$fix" ] && echo tidied || echo "not as perltidy formats them")" >&2
	[ -n "$fix" ] || exit 1
fi
exit 0
