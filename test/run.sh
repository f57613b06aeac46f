#!/usr/bin/env bash
# test/run.sh: the whole dedup test suite on a fresh Debian 12 machine.
#
#   sudo test/run.sh
#
# Installs the packages it needs, builds and installs dedup, starts a
# throwaway cluster as the unprivileged user "postgres", and runs
# "make installcheck" there: pg_regress (sql/, expected/), the isolation
# specs (test/isolation/) and the TAP tests (test/t/, which start their own
# clusters).  Exits non-zero if anything fails, printing the differences.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ "$(id -u)" -eq 0 ]; then
	"$top/test/setup.sh"
fi
. "$top/test/cluster.sh"
# pg_regress and the isolation specs expect no sweep behind their backs; the
# TAP tests start their own clusters to test the sweeper
cluster_start "dedup.sweep_enabled = off"

# a private copy of the tree the tests may write into (results/, tmp_check/)
work=$CLUSTER_DIR/src
mkdir -p "$work"
rsync -a --exclude .git "$top/" "$work/"
[ "$(id -u)" -eq 0 ] && chown -R postgres: "$work"

if ! as_pg make -C "$work" -s installcheck PG_CONFIG="$PG_BIN/pg_config" PROVE_FLAGS="--timer"; then
	for f in "$work"/regression.diffs "$work"/output_iso/regression.diffs; do
		[ -f "$f" ] && { echo "== $f"; cat "$f"; }
	done
	for f in "$work"/tmp_check/log/regress_log_*; do
		[ -f "$f" ] && { echo "== tail of $f"; tail -n 40 "$f"; }
	done
	echo "== FAILED"
	exit 1
fi
echo "== all dedup tests passed"
