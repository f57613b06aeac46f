#!/usr/bin/env bash
# test/bench/instructions.sh: CPU instructions per claimed key, dedup next to
# the plain-SQL baseline, counted by valgrind's callgrind -- which, unlike
# a rate, does not change with what else the machine is doing.
#
#   sudo test/bench/instructions.sh [KEYS]      (default 2000)
#   sudo test/bench/instructions.sh --smoke     the first row only, 100 keys:
#                                               the harness end to end (CI)
#
# Each workload runs in a single-user backend (postgres --single) started
# from the same fresh copy of one data directory, twice: with KEYS and with
# 2 x KEYS keys, as prepared statements; instructions per key = the
# difference / KEYS, so that startup and shutdown cancel out; what the
# single-user backend spends printing result rows (debugStartup, debugtup:
# a SELECT's row is printed, an INSERT's command tag is not) is left out,
# as no real client pays it.  Keys are
# scattered over the key space as random keys would be, but the same at
# every run.  Workloads: single claims of new keys and of recorded keys
# (dedup_claim against INSERT ... ON CONFLICT DO NOTHING), the same with
# dedup.track_claims off, and batches of 100 new keys (dedup_claim_many
# against INSERT ... SELECT FROM unnest(...) ON CONFLICT DO NOTHING
# RETURNING); then benchmark row 13's leaner layouts as plain SQL (floors.sh:
# one text key, the same in collation C, a uuid digest key, no index, an
# empty write transaction),
# single keys and batches, against the seeds' table (text primary key and a
# processed_at index) and next to dedup.  Needs valgrind and an installed
# dedup (test/setup.sh).
set -euo pipefail

SMOKE=0
if [ "${1:-}" = --smoke ]; then
	SMOKE=1
	set -- 100
fi
KEYS=${1:-2000}
PG_MAJOR=${PG_MAJOR:-15}
PG_BIN=${PG_BIN:-/usr/lib/postgresql/$PG_MAJOR/bin}
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/floors.sh"	# floor_insert, FLOOR_LAYOUTS
work=$(mktemp -d /tmp/dedup-instructions.XXXXXX)
trap 'rm -rf "$work"' EXIT
as_owner() {
	if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
[ "$(id -u)" -eq 0 ] && chown postgres: "$work"

# single DATADIR < SQL: one single-user backend, a statement per line
single() { as_owner "$PG_BIN/postgres" --single -D "$1" postgres >/dev/null 2>"$1.log"; }

# the template: dedup, the plain table, and the recorded keys
as_owner "$PG_BIN/initdb" -D "$work/template" -U postgres --auth=trust --no-sync >/dev/null
cat >>"$work/template/postgresql.conf" <<CONF
shared_preload_libraries = 'dedup'
fsync = off
synchronous_commit = off
autovacuum = off
CONF
# key N: scattered over 32 bits, the same at every run ("%.0f": mawk's "%d"
# prints every value above 2^31 - 1 as 2147483647, which made half of the
# "new" keys one recorded key)
keys() { awk -v from="$1" -v to="$2" 'BEGIN { for (i = from; i <= to; i++) printf "%.0f\n", (i * 2654435761) % 4294967296 }'; }
{
	echo "CREATE EXTENSION dedup;"
	echo "CREATE TABLE plain_messages (LIKE processed_messages INCLUDING ALL);"
	echo "INSERT INTO processed_messages (consumer_name, message_id) SELECT 'dup', 'd' || g FROM generate_series(1, $((2 * KEYS))) g;"
	echo "INSERT INTO plain_messages (consumer_name, message_id) SELECT 'dup', 'd' || g FROM generate_series(1, $((2 * KEYS))) g;"
	grep -v '^--' "$here/floor_tables.sql"
	echo "VACUUM ANALYZE;"
	echo "CHECKPOINT;"
} | single "$work/template"
! grep ERROR "$work/template.log" >&2 || exit 1

# script WORKLOAD N: the statements of a run with N keys: one prepared
# statement, executed with new keys, recorded keys, or batches of 100 new keys
script() {
	local workload=$1 n=$2 type=text statement ids=new layout
	local plain="INSERT INTO plain_messages (consumer_name, message_id)"
	case $workload in
	claim_new | counters_off) statement="SELECT dedup_claim('bench', \$1)" ;;
	plain_new) statement="$plain VALUES ('bench', \$1) ON CONFLICT DO NOTHING" ;;
	claim_dup) statement="SELECT dedup_claim('dup', \$1)" ids=recorded ;;
	plain_dup) statement="$plain VALUES ('dup', \$1) ON CONFLICT DO NOTHING" ids=recorded ;;
	claim_many) type='text[]' statement="SELECT dedup_claim_many('bench', \$1)" ids=batches ;;
	plain_many) type='text[]' ids=batches \
		statement="$plain SELECT 'bench', k FROM unnest(\$1) k ON CONFLICT DO NOTHING RETURNING message_id" ;;
	floor_xact) statement="SELECT pg_current_xact_id(), \$1" ;;
	floor_*_many) type='text[]' ids=batches layout=${workload#floor_} \
		statement=$(floor_insert "${layout%_many}" "unnest(\$1) k") ;;
	floor_*) statement=$(floor_insert "${workload#floor_}" "(VALUES (\$1)) v (k)") ;;
	esac
	echo "PREPARE w($type) AS $statement;"
	case $ids in
	new) keys 1 "$n" ;;
	recorded) seq 1 "$n" | sed 's/^/d/' ;;
	batches) keys 1 "$n" | paste -d, $(printf -- '- %.0s' $(seq 100)) | sed 's/.*/{&}/' ;;
	esac | sed "s/.*/EXECUTE w('&');/"
}

