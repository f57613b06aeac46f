# test/bench/sweep.sh: the retention rows of the benchmark (sourced by
# test/bench/run.sh, after claims.sh: row 8 compares with its claim rate).
#
# Owns: (8) sweep scaling: for each backlog size in BENCH_SWEEP_SIZES, rows/s
# of dedup_sweep(), of the worker (one sweep: dedup.sweep_max_duration = 0,
# woken with dedup_sweeper_wake(), timed by the dedup_sweeper view's
# last_sweep_start/last_sweep_end) and of one plain DELETE ... WHERE
# processed_at < cutoff on a copy of the same rows; largest/smallest ratios
# (linear = about 1) and sweep rate / single-claim rate; the worker also with
# dedup.sweep_busy_share = 100 (never yielding, as before 1.2: on an idle
# server the two should not differ).  The worker's sweeps of row 8 do not
# VACUUM (dedup.sweep_vacuum_threshold = 0), as neither the function nor the
# DELETE does; (8V) the largest backlog once more at the default threshold:
# the seconds until the sweep is over, its VACUUM included, next to the
# seconds of its deletes.  (9) single-claim TPS while the worker
# sweeps a freshly loaded backlog at the default settings (yielding to the
# claims), (9b) paced (dedup.sweep_batch_delay), (9c) never yielding
# (dedup.sweep_busy_share = 100, the full speed of 1.1), vs on the same
# backlog without a sweep.  Row 8R needs row 1 (claims.sh); without row 8,
# row 9 loads BENCH_DURING_MAX rows unless BENCH_DURING_ROWS says otherwise.
#
# Every backlog is consumer 'old': rows 30 days old and one claim now, so
# with the default 7-day window all but that one are expired.  Each sweep
# starts from a freshly loaded, checkpointed backlog and is followed by a
# VACUUM (autovacuum is off in the benchmark cluster), neither timed.

# backlog TABLE ROWS: load an expired backlog into TABLE
backlog() {
	psql_q -c "INSERT INTO $1 (consumer_name, message_id, processed_at)
		SELECT 'old', g::text, now() - interval '30 days' + g * interval '1 ms'
		  FROM generate_series(1, $2) g" \
		-c "INSERT INTO $1 VALUES ('old', 'latest', now())
		    ON CONFLICT (consumer_name, message_id) DO UPDATE SET processed_at = now()" \
		-c "VACUUM ANALYZE $1" -c CHECKPOINT
}

# worker_wake: wake the sweeper; prints the server time just before, for worker_wait
worker_wake() {
	psql_v "SELECT now()"
	psql_q -c "SELECT dedup_sweeper_wake()" >/dev/null
}

# worker_on_request: the worker on, sweeping only when woken (a long
# interval), and a sweep that started after that over, so that none starts
# by itself while a backlog is loaded
worker_on_request() {
	local since
	server_conf dedup.sweep_interval=3600 dedup.sweep_max_duration=0 dedup.sweep_enabled=on
	since=$(worker_wake)
	worker_wait "$since" >/dev/null
}

# worker_wait SINCE [STATE]: wait until a sweep that started after SINCE is
# running (STATE = running) or over (default); prints "seconds rows outcome"
worker_wait() {
	local since=$1 want=${2:-over} line i
	for i in $(seq 6000); do
		line=$(psql_v "SELECT extract(epoch FROM last_sweep_end - last_sweep_start), last_sweep_rows, last_sweep_outcome
			FROM dedup_sweeper WHERE last_sweep_start >= '$since'::timestamptz")
		case "$want:${line##*|}" in
		running:running|running:vacuuming|running:done|running:partial|over:done|over:partial)
			echo "$line" | tr '|' ' '
			return 0 ;;
		*:failed)
			echo "sweep failed: $(psql_v 'SELECT last_error FROM dedup_sweeper')" >&2
			return 1 ;;
		esac
		sleep 0.1
	done
	echo "no sweep finished within 10 minutes" >&2
	return 1
}

