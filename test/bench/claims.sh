# test/bench/claims.sh: the claim rows of the benchmark, each against the
# plain-SQL baseline on the same cluster (sourced by test/bench/run.sh).
#
# Owns: (1) single claims of new keys, (2) duplicates, (3) claim + UPDATE
# transactions, (4) batches of 100 keys (dedup_claim_many, in keys/s; skipped
# when the function does not exist), (6) the same single claims and batches
# with synchronous_commit on (the cluster runs with it off), (7) the claim
# counters (dedup.track_claims off and on).  Every pair runs in alternating
# rounds; the ratio is dedup / baseline.

# keys_rate SCRIPT [PGOPTIONS]: pg_rate of a 100-key batch script, in keys/s
keys_rate() { local t; t=$(pg_rate "$@"); echo $((t * 100)); }

# have_claim_many: whether dedup_claim_many(text, text[]) exists
have_claim_many() {
	[ "$(psql_v "SELECT to_regprocedure('dedup_claim_many(text,text[])') IS NOT NULL")" = t ]
}

bench_claims() {
	local sync_on='-c synchronous_commit=on'

	section "1. single claim, new keys (synchronous_commit off)"
	arm plain_insert pg_rate plain_insert.sql
	arm claim_insert pg_rate claim_insert.sql
	rounds plain_insert claim_insert
	result 1 "single claim, new keys (sync commit off)" tps \
		"INSERT ON CONFLICT" plain_insert dedup_claim claim_insert

	section "2. single claim, duplicates"
	arm plain_duplicate pg_rate plain_duplicate.sql
	arm claim_duplicate pg_rate claim_duplicate.sql
	rounds plain_duplicate claim_duplicate
	result 2 "single claim, duplicates" tps \
		"INSERT ON CONFLICT" plain_duplicate dedup_claim claim_duplicate

	section "3. claim + UPDATE transaction"
	arm plain_work pg_rate plain_work.sql
	arm claim_work pg_rate claim_work.sql
	rounds plain_work claim_work
	result 3 "claim + UPDATE transaction" tps \
		"INSERT..RETURNING+UPDATE" plain_work "dedup_claim+UPDATE" claim_work

	section "4. batch of 100 new keys (synchronous_commit off)"
	if have_claim_many; then
		arm plain_many keys_rate plain_many.sql
		arm claim_many keys_rate claim_many.sql
		rounds plain_many claim_many
		result 4 "batch of 100 keys (sync commit off)" keys/s \
			"INSERT unnest ON CONFLICT" plain_many dedup_claim_many claim_many
	else
		skip 4 "batch of 100 keys" "not available: dedup_claim_many(text, text[]) does not exist in this build"
	fi

	section "6. synchronous_commit on (ratios within the setting)"
	arm plain_insert_sync pg_rate plain_insert.sql "$sync_on"
	arm claim_insert_sync pg_rate claim_insert.sql "$sync_on"
	rounds plain_insert_sync claim_insert_sync
	result 6a "single claim, new keys (sync commit on)" tps \
		"INSERT ON CONFLICT" plain_insert_sync dedup_claim claim_insert_sync
	if have_claim_many; then
		arm plain_many_sync keys_rate plain_many.sql "$sync_on"
		arm claim_many_sync keys_rate claim_many.sql "$sync_on"
		rounds plain_many_sync claim_many_sync
		result 6b "batch of 100 keys (sync commit on)" keys/s \
			"INSERT unnest ON CONFLICT" plain_many_sync dedup_claim_many claim_many_sync
	else
		skip 6b "batch of 100 keys (sync commit on)" "not available: dedup_claim_many(text, text[]) does not exist in this build"
	fi

	section "7. claim counters: dedup.track_claims off vs on"
	arm counters_off pg_rate claim_insert.sql '-c dedup.track_claims=off'
	arm counters_on pg_rate claim_insert.sql
	rounds counters_off counters_on
	result 7 "claim counters cost (new keys)" tps \
		"track_claims off" counters_off "track_claims on" counters_on
}
