# test/bench/redis.sh: a private Redis for the comparison rows (sourced by
# test/bench/run.sh).
#
# Owns: installing Debian's redis-server/redis-tools when missing (as root,
# idempotently, without letting the package start or enable its service),
# starting redis-server processes of our own on loopback ports with a
# temporary directory (as "postgres" when root), stopping them (redis_stop_all,
# called from run.sh's EXIT trap), and one redis-benchmark measurement.
#
# Never touches a Redis service of the system: the servers it starts are
# plain processes, found again by their PIDs only.

REDIS_PIDS=()
REDIS_DIRS=()

# redis_available: true when redis-server and redis-benchmark can be used,
# installing them first when root and they are missing
redis_available() {
	if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null; then
		[ "$(id -u)" -eq 0 ] || return 1
		echo "== installing redis-server redis-tools (its service is neither started nor enabled)"
		local policy=
		if [ ! -e /usr/sbin/policy-rc.d ]; then
			# keep the package's maintainer scripts from starting the service
			policy=/usr/sbin/policy-rc.d
			printf '#!/bin/sh\nexit 101\n' >"$policy"
			chmod +x "$policy"
		fi
		# no "apt-get update" unless the package is unknown
		apt-cache show redis-server >/dev/null 2>&1 || apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools >/dev/null || {
			[ -z "$policy" ] || rm -f "$policy"
			return 1
		}
		[ -z "$policy" ] || rm -f "$policy"
		# the package enables its unit: we never want it enabled
		if command -v systemctl >/dev/null; then
			systemctl disable --now redis-server.service >/dev/null 2>&1 || true
		fi
		if command -v update-rc.d >/dev/null && [ -e /etc/init.d/redis-server ]; then
			update-rc.d redis-server disable >/dev/null 2>&1 || true
		fi
	fi
	command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null
}

# redis_start PORT [CONFIG-ARG...]: a redis-server of our own on 127.0.0.1,
# with an empty temporary directory; waits until it answers.  The port is
# PORT, or when another process has it (next to the benchmark, the host's
# TAP tests listen on random ports), the next free one above: REDIS_PORT
# says which
redis_start() {
	local port=$1 dir pid i attempt
	shift
	local run=()
	[ "$(id -u)" -ne 0 ] ||
		run=(setpriv --reuid=postgres --regid=postgres --init-groups --)	# execs, unlike runuser
	for attempt in $(seq 20); do
		dir=$(mktemp -d /tmp/dedup-bench-redis.XXXXXX)
		REDIS_DIRS+=("$dir")
		[ "$(id -u)" -ne 0 ] || chown postgres: "$dir"
		"${run[@]}" redis-server --bind 127.0.0.1 --port "$port" --dir "$dir" \
			--daemonize no --save '' --logfile "$dir/redis.log" "$@" &
		pid=$!
		for i in $(seq 100); do
			# its own log, not a ping: a ping could reach whoever has the port
			if grep -q 'Ready to accept connections' "$dir/redis.log" 2>/dev/null &&
				timeout 5 redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null | grep -q PONG; then
				REDIS_PIDS+=("$pid")
				REDIS_PORT=$port
				return 0
			fi
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		grep -q 'Address already in use' "$dir/redis.log" 2>/dev/null || break
		wait "$pid" 2>/dev/null || true
		port=$((port + 2))
	done
	kill "$pid" 2>/dev/null || true
	echo "redis-server on port $port did not start:" >&2
	cat "$dir/redis.log" >&2 || true
	return 1
}

# redis_stop_all: stop the servers redis_start started (by PID), remove their directories
redis_stop_all() {
	local pid
	for pid in "${REDIS_PIDS[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${REDIS_PIDS[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	REDIS_PIDS=()
	[ ${#REDIS_DIRS[@]} -eq 0 ] || rm -rf "${REDIS_DIRS[@]}"
	REDIS_DIRS=()
}

# redis_rate PORT REQUESTS: one redis-benchmark run of SET key v NX EX 604800
# with random keys, pipelined $BENCH_REDIS_PIPELINE deep over $BENCH_CLIENTS
# connections; prints the requests per second
redis_rate() {
	redis-benchmark -h 127.0.0.1 -p "$1" -c "$BENCH_CLIENTS" -P "$BENCH_REDIS_PIPELINE" \
		-r 1000000000 -n "$2" --csv \
		SET 'key:__rand_int__' v NX EX 604800 2>/dev/null |
		awk -F'"' 'NR > 1 && $4 != "" { printf "%.0f\n", $4 }' | tail -n 1
}

# redis_requests PORT: how many requests make one run of about BENCH_SECONDS
# (from a short calibration run), or a few thousand in smoke mode
redis_requests() {
	if [ "$BENCH_SMOKE" = 1 ]; then
		echo 20000
		return
	fi
	local r
	r=$(redis_rate "$1" 100000)
	[ -n "$r" ] || return 1
	echo $((r * BENCH_SECONDS))
}

# bench_redis: row 5, SET key v NX EX 604800 on Redis without persistence and
# with appendonly/everysec, alternating with dedup_claim and dedup_claim_many
# (synchronous_commit off, the cluster's setting: like appendfsync everysec,
# a crash may lose the last moment of acknowledged claims, never corrupt them)
bench_redis() {
	section "5. Redis SET NX EX, pipelined $BENCH_REDIS_PIPELINE deep, $BENCH_CLIENTS connections (pgbench: $BENCH_CLIENTS connections, one statement in flight each)"
	if ! redis_available; then
		skip 5 "Redis SET NX EX" "not available: redis-server/redis-benchmark are not installed (run as root to install them)"
		return 0
	fi
	local p1 p2 n1 n2
	redis_start "$BENCH_REDIS_PORT" --appendonly no
	p1=$REDIS_PORT
	redis_start $((p1 + 1)) --appendonly yes --appendfsync everysec
	p2=$REDIS_PORT
	n1=$(redis_requests "$p1")
	n2=$(redis_requests "$p2")
	arm redis_none redis_rate "$p1" "$n1"
	arm redis_aof redis_rate "$p2" "$n2"
	arm claim_vs_redis pg_rate claim_insert.sql
	local order=(claim_vs_redis redis_none)
	if have_claim_many; then
		arm claim_many_vs_redis keys_rate claim_many.sql
		order+=(claim_many_vs_redis)
	fi
	order+=(redis_aof)
	rounds "${order[@]}"
	result 5a "Redis (no persistence) vs single dedup_claim" "ops/s | tps" \
		"Redis SET NX, none" redis_none dedup_claim claim_vs_redis
	result 5b "Redis (AOF everysec) vs single dedup_claim" "ops/s | tps" \
		"Redis SET NX, AOF" redis_aof dedup_claim claim_vs_redis
	if have_claim_many; then
		result 5c "Redis (no persistence) vs dedup_claim_many" "ops/s | keys/s" \
			"Redis SET NX, none" redis_none dedup_claim_many claim_many_vs_redis
		result 5d "Redis (AOF everysec) vs dedup_claim_many" "ops/s | keys/s" \
			"Redis SET NX, AOF" redis_aof dedup_claim_many claim_many_vs_redis
	else
		skip 5c "Redis vs dedup_claim_many" "not available: dedup_claim_many(text, text[]) does not exist in this build"
	fi
	redis_stop_all
}
