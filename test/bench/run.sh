#!/usr/bin/env bash
# test/bench/run.sh: the dedup benchmark, every row side by side in one run.
#
#   sudo test/bench/run.sh [SECONDS_PER_RUN [ROUNDS]]   full run (default 10 s, 3 rounds)
#   sudo test/bench/run.sh --smoke                       seconds of measuring, tiny sizes:
#                                                        checks the harness end to end
#
# Runs inside one throwaway cluster (Debian's pg_virtualenv, dedup preloaded;
# fsync on, synchronous_commit off unless a row says otherwise, autovacuum
# off: the sweep rows VACUUM themselves) and compares dedup with the
# plain-SQL baseline, each pair in alternating rounds (A B A B ...) so that
# both see the same noise; reports the median and min-max of each side and
# the ratio dedup / baseline:
#
#   1-4, 6, 7  claims.sh   single claims, duplicates, claim + UPDATE, batches of
#                          100 keys (dedup_claim_many), synchronous_commit on,
#                          the claim counters
#   5          redis.sh    Redis SET NX EX, without persistence and with AOF
#   8, 9       sweep.sh    sweep scaling, claims during a sweep
#   10         growth.sh   bytes per claim, claims with many rows stored
#   11         streams.sh  claims by offset: batches vs dedup_claim_many and Redis,
#                          storage after BENCH_STREAM_CLAIMS claims
#   12         soak.sh     steady state: claims at full speed with a short window,
#                          the sweeper and autovacuum on; plateau bytes per live
#                          row vs freshly loaded, dead/live, the claim rate's
#                          stability; soak.csv and soak.png (soak_plot.py).
#                          Runs last: it changes settings (put back at its end)
#                          and leaves processed_messages empty
#   13         floors.sh   leaner layouts as plain SQL (one key index, a digest
#                          key, no index, an empty write transaction) next to
#                          the seeds' table, dedup and Redis; WAL bytes per key
#   lib.sh: measuring and bookkeeping; report.py: the table, results.csv/.json
#
# Absolute numbers on a shared machine mean little; compare ratios.  Exits
# non-zero only if something is broken, never because of a ratio.
#
# Environment (defaults for the full run; --smoke has tiny ones):
#   PG_MAJOR               the PostgreSQL version (15); as root, test/setup.sh
#                          installs and builds for it first (DEDUP_SETUP=none
#                          skips that: build and install dedup yourself)
#   BENCH_CLIENTS          pgbench clients and threads, Redis connections (2)
#   BENCH_REDIS_PIPELINE   redis-benchmark -P (16);  BENCH_REDIS_PORT (56379, and +1)
#   BENCH_SWEEP_SIZES      expired backlogs, comma-separated (500000,1000000; the
#                          issue's full list: 500000,1000000,2000000,4000000,8000000)
#   BENCH_SWEEP_ROUNDS     rounds of each sweep size (1)
#   BENCH_DURING_SECONDS   seconds of claims measured in each run of row 9 (3;
#                          each runs 1 s longer, its first second left out)
#   BENCH_DURING_ROWS      backlog loaded for each run of row 9 (default: enough
#                          for a run at the rate measured in row 8, at most
#                          BENCH_DURING_MAX, 8000000)
#   BENCH_SWEEP_DELAY      dedup.sweep_batch_delay of row 9b, in ms (10)
#   BENCH_GROWTH_SMALL, BENCH_GROWTH_LARGE   rows stored in row 10 (100000,
#                          2000000; the issue's full run: 20000000)
#   BENCH_STREAM_CLAIMS    claims by offset of row 11c (10000000)
#   BENCH_SOAK_SECONDS     length of the soak, row 12 (600; --smoke: 30)
#   BENCH_SOAK_SAMPLE      seconds between two samples of the soak (5; --smoke: 2)
#   BENCH_SOAK_RATE        claims per second of the soak, all clients together
#                          (none: full speed; --smoke: 2000, a harness check
#                          that leaves the machine to what runs beside it)
#   BENCH_SOAK_WINDOW      the soak's window, dedup_set_retention, in s (20)
#   BENCH_SOAK_INTERVAL    the soak's dedup.sweep_interval, in s (2)
#   BENCH_SOAK_SETTINGS    more server settings for the soak, as name=value
#                          separated by spaces, put back afterwards (none;
#                          e.g. dedup.sweep_vacuum_threshold=0)
#   BENCH_ROWS             only these rows, comma-separated (e.g. 12; default:
#                          all); a group of rows runs if any of its numbers is
#                          listed (1-4, 6, 7 run together).  Row 8R needs 1;
#                          row 9 sizes its backlog from 8 unless
#                          BENCH_DURING_ROWS is set (else 2000000)
#   BENCH_OUT              result directory (/tmp/dedup-bench.DATE-TIME)
set -euo pipefail
set -E
shopt -s inherit_errexit
trap 'echo "test/bench/run.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$BENCH_DIR/../.." && pwd)
# everything below runs again inside the throwaway cluster
if [ "${1:-}" != --in-cluster ]; then
	[ "$(id -u)" -ne 0 ] || "$top/test/setup.sh"
	exec pg_virtualenv -t -v "${PG_MAJOR:-15}" -o shared_preload_libraries=dedup \
		-o fsync=on -o synchronous_commit=off -o dedup.sweep_enabled=off \
		-o shared_buffers=512MB -o autovacuum=off -o max_wal_size=8GB \
		-o checkpoint_timeout=30min bash "$BENCH_DIR/run.sh" --in-cluster "$@"
