#!/usr/bin/env bash
# test/bench/citus_colocated.sh: colocated claims on Citus against a plain
# routed INSERT ... ON CONFLICT, side by side in one run (dedup issue 15).
#
#   test/bench/citus_colocated.sh [SECONDS_PER_RUN [ROUNDS [CLIENTS]]]   (default 20 s, 3 rounds, 4 clients)
#
# Against the Citus coordinator that PGHOST, PGPORT, PGUSER and PGDATABASE
# name (a cluster with workers, 'citus,dedup' preloaded, dedup installed:
# doc/citus.md); exits 0 saying why when that server has no
# citus extension (CI has none).  Creates bench_loyalty (distributed by
# customer_id bigint, 1000 rows) and its records tables, then alternates
# (a) BEGIN; SELECT dedup_claim_routed(...); UPDATE bench_loyalty ...; COMMIT;
# (b) the same with INSERT INTO bench_plain ... ON CONFLICT DO NOTHING
#     RETURNING true instead of the claim,
# each with a new message id per transaction and a random customer, and
# reports the transactions per second of each round, the medians and their
# ratio.  Drops what it created at the end.
set -euo pipefail

secs=${1:-20}
rounds=${2:-3}
clients=${3:-4}
export PATH="$(dirname "$(command -v pg_config)"):$PATH"

if [ "$(psql -XAtqc "SELECT count(*) FROM pg_available_extensions WHERE name = 'citus' AND installed_version IS NOT NULL")" != 1 ]; then
	echo "test/bench/citus_colocated.sh: skipped: no citus extension installed in the database at ${PGHOST:-default}:${PGPORT:-5432}"
	exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"; psql -Xqc "DROP TABLE IF EXISTS bench_claims, bench_plain, bench_loyalty" >/dev/null 2>&1 || true' EXIT

psql -Xq -v ON_ERROR_STOP=1 <<'SQL'
DROP TABLE IF EXISTS bench_claims, bench_plain, bench_loyalty;
CREATE TABLE bench_loyalty (customer_id bigint PRIMARY KEY, points bigint NOT NULL);
SELECT create_distributed_table('bench_loyalty', 'customer_id');
INSERT INTO bench_loyalty SELECT i, 0 FROM generate_series(1, 1000) i;
SELECT dedup_create_colocated_records('bench_claims', 'bench_loyalty');
-- the baseline: the same table, not registered
CREATE TABLE bench_plain (route bigint, consumer text, message_id text,
	processed_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (route, consumer, message_id));
CREATE INDEX ON bench_plain (consumer, processed_at);
SELECT create_distributed_table('bench_plain', 'route', colocate_with => 'bench_loyalty');
SQL

cat >"$work/a.sql" <<'SQL'
\set c random(1, 1000)
BEGIN;
SELECT dedup_claim_routed('bench_claims', :c::text, 'bench', :client_id || '-' || txid_current());
UPDATE bench_loyalty SET points = points + 1 WHERE customer_id = :c;
COMMIT;
SQL
cat >"$work/b.sql" <<'SQL'
\set c random(1, 1000)
BEGIN;
INSERT INTO bench_plain (route, consumer, message_id) VALUES (:c, 'bench', :client_id || '-' || txid_current())
	ON CONFLICT DO NOTHING RETURNING true;
UPDATE bench_loyalty SET points = points + 1 WHERE customer_id = :c;
COMMIT;
SQL

tps() {
	pgbench -n -c "$clients" -j "$clients" -T "$secs" -f "$1" 2>/dev/null |
		sed -n 's/^tps = \([0-9.]*\) .*/\1/p'
}
a=() b=()
for r in $(seq "$rounds"); do
	a+=("$(tps "$work/a.sql")")
	b+=("$(tps "$work/b.sql")")
	echo "round $r: dedup_claim_routed ${a[-1]} tps, plain routed INSERT ... ON CONFLICT ${b[-1]} tps"
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
ma=$(median "${a[@]}")
mb=$(median "${b[@]}")
echo "medians: dedup_claim_routed $ma tps, plain $mb tps; ratio $(awk -v a="$ma" -v b="$mb" 'BEGIN {printf "%.3f", a/b}')"
