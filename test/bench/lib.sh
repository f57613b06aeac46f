# test/bench/lib.sh: measurement and bookkeeping helpers for the benchmark
# (sourced by test/bench/run.sh inside its throwaway cluster: psql and
# pgbench connect with the PG* variables pg_virtualenv sets).
#
# Owns: server settings changed for a row (server_conf), one pgbench
# measurement (pg_rate), named series of measurements ("arms") run in
# alternating rounds (rounds A B ... repeats A B ...), their median and
# min-max, and the result rows (result, figure, skip) that report.py turns
# into the printed table, results.csv and results.json.
#
# Expects: BENCH_DIR, BENCH_WORK (scratch dir), BENCH_SMOKE (0/1),
# BENCH_SECONDS, BENCH_ROUNDS, BENCH_CLIENTS, BENCH_SMOKE_TX, BENCH_ROWS.

# psql_q SQL...: run SQL, quietly, stopping at the first error
psql_q() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }
# psql_v SQL: one value
psql_v() { psql -X -A -t -v ON_ERROR_STOP=1 -c "$1"; }
# psql_ms SQL: run SQL, print how long it took in ms (psql's \timing)
psql_ms() {
	psql -X -q -v ON_ERROR_STOP=1 -c '\timing on' -c "$1" |
		awk '/^Time:/ { t = $2 } END { if (t == "") exit 1; print t }'
}
# server_conf SETTING=VALUE|SETTING...: ALTER SYSTEM SET each SETTING=VALUE
# (ALTER SYSTEM RESET each bare SETTING: back to postgresql.conf or the
# default) and reload; returns once a new session sees the reloaded
# configuration (pg_conf_load_time), and a moment later, so that background
# workers (the autovacuum launcher, dedup's launcher and sweepers, which
# reread it at their next loop) have it too
server_conf() {
	local kv sql=() since i
	for kv in "$@"; do
		if [[ $kv == *=* ]]; then
			sql+=(-c "ALTER SYSTEM SET ${kv%%=*} = '${kv#*=}'")
		else
			sql+=(-c "ALTER SYSTEM RESET $kv")
		fi
	done
	since=$(psql_v "SELECT clock_timestamp()")
	psql_q "${sql[@]}" -c "SELECT pg_reload_conf()" >/dev/null
	for i in $(seq 100); do
		[ "$(psql_v "SELECT pg_conf_load_time() >= '$since'::timestamptz")" = f ] || break
		[ "$i" -lt 100 ] || { echo "server_conf: the reload of $* is not visible after 10 s" >&2; return 1; }
		sleep 0.1
	done
	sleep 0.5
}

# server_settings NAME...: "NAME=VALUE" of each setting now, as server_conf
# takes them (to put them back afterwards)
server_settings() {
	local name
	for name in "$@"; do
		echo "$name=$(psql_v "SELECT setting FROM pg_settings WHERE name = '$name'")"
	done
}

# rows_wanted N...: whether BENCH_ROWS (empty: every row) lists one of the rows N
rows_wanted() {
	local n
	[ -n "$BENCH_ROWS" ] || return 0
	for n in "$@"; do
		[[ ",$BENCH_ROWS," != *",$n,"* ]] || return 0
	done
	return 1
}

calc() { awk "BEGIN { print $* }"; }
# rate EXPR: EXPR rounded to an integer (rows/s, tps)
rate() { awk "BEGIN { printf \"%.0f\\n\", $* }"; }

