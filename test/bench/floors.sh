# test/bench/floors.sh: how far a leaner claim could go (sourced by
# test/bench/run.sh): row 13.
#
# Owns: (13) new keys written as plain SQL into the leaner layouts issue 17
# asked about, in alternating rounds with dedup and with the table a user
# writes by hand (the seeds' shape: primary key (consumer_name, message_id)
# of text, an index on processed_at; the baseline of the "leaner claim"
# target):
#   text key   the same table without the processed_at index
#   digest     a uuid primary key, md5 of consumer and id (computed in SQL,
#              so a little dearer than a digest computed in C), the text
#              columns kept beside it, no other index
#   heap       the same table with no index at all
#   xact       a transaction that stores nothing: an xid and its commit
# The last two are what PostgreSQL's write path costs without any unique
# check: no claim that keeps a durable, transactional record in a heap can
# cost less.  13a-13e single keys, 13f-13j batches of 100 keys, 13k-13m
# batches against Redis SET NX pipelined (row 5's comparison; skipped
# without Redis), 13n-13r WAL bytes per key (one client; no noise changes
# them).  The tables are dropped at the end.

FLOOR_LAYOUTS=(seeds text_key digest heap)

# floor_tables: the layouts' tables (floor_tables.sql, which
# instructions.sh uses too), empty
floor_tables() { psql_q -f "$BENCH_DIR/floor_tables.sql"; }

# floor_insert LAYOUT KEYS: the INSERT of LAYOUT for the message ids of the
# SQL set expression KEYS (column k); instructions.sh sources this file for it
floor_insert() {
	local cols="consumer_name, message_id" vals="'bench', k" conflict=" ON CONFLICT DO NOTHING"
	case $1 in
	digest)
		cols="key, $cols"
		vals="md5('bench/' || k)::uuid, $vals"
		;;
	heap) conflict= ;;
	esac
	echo "INSERT INTO floor_$1 ($cols) SELECT $vals FROM $2$conflict"
}

# floor_scripts: the pgbench scripts of every layout, single keys
# (floor_LAYOUT.sql: keys random like claim_insert.sql) and batches of 100
# (floor_LAYOUT_many.sql: built like claim_many.sql), in BENCH_WORK
floor_scripts() {
	local layout one='(VALUES (:id::text)) v (k)'
	local many='unnest(ARRAY(SELECT (random() * 1000000000)::bigint::text FROM generate_series(1, 100))::text[]) k'
	for layout in "${FLOOR_LAYOUTS[@]}"; do
		printf '\\set id random(1, 1000000000)\n%s;\n' "$(floor_insert "$layout" "$one")" \
			>"$BENCH_WORK/floor_$layout.sql"
		printf '%s;\n' "$(floor_insert "$layout" "$many")" >"$BENCH_WORK/floor_${layout}_many.sql"
	done
	printf '\\set id random(1, 1000000000)\nSELECT pg_current_xact_id(), :id::text;\n' \
		>"$BENCH_WORK/floor_xact.sql"
	printf 'SELECT pg_current_xact_id(), %s;\n' \
		"ARRAY(SELECT (random() * 1000000000)::bigint::text FROM generate_series(1, 100))" \
		>"$BENCH_WORK/floor_xact_many.sql"
}

# wal_per_key SCRIPT KEYS_PER_TX: WAL bytes per key of SCRIPT (a path under
# BENCH_DIR or BENCH_WORK), one client, BENCH_SMOKE_TX or 2000 transactions;
# run with full_page_writes off, so that the records of each
# layout are compared, not when a checkpoint happened to come
wal_per_key() {
	local n=2000 before after
	[ "$BENCH_SMOKE" = 0 ] || n=$BENCH_SMOKE_TX
	before=$(psql_v "SELECT pg_current_wal_insert_lsn()")
	pgbench -n -M prepared -t "$n" -c 1 -f "$1" >/dev/null 2>&1 ||
		{ echo "pgbench -f $1 failed" >&2; return 1; }
	after=$(psql_v "SELECT pg_current_wal_insert_lsn()")
	psql_v "SELECT round(pg_wal_lsn_diff('$after', '$before') / ($n * $2))"
}