# instructions WORKLOAD N [OPTION...]: callgrind's total for a run, less
# the printing of result rows
instructions() {
	local workload=$1 n=$2 run
	shift 2
	run=$work/$workload.$n
	cp -a "$work/template" "$run"
	script "$workload" "$n" >"$run.sql"
	as_owner valgrind --tool=callgrind --callgrind-out-file="$run.out" \
		"$PG_BIN/postgres" --single -D "$run" "$@" postgres <"$run.sql" >/dev/null 2>"$run.log" ||
		{ echo "$workload: the backend failed:" >&2; tail -n 5 "$run.log" >&2; return 1; }
	grep -q ERROR "$run.log" && { echo "$workload: $(grep -m1 ERROR "$run.log")" >&2; return 1; }
	local total printing
	total=$(sed -n 's/^summary: //p' "$run.out")
	printing=$(callgrind_annotate --inclusive=yes --threshold=100 "$run.out" |
		awk '/:debugtup |:debugStartup / { gsub(",", "", $1); s += $1 } END { print s + 0 }')
	echo $((total - printing))
	rm -rf "$run" "$run.out"
}

# per_key WORKLOAD [OPTION...]: instructions per key
per_key() {
	local a b
	a=$(instructions "$1" "$KEYS" "${@:2}")
	b=$(instructions "$1" $((2 * KEYS)) "${@:2}")
	echo $(((b - a) / KEYS))
}

echo "== instructions per key (callgrind), $KEYS and $((2 * KEYS)) keys per run, $("$PG_BIN/postgres" --version)"
printf '%-42s %12s %12s %7s\n' "workload" "baseline" "dedup" "ratio"
row() {
	local what=$1 base=$2 dedup=$3
	printf '%-42s %12d %12d %7s\n' "$what" "$base" "$dedup" \
		"$(awk -v d="$dedup" -v b="$base" 'BEGIN { printf "%.3f", d / b }')"
}
claim_new=$(per_key claim_new)
row "single claim, new keys" "$(per_key plain_new)" "$claim_new"
if [ $SMOKE = 0 ]; then
	row "single claim, recorded keys" "$(per_key plain_dup)" "$(per_key claim_dup)"
	claim_many=$(per_key claim_many)
	row "batch of 100 new keys (per key)" "$(per_key plain_many)" "$claim_many"
	row "claim counters: off (base) vs on" "$(per_key counters_off -c dedup.track_claims=off)" "$claim_new"
	echo "== leaner layouts (plain SQL) against the seeds' table (text primary key, processed_at index)"
	seeds=$(per_key floor_seeds)
	row "single new key: dedup_claim" "$seeds" "$claim_new"
	for layout in "${FLOOR_LAYOUTS[@]:1}" xact; do
		row "single new key: floor_$layout" "$seeds" "$(per_key "floor_$layout")"
	done
	seeds=$(per_key floor_seeds_many)
	row "batch of 100 (per key): dedup_claim_many" "$seeds" "$claim_many"
	for layout in "${FLOOR_LAYOUTS[@]:1}"; do
		row "batch of 100 (per key): floor_$layout" "$seeds" "$(per_key "floor_${layout}_many")"
	done
fi
echo "(ratio = dedup / baseline: below 1 is fewer instructions than the baseline)"
