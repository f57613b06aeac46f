# test/bench/streams.sh: the ordered-stream rows of the benchmark (sourced by
# test/bench/run.sh).
#
# Owns: (11a) batches of 100 in-order records claimed by offset
# (dedup_claim_offsets, claim_offsets.sql) against dedup_claim_many of 100
# ids, in keys/s (target: 10 times); (11b) the same batches against Redis
# SET NX EX pipelined BENCH_REDIS_PIPELINE deep, without persistence
# (target: 5 times); (11c) the bytes of stream_positions (table and index)
# after its first claims and after BENCH_STREAM_CLAIMS more, with
# autovacuum off (run.sh's cluster): HOT updates keep it the same size.
# Each pgbench client claims in a partition of its own, so the offsets of
# each partition only grow.

bench_streams() {
	section "11. ordered streams: dedup_claim_offsets, batches of 100 in-order records"
	psql_q -c "CREATE SEQUENCE bench_offsets"
	arm offsets_vs_many keys_rate claim_offsets.sql
	arm many_vs_offsets keys_rate claim_many.sql
	local order=(many_vs_offsets offsets_vs_many) redis=
	if redis_available; then
		redis_start "$BENCH_REDIS_PORT" --appendonly no
		arm redis_vs_offsets redis_rate "$BENCH_REDIS_PORT" "$(redis_requests "$BENCH_REDIS_PORT")"
		order+=(redis_vs_offsets)
		redis=1
	fi
	rounds "${order[@]}"
	result 11a "batch of 100: by offset vs by message id" keys/s \
		dedup_claim_many many_vs_offsets dedup_claim_offsets offsets_vs_many "target: 10x"
	if [ -n "$redis" ]; then
		result 11b "batch of 100 by offset vs Redis (no persistence)" "ops/s | keys/s" \
			"Redis SET NX, none" redis_vs_offsets dedup_claim_offsets offsets_vs_many "target: 5x"
		redis_stop_all
	else
		skip 11b "Redis vs dedup_claim_offsets" "not available: redis-server/redis-benchmark are not installed (run as root to install them)"
	fi

	# storage: BENCH_STREAM_CLAIMS claims over BENCH_CLIENTS partitions
	local batches=$((BENCH_STREAM_CLAIMS / 100 / BENCH_CLIENTS))
	psql_q -c "TRUNCATE stream_positions"
	pgbench -n -M prepared -t 1 -c "$BENCH_CLIENTS" -j "$BENCH_CLIENTS" \
		-f "$BENCH_DIR/claim_offsets.sql" >/dev/null
	record stream_bytes_first "$(psql_v "SELECT pg_total_relation_size('stream_positions')")"
	echo "   $((batches * 100 * BENCH_CLIENTS)) claims by offset in $BENCH_CLIENTS partitions"
	pgbench -n -M prepared -t "$batches" -c "$BENCH_CLIENTS" -j "$BENCH_CLIENTS" \
		-f "$BENCH_DIR/claim_offsets.sql" >/dev/null
	record stream_bytes_after "$(psql_v "SELECT pg_total_relation_size('stream_positions')")"
	result 11c "bytes of stream_positions (table + index), $BENCH_CLIENTS partitions" bytes \
		"after 1 batch each" stream_bytes_first "after $((batches * 100 * BENCH_CLIENTS)) claims" stream_bytes_after \
		"target: 1x (constant)"
	psql_q -c "DROP SEQUENCE bench_offsets"
}
