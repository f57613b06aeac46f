# test/bench/soak.sh: the steady-state row of the benchmark (sourced by
# test/bench/run.sh, after growth.sh, whose loading it reuses; it runs last:
# it turns autovacuum and the sweeper on, and leaves processed_messages empty).
#
# Owns: (12) a soak: BENCH_SOAK_SECONDS of single claims of new keys at full
# speed or at BENCH_SOAK_RATE per second (claim_insert.sql, BENCH_CLIENTS clients, consumer 'bench') with a
# short window (dedup_set_retention, BENCH_SOAK_WINDOW), the sweeper every
# BENCH_SOAK_INTERVAL seconds (dedup's other sweep settings at their
# defaults, the sweeper's own VACUUM included) and autovacuum at its
# defaults, as a busy production server would run, with BENCH_SOAK_SETTINGS
# (name=value ..., none by default) over those; every BENCH_SOAK_SAMPLE seconds a sample into $BENCH_OUT/soak.csv; then
# the bytes per row of as many rows freshly loaded into an empty, vacuumed
# table (growth.sh's growth_fill); the result rows, over the last half of the
# soak:
#   12a bytes per live row, soak / fresh load (the plateau ratio; target 2x)
#   12b dead tuples / live rows
#   12c the claim rate per sample interval: median, and its coefficient of
#       variation (stdev / mean) in the ratio column
# and the plot of the samples, soak_plot.py -> $BENCH_OUT/soak.png (skipped,
# with a message, without python3-matplotlib).  The server settings it
# changes are put back as they were at the end.
#
# Live rows are count(*), not pg_stat_user_tables.n_live_tup: n_live_tup is
# an estimate (inserts and deletes as backends report them, at most once a
# second, and what each VACUUM or ANALYZE makes of its sample), which jumps
# at every autovacuum run, and the plateau ratio divides by it.  count(*)
# scans the table, dead tuples included, once a sample: sample_ms in
# soak.csv, the whole sample's time (psql's connection included), bounds its
# cost; n_live_tup is kept beside it for comparison.

SOAK_COLUMNS=elapsed_s,live_rows,n_live_tup,dead_tuples,total_bytes,heap_bytes,index_bytes,bytes_per_live_row,claims,claim_rate,autovacuum_count,sample_ms,vacuum_count

# soak_sample START PREV: one line of soak.csv, START the soak's start and
# PREV the previous line (for the claim rate over the interval since)
soak_sample() {
	local start=$1 prev=$2 t0 t1 v
	t0=$(date +%s.%N)
	v=$(psql_v "SELECT (SELECT count(*) FROM processed_messages), s.n_live_tup, s.n_dead_tup,
			pg_total_relation_size(s.relid), pg_relation_size(s.relid), pg_indexes_size(s.relid),
			(SELECT coalesce(sum(c.claims + c.duplicates), 0) FROM dedup_claim_counters() c
			  WHERE c.consumer = 'bench'),
			s.autovacuum_count, s.vacuum_count
		  FROM pg_stat_user_tables s WHERE s.relid = 'processed_messages'::regclass")
	t1=$(date +%s.%N)
	awk -F'|' -v start="$start" -v t0="$t0" -v t1="$t1" -v prev="$prev" '{
		n = split(prev, p, ",")
		el = t0 - start
		rate = (n > 0 && el > p[1]) ? ($7 - p[9]) / (el - p[1]) : ""
		printf "%.1f,%d,%d,%d,%d,%d,%d,%s,%d,%s,%d,%.0f,%d\n", el, $1, $2, $3, $4, $5, $6,
			($1 > 0 ? sprintf("%.1f", $4 / $1) : ""), $7, (rate == "" ? "" : sprintf("%.0f", rate)),
			$8, (t1 - t0) * 1000, $9
	}' <<<"$v"
}

# soak_col NAME: the column number of NAME in soak.csv
soak_col() { tr , '\n' <<<"$SOAK_COLUMNS" | grep -nx "$1" | cut -d: -f1; }

