# test/bench/floors.sh: how far a leaner claim could go (sourced by
# test/bench/run.sh): row 13.
#
# Owns: (13) new keys written as plain SQL into the leaner layouts issue 17
# asked about, in alternating rounds with dedup and with the table a user
# writes by hand (the seeds' shape: primary key (consumer_name, message_id)
# of text, an index on processed_at; the baseline of the "leaner claim"
# target):
#   text key   the same table without the processed_at index
#   C key      the same, its text columns in collation "C" (the database's
#              default collation otherwise)
#   digest     a uuid primary key, md5 of consumer and id (computed in SQL,
#              so a little dearer than a digest computed in C), the text
#              columns kept beside it, no other index
#   heap       the same table with no index at all
#   xact       a transaction that stores nothing: an xid and its commit
# The last two are what PostgreSQL's write path costs without any unique
# check: no claim that keeps a durable, transactional record in a heap can
# cost less.  Rows "13s LAYOUT": single keys; "13b LAYOUT": batches of 100
# keys; "13r LAYOUT": the batches against Redis SET NX pipelined (row 5's
# comparison; skipped without Redis); "13w LAYOUT": WAL bytes per key (one
# client; no noise changes them).  The tables are dropped at the end.

FLOOR_LAYOUTS=(seeds text_key c_key digest heap)

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
	local layout rand='\set id random(1, 1000000000)'
	local keys100='ARRAY(SELECT (random() * 1000000000)::bigint::text FROM generate_series(1, 100))'
	for layout in "${FLOOR_LAYOUTS[@]}"; do
		printf '%s\n%s;\n' "$rand" "$(floor_insert "$layout" '(VALUES (:id::text)) v (k)')" \
			>"$BENCH_WORK/floor_$layout.sql"
		printf '%s;\n' "$(floor_insert "$layout" "unnest($keys100::text[]) k")" \
			>"$BENCH_WORK/floor_${layout}_many.sql"
	done
	printf '%s\nSELECT pg_current_xact_id(), :id::text;\n' "$rand" >"$BENCH_WORK/floor_xact.sql"
	printf 'SELECT pg_current_xact_id(), %s;\n' "$keys100" >"$BENCH_WORK/floor_xact_many.sql"
}

# wal_per_key SCRIPT KEYS_PER_TX: WAL bytes per key of SCRIPT (a path under
# BENCH_DIR or BENCH_WORK), one client, BENCH_SMOKE_TX or 2000 transactions;
# bench_floors calls it with full_page_writes off, so that the records of
# each layout are compared, not when a checkpoint happened to come
wal_per_key() {
	local n=2000 before after
	[ "$BENCH_SMOKE" = 0 ] || n=$BENCH_SMOKE_TX
	before=$(psql_v "SELECT pg_current_wal_insert_lsn()")
	pgbench -n -M prepared -t "$n" -c 1 -f "$1" >/dev/null 2>&1 ||
		{ echo "pgbench -f $1 failed" >&2; return 1; }
	after=$(psql_v "SELECT pg_current_wal_insert_lsn()")
	psql_v "SELECT round(pg_wal_lsn_diff('$after', '$before') / ($n * $2))"
}

# floor_label LAYOUT: what a layout (or claim, xact) is, in the report
floor_label() {
	case $1 in
	claim) echo "dedup" ;;
	text_key) echo "one text key, no time index" ;;
	c_key) echo "one text key in collation C, no time index" ;;
	digest) echo "one uuid digest key, no time index" ;;
	heap) echo "a table without index" ;;
	xact) echo "a write transaction storing nothing" ;;
	esac
}

bench_floors() {
	section "13. leaner layouts and PostgreSQL's floors: plain SQL into the seeds' table, one key index (default collation, C), a digest key, no index, an empty write transaction"
	floor_tables
	floor_scripts
	local layout w=$BENCH_WORK single=() batch=()
	for layout in "${FLOOR_LAYOUTS[@]}" xact; do
		arm "floor_$layout" pg_rate "$w/floor_$layout.sql"
		arm "floor_${layout}_many" keys_rate "$w/floor_${layout}_many.sql"
		single+=("floor_$layout")
		batch+=("floor_${layout}_many")
	done
	arm floor_claim pg_rate claim_insert.sql
	single=(floor_seeds floor_claim "${single[@]:1}")
	if have_claim_many; then
		arm floor_claim_many keys_rate claim_many.sql
		batch=(floor_seeds_many floor_claim_many "${batch[@]:1}")
	fi
	local redis=
	if redis_available; then
		redis_start $((BENCH_REDIS_PORT + 2)) --appendonly no
		redis=$REDIS_PORT
		arm floor_redis redis_rate "$redis" "$(redis_requests "$redis")"
		batch+=(floor_redis)
	fi
	rounds "${single[@]}"
	rounds "${batch[@]}"
	# 13s: single keys, 13b: batches of 100 (the claim's target: 1.3 and,
	# against Redis, 1.0), 13r: batches against Redis
	for layout in "${single[@]:1}"; do
		layout=${layout#floor_}
		result "13s $layout" "single new key: $(floor_label "$layout")" tps \
			"INSERT into the seeds' table" floor_seeds "$layout" "floor_$layout" \
			"$([ "$layout" != claim ] || echo "target: 1.3")"
	done
	for layout in "${batch[@]:1}"; do
		layout=${layout#floor_}
		layout=${layout%_many}
		[ "$layout" != redis ] || continue
		result "13b $layout" "batch of 100: $(floor_label "$layout")" keys/s \
			"INSERT unnest into the seeds' table" floor_seeds_many "$layout" "floor_${layout}_many" \
			"$([ "$layout" != xact ] || echo "100 keys built, none stored")"
		[ -z "$redis" ] || [ "$layout" = xact ] ||
			result "13r $layout" "batch of 100 vs Redis: $(floor_label "$layout")" "ops/s | keys/s" \
				"Redis SET NX, none" floor_redis "$layout" "floor_${layout}_many" \
				"$([ "$layout" != claim ] || echo "target: 1.0")"
	done
	[ -n "$redis" ] ||
		skip 13r "batches vs Redis" "not available: redis-server/redis-benchmark are not installed (run as root to install them)"

	# 13w: WAL bytes per key, single keys and (claim_many) batches
	server_conf full_page_writes=off
	for layout in "${FLOOR_LAYOUTS[@]}"; do
		record "wal_$layout" "$(wal_per_key "$w/floor_$layout.sql" 1)"
	done
	record wal_claim "$(wal_per_key "$BENCH_DIR/claim_insert.sql" 1)"
	record wal_claim_many "$(wal_per_key "$BENCH_DIR/claim_many.sql" 100)"
	record wal_seeds_many "$(wal_per_key "$w/floor_seeds_many.sql" 100)"
	server_conf full_page_writes
	for layout in claim "${FLOOR_LAYOUTS[@]:1}"; do
		result "13w $layout" "WAL bytes per single new key: $(floor_label "$layout")" bytes \
			"the seeds' table" wal_seeds "$layout" "wal_$layout"
	done
	result "13w claim_many" "WAL bytes per key, batches of 100: dedup" bytes \
		"the seeds' table" wal_seeds_many claim_many wal_claim_many
	psql_q -c "DROP TABLE floor_seeds, floor_text_key, floor_c_key, floor_digest, floor_heap"
}
