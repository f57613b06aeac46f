#!/usr/bin/env bash
# test/bench/outbox.sh: the outbox benchmark (issue 32), side by side in one
# run, each pair in alternating rounds, ratios of the medians.
#
#   sudo test/bench/outbox.sh [SECONDS_PER_RUN [ROUNDS]]   (default 10 s, 3 rounds)
#   sudo test/bench/outbox.sh --smoke                      the harness end to end, briefly
#
# On one throwaway cluster (Debian's pg_virtualenv, dedup preloaded, fsync
# on, synchronous_commit off, autovacuum off but in O4, wal_level logical
# for every row so that both sides of a pair write the same kind of WAL)
# and a private RabbitMQ node (test/bench/outbox_relay.pl):
#
#   O1  claim + UPDATE + dedup_publish to a table-mode destination
#       (outbox_publish_table.sql) vs the same transaction with the outbox
#       row written by hand into plain_outbox, a table with the columns and
#       indexes of dedup_outbox and a random id (outbox_hand.sql); tps,
#       target >= 1.0x
#   O2  the same with a WAL-mode destination (outbox_publish_wal.sql: a
#       logical decoding message, no row; no slot reads it meanwhile) vs
#       the same hand-written table; tps, target >= 1.3x; and its ceiling,
#       O2c: the same statements with the publish replaced by one that
#       writes nothing (outbox_none.sql), which no publish can beat
#   O3  dedup_relay's throughput, BENCH_OUTBOX_MESSAGES messages (100 per
#       transaction) moved to RabbitMQ until idle, vs publishing as many
#       straight to RabbitMQ with confirms, no database (outbox_direct.py):
#       O3a table mode and O3b WAL mode against the relay's own publisher
#       (a batch of 100 published, then its confirms awaited: the ratio is
#       what the database side costs; target >= 0.8x), O3c table mode
#       against pika's BlockingChannel waiting for each confirm; messages/s
#   O4  storage at steady state, table mode: BENCH_OUTBOX_SOAK seconds of
#       O1's transactions at BENCH_OUTBOX_RATE/s with the relay sending, the
#       retention worker every second (dedup.outbox_retention =
#       BENCH_OUTBOX_RETENTION s) and autovacuum; over the second half,
#       the bytes of dedup_outbox (table and indexes) per row against the
#       bytes per row of the same rows in a fresh, vacuumed table (target:
#       at most 2x); and the rows (the live backlog: unsent + sent within
#       the retention) and the unsent ones
#
# Writes results.csv, results.json and raw.csv (report.py) in BENCH_OUT.
# Exits non-zero only if something is broken, never because of a ratio.
# Environment: PG_MAJOR (15; as root, test/setup.sh installs and builds
# first unless DEDUP_SETUP=none), BENCH_CLIENTS (2), BENCH_OUTBOX_MESSAGES
# (20000; --smoke 1000), BENCH_OUTBOX_SOAK (120; --smoke 10),
# BENCH_OUTBOX_SAMPLE (5; --smoke 2), BENCH_OUTBOX_RATE (1000),
# BENCH_OUTBOX_RETENTION (10), BENCH_OUTBOX_SETTINGS (server settings for
# O4 as name=value separated by spaces, e.g. autovacuum_naptime=1s), BENCH_ROWS (only these rows, e.g. O3 or
# O1,O4; O1 and O2 run together), BENCH_OUT.
set -euo pipefail
set -E
shopt -s inherit_errexit
trap 'echo "test/bench/outbox.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$BENCH_DIR/../.." && pwd)
if [ "${1:-}" != --in-cluster ]; then
	[ "$(id -u)" -ne 0 ] || "$top/test/setup.sh"
	exec pg_virtualenv -t -v "${PG_MAJOR:-15}" -o shared_preload_libraries=dedup \
		-o fsync=on -o synchronous_commit=off -o dedup.sweep_enabled=off \
		-o wal_level=logical -o max_wal_senders=4 -o max_replication_slots=4 \
		-o shared_buffers=512MB -o autovacuum=off -o max_wal_size=8GB \
		-o checkpoint_timeout=30min bash "$BENCH_DIR/outbox.sh" --in-cluster "$@"
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
: "${BENCH_ROWS:=}"
if [ "$BENCH_SMOKE" = 1 ]; then
	BENCH_SECONDS=1 BENCH_ROUNDS=1
	: "${BENCH_OUTBOX_MESSAGES:=1000}" "${BENCH_OUTBOX_SOAK:=10}" "${BENCH_OUTBOX_SAMPLE:=2}"
fi
: "${BENCH_CLIENTS:=2}" "${BENCH_OUTBOX_MESSAGES:=20000}" "${BENCH_OUTBOX_SOAK:=120}"
: "${BENCH_OUTBOX_SAMPLE:=5}" "${BENCH_OUTBOX_RATE:=1000}" "${BENCH_OUTBOX_RETENTION:=10}"
: "${BENCH_OUTBOX_SETTINGS:=}"
: "${BENCH_OUT:=/tmp/dedup-bench-outbox.$(date +%Y%m%d-%H%M%S)}"