bench_floors() {
	section "13. leaner layouts and PostgreSQL's floors: plain SQL into the seeds' table, one key index, a digest key, no index, an empty write transaction"
	floor_tables
	floor_scripts
	local layout w=$BENCH_WORK
	for layout in "${FLOOR_LAYOUTS[@]}" xact; do
		arm "floor_$layout" pg_rate "$w/floor_$layout.sql"
		arm "floor_${layout}_many" keys_rate "$w/floor_${layout}_many.sql"
	done
	arm floor_claim pg_rate claim_insert.sql
	rounds floor_seeds floor_claim floor_text_key floor_digest floor_heap floor_xact
	local seeds="INSERT into the seeds' table"
	result 13a "single new key: dedup_claim (target: 1.3)" tps "$seeds" floor_seeds dedup_claim floor_claim
	result 13b "single new key: one text key, no time index" tps "$seeds" floor_seeds "INSERT, text key" floor_text_key
	result 13c "single new key: one uuid digest key, no time index" tps "$seeds" floor_seeds "INSERT, digest key" floor_digest
	result 13d "single new key: a table without index" tps "$seeds" floor_seeds "INSERT, no index" floor_heap
	result 13e "an empty write transaction (xid + commit)" tps "$seeds" floor_seeds "xid + commit" floor_xact

	local batch=(floor_seeds_many floor_text_key_many floor_digest_many floor_heap_many floor_xact_many)
	if have_claim_many; then
		arm floor_claim_many keys_rate claim_many.sql
		batch+=(floor_claim_many)
	fi
	local redis=
	if redis_available; then
		redis_start $((BENCH_REDIS_PORT + 2)) --appendonly no
		redis=$REDIS_PORT
		arm floor_redis redis_rate "$redis" "$(redis_requests "$redis")"
		batch+=(floor_redis)
	fi
	rounds "${batch[@]}"
	seeds="INSERT unnest into the seeds' table"
	if have_claim_many; then
		result 13f "batch of 100: dedup_claim_many" keys/s "$seeds" floor_seeds_many dedup_claim_many floor_claim_many
	else
		skip 13f "batch of 100: dedup_claim_many" "not available: dedup_claim_many(text, text[]) does not exist in this build"
	fi
	result 13g "batch of 100: one text key" keys/s "$seeds" floor_seeds_many "text key" floor_text_key_many
	result 13h "batch of 100: one uuid digest key" keys/s "$seeds" floor_seeds_many "digest key" floor_digest_many
	result 13i "batch of 100: a table without index" keys/s "$seeds" floor_seeds_many "no index" floor_heap_many
	result 13j "batch of 100: an empty write transaction" "keys/s" "$seeds" floor_seeds_many "xid + commit" floor_xact_many \
		"100 keys built, none stored"
	if [ -n "$redis" ] && have_claim_many; then
		result 13k "batch of 100: dedup_claim_many vs Redis (target: 1.0)" "ops/s | keys/s" \
			"Redis SET NX, none" floor_redis dedup_claim_many floor_claim_many
	fi
	if [ -n "$redis" ]; then
		result 13l "batch of 100: one text key vs Redis" "ops/s | keys/s" \
			"Redis SET NX, none" floor_redis "text key" floor_text_key_many
		result 13m "batch of 100: a table without index vs Redis" "ops/s | keys/s" \
			"Redis SET NX, none" floor_redis "no index" floor_heap_many
	else
		skip 13k "batches vs Redis" "not available: redis-server/redis-benchmark are not installed (run as root to install them)"
	fi

	server_conf full_page_writes=off
	for layout in "${FLOOR_LAYOUTS[@]}"; do
		record "wal_$layout" "$(wal_per_key "$w/floor_$layout.sql" 1)"
	done
	record wal_claim "$(wal_per_key "$BENCH_DIR/claim_insert.sql" 1)"
	record wal_claim_many "$(wal_per_key "$BENCH_DIR/claim_many.sql" 100)"
	record wal_seeds_many "$(wal_per_key "$w/floor_seeds_many.sql" 100)"
	server_conf full_page_writes
	seeds="the seeds' table"
	result 13n "WAL bytes per single new key: dedup_claim" bytes "$seeds" wal_seeds dedup_claim wal_claim
	result 13o "WAL bytes per single new key: one text key" bytes "$seeds" wal_seeds "text key" wal_text_key
	result 13p "WAL bytes per single new key: one uuid digest key" bytes "$seeds" wal_seeds "digest key" wal_digest
	result 13q "WAL bytes per single new key: a table without index" bytes "$seeds" wal_seeds "no index" wal_heap
	result 13r "WAL bytes per key, batches of 100: dedup_claim_many" bytes "$seeds" wal_seeds_many \
		dedup_claim_many wal_claim_many
	psql_q -c "DROP TABLE floor_seeds, floor_text_key, floor_digest, floor_heap"
}
