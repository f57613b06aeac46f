# test/bench/growth.sh: storage and table-size rows of the benchmark (sourced
# by test/bench/run.sh).
#
# Owns: (10) bytes per claim (pg_total_relation_size, table + indexes +
# TOAST, over the rows) of processed_messages and of the plain baseline
# table, and claim TPS with BENCH_GROWTH_SMALL rows stored vs with
# BENCH_GROWTH_LARGE rows stored (same keys in both tables, random like
# claim_insert.sql), alternating dedup_claim and the plain INSERT.  At the
# small size both tables are reset before every round, so the runs' own
# inserts do not grow them much; at the large size they add a few percent.

# growth_fill ROWS: both tables emptied and filled with the first ROWS keys
growth_fill() {
	psql_q -c "TRUNCATE processed_messages, plain_messages" \
		-c "INSERT INTO processed_messages (consumer_name, message_id)
			SELECT 'bench', k FROM growth_keys WHERE i <= $1" \
		-c "INSERT INTO plain_messages (consumer_name, message_id)
			SELECT 'bench', k FROM growth_keys WHERE i <= $1" \
		-c "VACUUM ANALYZE processed_messages" -c "VACUUM ANALYZE plain_messages" -c CHECKPOINT
}

# growth_keys ROWS: the table growth_keys: at least ROWS distinct random keys
# (like claim_insert.sql's), numbered, so that different sizes share their
# first keys
growth_keys() {
	psql_q -c "CREATE UNLOGGED TABLE growth_keys AS
		SELECT row_number() OVER () AS i, k
		  FROM (SELECT DISTINCT (random() * 1000000000)::bigint::text AS k
				  FROM generate_series(1, ($1 * 1.01 + 100)::bigint)) d" \
		-c "CREATE INDEX ON growth_keys (i)"
}

# bytes_per_row TABLE: pg_total_relation_size / rows
bytes_per_row() {
	psql_v "SELECT round(pg_total_relation_size('$1')::numeric / count(*), 1) FROM $1"
}

# growth_arm_small SCRIPT: the small size restored, then one run;
# growth_arm_large SCRIPT: one run.  Both start right after a checkpoint, so
# that both pay the full-page writes of the pages they touch first.
growth_arm_small() {
	growth_fill "$BENCH_GROWTH_SMALL" >/dev/null
	pg_rate "$1"
}
growth_arm_large() {
	psql_q -c CHECKPOINT
	pg_rate "$1"
}

bench_growth() {
	local small=$BENCH_GROWTH_SMALL large=$BENCH_GROWTH_LARGE
	section "10. bytes per claim and growth: $small vs $large rows stored"
	growth_keys "$large"

	growth_fill "$small"
	record bytes_plain_small "$(bytes_per_row plain_messages)"
	record bytes_dedup_small "$(bytes_per_row processed_messages)"
	arm growth_plain_small growth_arm_small plain_insert.sql
	arm growth_claim_small growth_arm_small claim_insert.sql
	rounds growth_plain_small growth_claim_small

	echo "   loading $large rows into both tables"
	growth_fill "$large"
	record bytes_plain_large "$(bytes_per_row plain_messages)"
	record bytes_dedup_large "$(bytes_per_row processed_messages)"
	arm growth_plain_large growth_arm_large plain_insert.sql
	arm growth_claim_large growth_arm_large claim_insert.sql
	rounds growth_plain_large growth_claim_large
	local stored
	stored=$(psql_v "SELECT count(*) FROM processed_messages")

	result 10a "bytes per claim, $small rows stored" bytes \
		"plain table" bytes_plain_small processed_messages bytes_dedup_small
	result 10a "bytes per claim, $large rows stored" bytes \
		"plain table" bytes_plain_large processed_messages bytes_dedup_large
	result 10b "dedup_claim tps, $large vs $small rows stored" tps \
		"at $small" growth_claim_small "at $large" growth_claim_large \
		"$stored rows stored after the large runs"
	result 10b "plain INSERT tps, $large vs $small rows stored" tps \
		"at $small" growth_plain_small "at $large" growth_plain_large "for reference"
	result 10c "single claim, new keys, $large rows stored" tps \
		"INSERT ON CONFLICT" growth_plain_large dedup_claim growth_claim_large
	psql_q -c "DROP TABLE growth_keys"
}