# sweep_with_function ROWS / sweep_with_worker ROWS / sweep_with_delete ROWS:
# load a backlog of ROWS, clear it one way, print rows/s
sweep_with_function() {
	backlog processed_messages "$1"
	local ms
	ms=$(psql_ms "SELECT dedup_sweep()")
	check_swept processed_messages
	psql_q -c "VACUUM processed_messages"
	rate "$1 / ($ms / 1000)"
}
sweep_with_worker() {	# ROWS [SHARE]: with dedup.sweep_busy_share = SHARE
	backlog processed_messages "$1"
	local since s
	server_conf "dedup.sweep_busy_share${2:+=$2}"	# none: the default
	since=$(worker_wake)
	read -r -a s <<<"$(worker_wait "$since")"
	[ "${s[2]}" = done ] || { echo "worker sweep ended '${s[2]}'" >&2; return 1; }
	check_swept processed_messages
	psql_q -c "VACUUM processed_messages"
	rate "${s[1]} / ${s[0]}"
}
# sweep_and_vacuum ROWS: load a backlog of ROWS, let the worker sweep it
# with its VACUUM after (the default threshold, which stays for the rows
# after row 8); records the seconds of the whole sweep (sweep_vacuum_ROWS)
# and of a sweep without VACUUM from row 8's rate (sweep_deletes_ROWS)
sweep_and_vacuum() {
	backlog processed_messages "$1"
	local since s
	server_conf dedup.sweep_vacuum_threshold
	since=$(worker_wake)
	read -r -a s <<<"$(worker_wait "$since")"
	[ "${s[2]}" = done ] || { echo "worker sweep ended '${s[2]}'" >&2; return 1; }
	check_swept processed_messages
	record "sweep_vacuum_$1" "${s[0]}"
	record "sweep_deletes_$1" "$(calc "$1 / $(stats "sweep_worker_$1" | cut -d' ' -f1)")"
}
sweep_with_delete() {
	backlog sweep_copy "$1"
	local ms
	ms=$(psql_ms "DELETE FROM sweep_copy WHERE consumer_name = 'old' AND processed_at < now() - interval '7 days'")
	check_swept sweep_copy
	psql_q -c "TRUNCATE sweep_copy"
	rate "$1 / ($ms / 1000)"
}
check_swept() {
	local left
	left=$(psql_v "SELECT count(*) FROM $1 WHERE consumer_name = 'old'")
	[ "$left" = 1 ] || { echo "$1: $left 'old' rows left after the sweep, not 1" >&2; return 1; }
}

# during_claims ARM: claims (claim_insert.sql) on a table holding a fresh
# backlog of BENCH_DURING_ROWS expired rows (what earlier runs left is swept
# and vacuumed first, untimed), with the worker sweeping it -- ARM
# "default": at the default settings; "paced": dedup.sweep_batch_delay =
# BENCH_SWEEP_DELAY ms; "full": dedup.sweep_busy_share = 100 -- or not
# sweeping (ARM "none"); prints the TPS.
#
# The claims start first and the worker is woken under them, so that the
# sweep yields from its first batch, as it would to claims already running
# (woken first, it sweeps at full speed until the claims begin: on a loaded
# machine that was seconds, and its backlog was then half gone); the claims
# run BENCH_DURING_SECONDS + 1 s and their first second, the worker's
# start, is left out: the TPS is the mean of pgbench's progress reports
# after it (every arm alike).  The sweep's deadline is 2 s after the claims
# end, so that its VACUUM, which follows, never overlaps them.  A sweep
# that had deleted its whole backlog when the claims ended is noted (the
# measurement then includes time without a sweep).
during_claims() {
	local arm=$1 since="" tps s pb
	psql_q -c "SELECT dedup_sweep()" -c "VACUUM processed_messages" >/dev/null
	backlog processed_messages "$BENCH_DURING_ROWS"
	case $arm in
	none) ;;
	default) server_conf dedup.sweep_batch_delay dedup.sweep_busy_share ;;
	paced)
		server_conf dedup.sweep_busy_share dedup.sweep_batch_delay="$BENCH_SWEEP_DELAY" ;;
	full)
		server_conf dedup.sweep_batch_delay dedup.sweep_busy_share=100 ;;
	esac
	during_rate >"$BENCH_WORK/during.tps" & pb=$!
	[ "$arm" = none ] || since=$(worker_wake)
	wait "$pb" || return 1
	tps=$(cat "$BENCH_WORK/during.tps")
	if [ -n "$since" ]; then
		# rows deleted when the claims ended: the sweep, at full speed
		# after them, may well finish before its deadline
		s=$(psql_v "SELECT last_sweep_rows FROM dedup_sweeper WHERE last_sweep_start >= '$since'::timestamptz")
		[ "${s:-0}" -lt "$BENCH_DURING_ROWS" ] || echo "$arm" >>"$BENCH_WORK/during.ran_out"
		worker_wait "$since" >/dev/null
	fi
	echo "$tps"
}

