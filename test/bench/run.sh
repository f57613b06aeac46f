#!/usr/bin/env bash
# test/bench/run.sh: dedup_claim against the plain-SQL baseline, side by side.
#
#   sudo test/bench/run.sh [SECONDS_PER_RUN] [ROUNDS]
#
# Starts a throwaway cluster, then for each workload runs the baseline and
# the claim alternately (ROUNDS times each, SECONDS_PER_RUN each run, 2
# clients, prepared statements: the baseline is not re-planned at every
# call, as dedup_claim's saved plan is not) so that both see the same noise, and reports the median
# TPS of each and their ratio, and the cost of the claim counters (the same
# claims with dedup.track_claims off and on).  Absolute numbers on a shared machine mean
# little; the ratio is the figure to compare.  Then measures the sweep rate
# of the retention worker while claims are being inserted, in the same run.
set -euo pipefail

seconds=${1:-10}
rounds=${2:-3}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
if [ "$(id -u)" -eq 0 ]; then
	"$top/test/setup.sh"
fi
. "$top/test/cluster.sh"
cluster_start "synchronous_commit = off" "dedup.sweep_enabled = off" \
	"shared_buffers = 512MB"
as_pg psql -X -q -v ON_ERROR_STOP=1 -f "$here/setup.sql"

tps() {	# tps SCRIPT: one pgbench run, prints its TPS
	as_pg pgbench -n -M prepared -T "$seconds" -c 2 -j 2 -f "$here/$1" 2>/dev/null |
		awk '/^tps/ { printf "%.0f\n", $3 }'
}
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
calc() { awk "BEGIN { print $* }"; }

printf '%-12s %12s %12s %8s\n' workload "plain tps" "claim tps" ratio
for workload in insert duplicate work; do
	plain=() claim=()
	for _ in $(seq "$rounds"); do
		plain+=("$(tps "plain_$workload.sql")")
		claim+=("$(tps "claim_$workload.sql")")
	done
	p=$(printf '%s\n' "${plain[@]}" | median)
	c=$(printf '%s\n' "${claim[@]}" | median)
	printf '%-12s %12s %12s %8.2f\n' "$workload" "$p" "$c" "$(calc "$c / $p")"
done

# what the claim counters cost: the same claims, counted and not counted
off=() on=()
for _ in $(seq "$rounds"); do
	off+=("$(PGOPTIONS='-c dedup.track_claims=off' tps claim_insert.sql)")
	on+=("$(tps claim_insert.sql)")
done
o=$(printf '%s\n' "${off[@]}" | median)
n=$(printf '%s\n' "${on[@]}" | median)
printf '%-12s %12s %12s %8.2f   (counters off / on)\n' counters "$o" "$n" "$(calc "$n / $o")"

# sweep rate: the worker deletes expired rows while claims keep coming
rows=${SWEEP_ROWS:-500000}
as_pg psql -X -q -v ON_ERROR_STOP=1 <<SQL
INSERT INTO processed_messages (consumer_name, message_id, processed_at)
SELECT 'old', g::text, now() - interval '30 days' + g * interval '1 ms'
  FROM generate_series(1, $rows) g;
INSERT INTO processed_messages VALUES ('old', 'latest', now());
ALTER SYSTEM SET dedup.sweep_enabled = on;
ALTER SYSTEM SET dedup.sweep_max_duration = 0;
SELECT pg_reload_conf() \gset
SQL
before=$(as_pg psql -X -Atc "SELECT count(*) FROM processed_messages WHERE consumer_name = 'bench'")
start=$(date +%s.%N)
as_pg psql -X -q -c "SELECT dedup_sweeper_wake()" >/dev/null
as_pg pgbench -n -M prepared -T "$seconds" -c 2 -j 2 -f "$here/claim_insert.sql" >/dev/null 2>&1 &
bench=$!
until [ "$(as_pg psql -X -Atc "SELECT count(*) FROM processed_messages WHERE consumer_name = 'old'")" = 1 ]; do
	sleep 0.2
done
swept=$(date +%s.%N)
wait $bench
end=$(date +%s.%N)
after=$(as_pg psql -X -Atc "SELECT count(*) FROM processed_messages WHERE consumer_name = 'bench'")
sweep_rate=$(calc "$rows / ($swept - $start)")
claim_rate=$(calc "($after - $before) / ($end - $start)")
printf '\nsweep: %d expired rows in %.1f s = %.0f rows/s, while claims inserted %.0f rows/s (ratio %.1f)\n' \
	"$rows" "$(calc "$swept - $start")" "$sweep_rate" "$claim_rate" "$(calc "$sweep_rate / $claim_rate")"