fi
shift

BENCH_SMOKE=0
if [ "${1:-}" = --smoke ]; then
	BENCH_SMOKE=1
	shift
fi
BENCH_SECONDS=${1:-10}
BENCH_ROUNDS=${2:-3}
BENCH_SMOKE_TX=50
: "${BENCH_CLIENTS:=2}" "${BENCH_REDIS_PIPELINE:=16}" "${BENCH_REDIS_PORT:=56379}"
if [ "$BENCH_SMOKE" = 1 ]; then
	BENCH_SECONDS=1 BENCH_ROUNDS=1
	: "${BENCH_SWEEP_SIZES:=20000,40000}" "${BENCH_DURING_ROWS:=20000}"
	: "${BENCH_GROWTH_SMALL:=10000}" "${BENCH_GROWTH_LARGE:=50000}"
	: "${BENCH_STREAM_CLAIMS:=20000}" "${BENCH_SOAK_SECONDS:=30}" "${BENCH_SOAK_SAMPLE:=2}"
	: "${BENCH_SOAK_RATE:=2000}"
fi
: "${BENCH_SWEEP_SIZES:=500000,1000000}" "${BENCH_SWEEP_ROUNDS:=1}" "${BENCH_DURING_ROWS:=}"
: "${BENCH_DURING_MAX:=8000000}" "${BENCH_SWEEP_DELAY:=10}" "${BENCH_DURING_SECONDS:=3}"
: "${BENCH_GROWTH_SMALL:=100000}" "${BENCH_GROWTH_LARGE:=2000000}"
: "${BENCH_STREAM_CLAIMS:=10000000}"
: "${BENCH_SOAK_SECONDS:=600}" "${BENCH_SOAK_SAMPLE:=5}" "${BENCH_SOAK_WINDOW:=20}" "${BENCH_SOAK_INTERVAL:=2}"
: "${BENCH_SOAK_SETTINGS:=}"
: "${BENCH_ROWS:=}"
: "${BENCH_OUT:=/tmp/dedup-bench.$(date +%Y%m%d-%H%M%S)}"

. "$BENCH_DIR/lib.sh"
. "$BENCH_DIR/claims.sh"
. "$BENCH_DIR/redis.sh"
. "$BENCH_DIR/sweep.sh"
. "$BENCH_DIR/growth.sh"
. "$BENCH_DIR/streams.sh"
. "$BENCH_DIR/soak.sh"
. "$BENCH_DIR/floors.sh"

mkdir -p "$BENCH_OUT"
BENCH_WORK=$(mktemp -d /tmp/dedup-bench-work.XXXXXX)
results_header
started=$(date +%s)

bench_cleanup() {
	redis_stop_all
	rm -rf "$BENCH_WORK"
}
trap bench_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
psql_q -f "$BENCH_DIR/setup.sql"
echo "== $(psql_v 'SELECT version()' | cut -d, -f1); dedup $(psql_v "SELECT extversion FROM pg_extension WHERE extname = 'dedup'")"
[ "$BENCH_SMOKE" = 1 ] && echo "== smoke mode: $BENCH_SMOKE_TX transactions per client per run, 1 round, tiny sizes" ||
	echo "== $BENCH_ROUNDS rounds of $BENCH_SECONDS s per run, $BENCH_CLIENTS clients"

! rows_wanted 1 2 3 4 6 7 || bench_claims
! rows_wanted 5 || bench_redis
! rows_wanted 8 || bench_sweep
! rows_wanted 9 || bench_sweep_during
! rows_wanted 10 || bench_growth
! rows_wanted 11 || bench_streams
! rows_wanted 13 || bench_floors
! rows_wanted 12 || bench_soak	# last: see soak.sh

python3 "$BENCH_DIR/report.py" "$BENCH_OUT" \
	"mode=$([ "$BENCH_SMOKE" = 1 ] && echo smoke || echo full)" \
	"seconds_per_run=$BENCH_SECONDS" "rounds=$BENCH_ROUNDS" "clients=$BENCH_CLIENTS" \
	"redis_pipeline=$BENCH_REDIS_PIPELINE" "sweep_sizes=$BENCH_SWEEP_SIZES" \
	"sweep_rounds=$BENCH_SWEEP_ROUNDS" "growth_small=$BENCH_GROWTH_SMALL" \
	"growth_large=$BENCH_GROWTH_LARGE" "stream_claims=$BENCH_STREAM_CLAIMS" \
	"soak_seconds=$BENCH_SOAK_SECONDS" "soak_sample=$BENCH_SOAK_SAMPLE" "soak_window=$BENCH_SOAK_WINDOW" \
	"soak_interval=$BENCH_SOAK_INTERVAL" "soak_settings=$BENCH_SOAK_SETTINGS" "rows=${BENCH_ROWS:-all}" "server=$(psql_v 'SELECT version()')" \
	"redis=$(redis-server --version 2>/dev/null | awk '{ print $3 }')" \
	"cpus=$(nproc)" "date=$(date -Is)" "elapsed_s=$(($(date +%s) - started))"
echo
echo "== results: $BENCH_OUT/results.csv $BENCH_OUT/results.json (every run: $BENCH_OUT/raw.csv)"
[ ! -e "$BENCH_OUT/soak.csv" ] || echo "== the soak: $BENCH_OUT/soak.csv$([ ! -e "$BENCH_OUT/soak.png" ] || echo " $BENCH_OUT/soak.png")"
echo "== $(($(date +%s) - started)) s in all"