# pg_rate SCRIPT [PGOPTIONS]: one pgbench run of test/bench/SCRIPT or of the
# absolute path SCRIPT (prepared statements, BENCH_CLIENTS clients and
# threads, BENCH_SECONDS seconds or in smoke mode BENCH_SMOKE_TX transactions
# per client); prints its TPS
pg_rate() {
	local script=$1 opts=${2:-} out tps
	[[ $script == /* ]] || script=$BENCH_DIR/$script
	local len=(-T "$BENCH_SECONDS")
	[ "$BENCH_SMOKE" = 0 ] || len=(-t "$BENCH_SMOKE_TX")
	if ! out=$(PGOPTIONS="$opts" pgbench -n -M prepared "${len[@]}" \
		-c "$BENCH_CLIENTS" -j "$BENCH_CLIENTS" -f "$script" 2>&1); then
		echo "pgbench -f $script failed:" >&2
		echo "$out" | tail -n 5 >&2
		return 1
	fi
	tps=$(echo "$out" | awk '/^tps/ { printf "%.0f\n", $3 }')
	if [ -z "$tps" ] || [ "$tps" = 0 ]; then
		echo "pgbench -f $script reported no TPS:" >&2
		echo "$out" | tail -n 5 >&2
		return 1
	fi
	echo "$tps"
}

# arm NAME CMD...: declare a series; CMD prints one measurement
declare -A ARM_CMD=()
arm() { local name=$1; shift; ARM_CMD[$name]=$(printf '%q ' "$@"); : >"$BENCH_WORK/vals.$name"; }

# record NAME VALUE: add a measurement to a series (declared or not)
record() {
	[ -n "$2" ] || { echo "empty measurement for $1" >&2; return 1; }
	echo "$2" >>"$BENCH_WORK/vals.$1"
	echo "$1,$(wc -l <"$BENCH_WORK/vals.$1"),$2" >>"$BENCH_OUT/raw.csv"
}

# rounds NAME...: BENCH_ROUNDS rounds, each running every arm once in the
# given order (A B A B ...), so that all of them see the same noise
rounds() {
	local r name v
	for r in $(seq "$BENCH_ROUNDS"); do
		for name in "$@"; do
			v=$(eval "${ARM_CMD[$name]}")
			record "$name" "$v"
			printf '   round %d  %-24s %12s\n' "$r" "$name" "$v"
		done
	done
}

# stats NAME: "median min max n" of a series
stats() {
	sort -g "$BENCH_WORK/vals.$1" | awk '
		{ v[NR] = $1 }
		END {
			if (NR == 0) exit 1
			m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
			printf "%.10g %.10g %.10g %d\n", m, v[1], v[NR], NR
		}'
}

# csv_field TEXT: TEXT quoted for CSV
csv_field() { local s=${1//\"/\"\"}; printf '"%s"' "$s"; }

# result ID MEASUREMENT UNIT BASE_LABEL BASE_SERIES DEDUP_LABEL DEDUP_SERIES [NOTE]:
# one row of the report: both series' median and min-max and the ratio of the
# medians, DEDUP / BASE
result() {
	local id=$1 what=$2 unit=$3 bl=$4 bs=$5 dl=$6 ds=$7 note=${8:-}
	local b d ratio
	read -r -a b <<<"$(stats "$bs")"
	read -r -a d <<<"$(stats "$ds")"
	ratio=$(awk -v x="${d[0]}" -v y="${b[0]}" 'BEGIN { if (y == 0) print ""; else printf "%.3f", x / y }')
	{
		csv_field "$id"; printf ','; csv_field "$what"; printf ','; csv_field "$unit"; printf ','
		csv_field "$bl"; printf ',%s,%s,%s,%s,' "${b[@]}"
		csv_field "$dl"; printf ',%s,%s,%s,%s,' "${d[@]}"
		printf '%s,' "$ratio"; csv_field "$note"; echo
	} >>"$BENCH_OUT/results.csv"
}

# figure ID MEASUREMENT UNIT LABEL SERIES FIGURE [NOTE]: a row of one series
# (median and min-max) and a FIGURE computed from it, printed in the ratio
# column (the note says what it is), for what has no baseline to divide by
figure() {
	local id=$1 what=$2 unit=$3 l=$4 s=$5 fig=$6 note=${7:-}
	local d
	read -r -a d <<<"$(stats "$s")"
	{
		csv_field "$id"; printf ','; csv_field "$what"; printf ','; csv_field "$unit"; printf ',,,,,,'
		csv_field "$l"; printf ',%s,%s,%s,%s,' "${d[@]}"
		printf '%s,' "$fig"; csv_field "$note"; echo
	} >>"$BENCH_OUT/results.csv"
}

# skip ID MEASUREMENT NOTE: a row that could not be measured, and why
skip() {
	{
		csv_field "$1"; printf ','; csv_field "$2"; printf ',,,,,,,,,,,,,'; csv_field "$3"; echo
	} >>"$BENCH_OUT/results.csv"
	echo "   skipped: $3"
}

results_header() {
	echo 'id,measurement,unit,baseline,baseline_median,baseline_min,baseline_max,baseline_n,dedup,dedup_median,dedup_min,dedup_max,dedup_n,ratio,note' \
		>"$BENCH_OUT/results.csv"
	echo 'series,round,value' >"$BENCH_OUT/raw.csv"
}

section() { printf '\n== %s\n' "$*"; }