# during_rate: BENCH_DURING_SECONDS + 1 s of claims; prints the mean TPS of
# pgbench's progress reports after the first second (smoke mode: its TPS)
during_rate() {
	local out tps
	if [ "$BENCH_SMOKE" = 1 ]; then
		BENCH_SECONDS=$BENCH_DURING_SECONDS pg_rate claim_insert.sql
		return
	fi
	if ! out=$(pgbench -n -M prepared -T $((BENCH_DURING_SECONDS + 1)) -P 1 \
		-c "$BENCH_CLIENTS" -j "$BENCH_CLIENTS" -f "$BENCH_DIR/claim_insert.sql" 2>&1); then
		echo "pgbench -f claim_insert.sql failed:" >&2
		echo "$out" | tail -n 5 >&2
		return 1
	fi
	tps=$(echo "$out" | awk '/^progress: / && $2 + 0 > 1.5 { sum += $4; n++ }
		END { if (n) printf "%.0f\n", sum / n }')
	if [ -z "$tps" ] || [ "$tps" = 0 ]; then
		echo "pgbench -f claim_insert.sql reported no progress after its first second:" >&2
		echo "$out" | tail -n 5 >&2
		return 1
	fi
	echo "$tps"
}

bench_sweep() {
	local sizes n first last
	IFS=, read -r -a sizes <<<"$BENCH_SWEEP_SIZES"
	first=${sizes[0]} last=${sizes[-1]}
	psql_q -c "CREATE TABLE sweep_copy (LIKE processed_messages INCLUDING ALL)"

	section "8. sweep scaling: backlogs of ${BENCH_SWEEP_SIZES} rows, $BENCH_SWEEP_ROUNDS round(s)"
	worker_on_request
	server_conf dedup.sweep_vacuum_threshold=0
	local rounds_saved=$BENCH_ROUNDS
	BENCH_ROUNDS=$BENCH_SWEEP_ROUNDS
	for n in "${sizes[@]}"; do
		arm "sweep_fn_$n" sweep_with_function "$n"
		arm "sweep_worker_$n" sweep_with_worker "$n"
		arm "sweep_worker_full_$n" sweep_with_worker "$n" 100
		arm "sweep_delete_$n" sweep_with_delete "$n"
		rounds "sweep_fn_$n" "sweep_worker_$n" "sweep_worker_full_$n" "sweep_delete_$n"
	done
	echo "   8V: the worker's sweep of $last rows followed by its VACUUM"
	sweep_and_vacuum "$last"
	server_conf dedup.sweep_busy_share dedup.sweep_vacuum_threshold
	BENCH_ROUNDS=$rounds_saved
	for n in "${sizes[@]}"; do
		result "8 $n" "sweep $n expired rows: dedup_sweep()" rows/s \
			"plain DELETE" "sweep_delete_$n" "dedup_sweep()" "sweep_fn_$n"
		result "8 $n" "sweep $n expired rows: worker" rows/s \
			"plain DELETE" "sweep_delete_$n" "worker" "sweep_worker_$n"
		result "8Y $n" "sweep $n expired rows, idle: worker at the defaults vs never yielding" rows/s \
			"dedup.sweep_busy_share = 100" "sweep_worker_full_$n" "worker, defaults" "sweep_worker_$n" \
			"idle server: about 1"
	done
	result 8V "worker sweep of $last rows: with its VACUUM (the default) vs its deletes alone" s \
		"deletes (row 8)" "sweep_deletes_$last" "deletes + VACUUM" "sweep_vacuum_$last" \
		"dedup.sweep_max_duration bounds the deletes, not the VACUUM"
	result 8L "linearity: dedup_sweep() rows/s, $last vs $first rows" rows/s \
		"at $first" "sweep_fn_$first" "at $last" "sweep_fn_$last" "linear = about 1"
	result 8L "linearity: worker rows/s, $last vs $first rows" rows/s \
		"at $first" "sweep_worker_$first" "at $last" "sweep_worker_$last" "linear = about 1"
	result 8L "linearity: plain DELETE rows/s, $last vs $first rows" rows/s \
		"at $first" "sweep_delete_$first" "at $last" "sweep_delete_$last" "for reference"
	if [ ! -e "$BENCH_WORK/vals.claim_insert" ]; then
		skip 8R "sweep rate / single-claim insert rate" "row 1 did not run (BENCH_ROWS)"
		psql_q -c "DROP TABLE sweep_copy"
		return
	fi
	result 8R "worker sweep rate ($last rows) / single-claim insert rate" "rows/s | tps" \
		"dedup_claim (row 1)" claim_insert "worker" "sweep_worker_$last" \
		"rows swept per second / claims inserted per second"
	result 8R "dedup_sweep() rate ($last rows) / single-claim insert rate" "rows/s | tps" \
		"dedup_claim (row 1)" claim_insert "dedup_sweep()" "sweep_fn_$last" \
		"rows swept per second / claims inserted per second"
	psql_q -c "DROP TABLE sweep_copy"
}

# ran_out ARM: the note of a row 9 arm whose sweeps ran out of rows
ran_out() {
	local n
	n=$(grep -cx "$1" "$BENCH_WORK/during.ran_out" || true)
	[ "$n" = 0 ] || echo "in $n run(s) the sweep ran out of rows before the claims ended"
}

bench_sweep_during() {
	local rate
	if [ -z "$BENCH_DURING_ROWS" ] && [ ! -e "$BENCH_WORK/vals.sweep_worker_${BENCH_SWEEP_SIZES##*,}" ]; then
		BENCH_DURING_ROWS=2000000	# row 8 did not run (BENCH_ROWS)
	elif [ -z "$BENCH_DURING_ROWS" ]; then
		# enough for a run at the rate the worker swept alone (row 8's
		# largest backlog), at most BENCH_DURING_MAX
		rate=$(stats "sweep_worker_${BENCH_SWEEP_SIZES##*,}" | cut -d' ' -f1)
		BENCH_DURING_ROWS=$(awk -v r="$rate" -v s="$BENCH_DURING_SECONDS" -v max="$BENCH_DURING_MAX" \
			'BEGIN { x = int(r * (s + 2)); x = (x > max ? max : x); print (x < 100000 ? 100000 : x) }')
	fi
	section "9. claims during a sweep: $BENCH_DURING_SECONDS s of claims, a backlog of $BENCH_DURING_ROWS rows per run"
	worker_on_request	# as row 8 does: row 9 may run alone
	server_conf dedup.sweep_max_duration=$((BENCH_DURING_SECONDS + 3))
	: >"$BENCH_WORK/during.ran_out"
	arm claims_no_sweep during_claims none
	arm claims_sweeping during_claims default
	arm claims_sweeping_paced during_claims paced
	arm claims_sweeping_full during_claims full
	rounds claims_no_sweep claims_sweeping claims_sweeping_paced claims_sweeping_full
	result 9 "single claim, new keys, during a worker sweep at the default settings" tps \
		"no sweep" claims_no_sweep "worker sweeping" claims_sweeping "$(ran_out default)"
	result 9b "the same, dedup.sweep_batch_delay = ${BENCH_SWEEP_DELAY}ms" tps \
		"no sweep" claims_no_sweep "worker sweeping, paced" claims_sweeping_paced "$(ran_out paced)"
	result 9c "the same, dedup.sweep_busy_share = 100 (never yielding)" tps \
		"no sweep" claims_no_sweep "worker sweeping, full speed" claims_sweeping_full "$(ran_out full)"
	server_conf dedup.sweep_batch_delay dedup.sweep_busy_share dedup.sweep_enabled=off dedup.sweep_max_duration=0
	psql_q -c "SELECT dedup_sweep()" -c "VACUUM processed_messages" >/dev/null
}