# soak_series SERIES COLUMN FROM: record COLUMN of every sample at or after
# FROM seconds (and with a value) as SERIES
soak_series() {
	local v
	while read -r v; do
		record "$1" "$v"
	done < <(awk -F, -v c="$(soak_col "$2")" -v from="$3" \
		'NR > 1 && $1 >= from && $c != "" { print $c }' "$BENCH_OUT/soak.csv")
}

# soak_python: a python3 that has matplotlib (Debian's is /usr/bin/python3,
# which another python3 first in PATH may hide)
soak_python() {
	local p
	for p in python3 /usr/bin/python3; do
		if "$p" -c 'import matplotlib' 2>/dev/null; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

# soak_claims: the soak itself: pgbench in the background, sampled
soak_claims() {
	local start pid i n prev line every rc=0
	n=$(awk -v t="$BENCH_SOAK_SECONDS" -v s="$BENCH_SOAK_SAMPLE" 'BEGIN { n = int(t / s); print (n * s < t) ? n + 1 : n }')
	echo "$SOAK_COLUMNS" >"$BENCH_OUT/soak.csv"
	start=$(date +%s.%N)
	pgbench -n -M prepared -T "$BENCH_SOAK_SECONDS" -c "$BENCH_CLIENTS" -j "$BENCH_CLIENTS" \
		${BENCH_SOAK_RATE:+--rate="$BENCH_SOAK_RATE"} \
		-f "$BENCH_DIR/claim_insert.sql" >"$BENCH_WORK/soak.pgbench" 2>&1 &
	pid=$!
	# a sample at every multiple of BENCH_SOAK_SAMPLE before the end; a
	# progress line about every 30 s
	prev=
	every=$((30 / BENCH_SOAK_SAMPLE > 1 ? 30 / BENCH_SOAK_SAMPLE : 1))
	for ((i = 0; i < n; i++)); do
		sleep "$(awk -v s="$start" -v t="$((i * BENCH_SOAK_SAMPLE))" -v now="$(date +%s.%N)" \
			'BEGIN { d = s + t - now; print (d > 0 ? d : 0) }')"
		kill -0 "$pid" 2>/dev/null || break
		line=$(soak_sample "$start" "$prev")
		echo "$line" >>"$BENCH_OUT/soak.csv"
		prev=$line
		if [ $((i % every)) = 0 ]; then
			awk -F, '{ printf "   %5.0f s  %8d live rows  %8d dead  %6.1f MB  %6s bytes/row  %6s claims/s\n",
				$1, $2, $4, $5 / 1048576, $8, $10 }' <<<"$line"
		fi
	done
	wait "$pid" || rc=$?
	if [ "$rc" != 0 ]; then
		echo "pgbench (the soak) failed:" >&2
		tail -n 5 "$BENCH_WORK/soak.pgbench" >&2
		return 1
	fi
	[ "$(wc -l <"$BENCH_OUT/soak.csv")" -ge 3 ] || { echo "the soak took fewer than 2 samples" >&2; return 1; }
}