. "$BENCH_DIR/lib.sh"
mkdir -p "$BENCH_OUT"
BENCH_WORK=$(mktemp -d /tmp/dedup-bench-work.XXXXXX)
trap 'rm -rf "$BENCH_WORK"' EXIT
results_header
started=$(date +%s)

psql_q -f "$BENCH_DIR/setup.sql" -c "
CREATE TABLE plain_outbox (LIKE dedup_outbox INCLUDING ALL);
SELECT dedup_add_destination('bench_table', 'table'), dedup_add_destination('bench_wal', 'wal');" >/dev/null
echo "== $(psql_v 'SELECT version()' | cut -d, -f1); dedup $(psql_v "SELECT extversion FROM pg_extension WHERE extname = 'dedup'")"

# outbox_relay.pl MODE ARGS...: its VALUE lines recorded, its NOTE lines shown
broker_rows() {
	local tag name value
	while read -r tag name value; do
		case $tag in
		VALUE) record "$name" "$value" ;;
		NOTE) echo "   $name $value" ;;
		esac
	done < <(perl "$BENCH_DIR/outbox_relay.pl" "$@")
	wait $! # its exit status
}

bench_publish() {
	section "O1, O2. claim + UPDATE + publish: dedup_publish (table, WAL) vs an outbox table by hand"
	arm outbox_hand pg_rate outbox_hand.sql
	arm outbox_table pg_rate outbox_publish_table.sql
	arm outbox_wal pg_rate outbox_publish_wal.sql
	arm outbox_none pg_rate outbox_none.sql
	rounds outbox_hand outbox_table outbox_wal outbox_none
	result O1 "claim + UPDATE + publish, table mode" tps \
		"INSERT into an outbox by hand" outbox_hand "dedup_publish, table" outbox_table "target: >= 1.0x"
	result O2 "claim + UPDATE + publish, WAL mode" tps \
		"INSERT into an outbox by hand" outbox_hand "dedup_publish, WAL" outbox_wal "target: >= 1.3x"
	result O2c "claim + UPDATE + a statement that writes nothing (the ceiling of O2)" tps \
		"INSERT into an outbox by hand" outbox_hand "no outbox" outbox_none ""
	psql_q -c "TRUNCATE dedup_outbox, plain_outbox"
}

bench_relay() {
	section "O3. dedup_relay vs publishing straight to RabbitMQ with confirms ($BENCH_OUTBOX_MESSAGES messages)"
	broker_rows throughput "$BENCH_ROUNDS" "$BENCH_OUTBOX_MESSAGES"
	result O3a "relay throughput, table mode" msgs/s \
		"RabbitMQ direct, windowed confirms" relay_direct "dedup_relay, table" relay_table "target: >= 0.8x"
	result O3b "relay throughput, WAL mode" msgs/s \
		"RabbitMQ direct, windowed confirms" relay_direct "dedup_relay, WAL" relay_wal "target: >= 0.8x"
	result O3c "relay throughput, table mode, vs a confirm per message" msgs/s \
		"RabbitMQ direct, confirm per message" relay_blocking "dedup_relay, table" relay_table ""
}

bench_storage() {
	section "O4. table mode at steady state: ${BENCH_OUTBOX_SOAK} s at ${BENCH_OUTBOX_RATE}/s, retention ${BENCH_OUTBOX_RETENTION} s ${BENCH_OUTBOX_SETTINGS}"
	# shellcheck disable=SC2086 # name=value words
	broker_rows soak "$BENCH_OUTBOX_SOAK" "$BENCH_OUTBOX_SAMPLE" "$BENCH_OUTBOX_RATE" "$BENCH_OUTBOX_RETENTION" \
		$BENCH_OUTBOX_SETTINGS
	result O4a "bytes per row of dedup_outbox at steady state" bytes/row \
		"fresh, vacuumed copy" outbox_fresh_bytes_per_row "steady state" outbox_soak_bytes_per_row "target: <= 2x"
	figure O4b "rows of dedup_outbox at steady state (live backlog)" rows "rows" outbox_soak_rows \
		"$(stats outbox_soak_unsent | cut -d' ' -f1)" "the figure: median unsent rows"
}

! rows_wanted O1 O2 || bench_publish
! rows_wanted O3 || bench_relay
! rows_wanted O4 || bench_storage

python3 "$BENCH_DIR/report.py" "$BENCH_OUT" \
	"mode=$([ "$BENCH_SMOKE" = 1 ] && echo smoke || echo full)" \
	"seconds_per_run=$BENCH_SECONDS" "rounds=$BENCH_ROUNDS" "clients=$BENCH_CLIENTS" \
	"outbox_messages=$BENCH_OUTBOX_MESSAGES" "outbox_soak=$BENCH_OUTBOX_SOAK" \
	"outbox_rate=$BENCH_OUTBOX_RATE" "outbox_retention=$BENCH_OUTBOX_RETENTION" \
	"server=$(psql_v 'SELECT version()')" "cpus=$(nproc)" "date=$(date -Is)" \
	"elapsed_s=$(($(date +%s) - started))"
echo
echo "== results: $BENCH_OUT/results.csv $BENCH_OUT/results.json (every run: $BENCH_OUT/raw.csv)"
echo "== $(($(date +%s) - started)) s in all"