bench_soak() {
	local window=$BENCH_SOAK_WINDOW interval=$BENCH_SOAK_INTERVAL half saved live fresh tps
	local changed=(autovacuum dedup.sweep_enabled dedup.sweep_interval dedup.sweep_max_duration
		dedup.sweep_batch_delay dedup.sweep_batch_size dedup.sweep_vacuum_threshold)
	local extra=($BENCH_SOAK_SETTINGS) kv
	for kv in "${extra[@]}"; do
		changed+=("${kv%%=*}")
	done
	section "12. steady state: $BENCH_SOAK_SECONDS s of single claims, a ${window} s window, the sweeper every ${interval} s, autovacuum on${BENCH_SOAK_RATE:+, at most $BENCH_SOAK_RATE claims/s}${BENCH_SOAK_SETTINGS:+, $BENCH_SOAK_SETTINGS}"
	mapfile -t saved < <(server_settings "${changed[@]}")
	psql_q -c "TRUNCATE processed_messages, plain_messages" -c "VACUUM ANALYZE processed_messages" \
		-c "SELECT dedup_stats_reset('bench')" -c "SELECT dedup_set_retention('bench', '$window seconds')" \
		-c "SELECT pg_stat_reset_single_table_counters('processed_messages'::regclass)" >/dev/null
	server_conf autovacuum=on dedup.sweep_enabled=on dedup.sweep_interval="$interval" \
		dedup.sweep_max_duration dedup.sweep_batch_delay dedup.sweep_batch_size \
		dedup.sweep_vacuum_threshold "${extra[@]}"
	soak_claims
	server_conf "${saved[@]}"
	psql_q -c "SELECT dedup_reset_retention('bench')" >/dev/null
	tps=$(awk '/^tps/ { printf "%.0f\n", $3 }' "$BENCH_WORK/soak.pgbench")

	half=$(calc "$BENCH_SOAK_SECONDS / 2")
	soak_series soak_bytes_per_row bytes_per_live_row "$half"
	soak_series soak_live live_rows "$half"
	soak_series soak_dead dead_tuples "$half"
	soak_series soak_rate claim_rate "$half"

	# the reference: as many rows as the soak kept, loaded in one go
	live=$(stats soak_live | awk '{ printf "%.0f\n", $1 }')
	[ "$live" -gt 0 ] || { echo "the soak kept no rows: no steady state to compare" >&2; return 1; }
	echo "   the reference: $live rows freshly loaded"
	growth_keys "$live"
	growth_fill "$live" >/dev/null
	fresh=$(bytes_per_row processed_messages)
	record soak_fresh_bytes_per_row "$fresh"
	psql_q -c "DROP TABLE growth_keys" -c "TRUNCATE processed_messages, plain_messages" \
		-c "VACUUM ANALYZE processed_messages" -c "VACUUM ANALYZE plain_messages"

	local ratios cv vacuums
	vacuums=$(awk -F, -v a="$(soak_col autovacuum_count)" -v v="$(soak_col vacuum_count)" \
		'NR == 2 { a0 = $a; v0 = $v } NR > 1 { a1 = $a; v1 = $v }
		END { printf "%d by autovacuum, %d by the sweeper\n", a1 - a0, v1 - v0 }' "$BENCH_OUT/soak.csv")
	ratios=$(awk -F, -v from="$half" 'NR > 1 && $1 >= from && $2 > 0 { print $4 / $2 }' "$BENCH_OUT/soak.csv" |
		sort -g | awk '{ v[NR] = $1 } END { printf "%.2f\n", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
	cv=$(awk '{ s += $1; q += $1 * $1; n++ }
		END { m = s / n; v = q / n - m * m; printf "%.3f\n", (m > 0 ? sqrt(v > 0 ? v : 0) / m : 0) }' \
		"$BENCH_WORK/vals.soak_rate")
	result 12a "steady state: bytes per live row, soak (last half) / freshly loaded" bytes \
		"fresh load, $live rows" soak_fresh_bytes_per_row "soak" soak_bytes_per_row \
		"target: <= 2x; pg_total_relation_size / count(*)"
	result 12b "steady state: dead tuples / live rows (last half)" rows \
		"live rows" soak_live "dead tuples" soak_dead \
		"median of the samples' dead/live: $ratios; VACUUMs in the soak: $vacuums"
	figure 12c "steady state: claim rate per ${BENCH_SOAK_SAMPLE} s (last half), coefficient of variation" claims/s \
		"soak" soak_rate "$cv" "ratio column: stdev / mean; pgbench: $tps tps over the whole soak"

	local python
	if python=$(soak_python); then
		"$python" "$BENCH_DIR/soak_plot.py" "$BENCH_OUT/soak.csv" "$BENCH_OUT/soak.png" "$fresh" \
			"dedup soak: $BENCH_CLIENTS clients, ${window} s window, sweeper every ${interval} s, autovacuum on" "$half"
		echo "   plot: $BENCH_OUT/soak.png"
	else
		echo "   no plot: python3-matplotlib is not installed (test/setup.sh installs it on the host)"
	fi
}
