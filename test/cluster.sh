# test/cluster.sh: start and stop a throwaway PostgreSQL cluster.  Sourced by
# test/demo.sh and test/bench/run.sh after test/setup.sh (test/run.sh needs no
# cluster: "make installcheck" starts its own instances).  The server listens
# only on a Unix socket in its own directory, so PGPORT (default 54329) cannot
# clash with another server.
#
# PostgreSQL refuses to run as root, so as root everything runs as the
# unprivileged user "postgres"; otherwise as the current user.

PG_MAJOR=${PG_MAJOR:-15}
PG_BIN=/usr/lib/postgresql/$PG_MAJOR/bin

# as_pg CMD...: run CMD as the cluster's owner, with the cluster's environment
as_pg() {
	if [ "$(id -u)" -eq 0 ]; then
		runuser -u postgres -- env PATH="$PG_BIN:$PATH" PGHOST="$PGHOST" PGPORT="$PGPORT" PGUSER="$PGUSER" PGDATABASE="$PGDATABASE" PGOPTIONS="${PGOPTIONS:-}" "$@"
	else
		env PATH="$PG_BIN:$PATH" "$@"
	fi
}

# cluster_start [SETTING...]: initdb and start a cluster in a new temporary
# directory, with dedup preloaded and the given postgresql.conf lines;
# exports PGHOST, PGPORT, PGUSER, PGDATABASE, CLUSTER_DIR
cluster_start() {
	CLUSTER_DIR=$(mktemp -d /tmp/dedup-cluster.XXXXXX)
	trap cluster_stop EXIT	# also on failure and interrupt
	[ "$(id -u)" -eq 0 ] && chown postgres: "$CLUSTER_DIR"
	export PGHOST=$CLUSTER_DIR PGPORT=${PGPORT:-54329} PGUSER=postgres PGDATABASE=postgres
	[ "$(id -u)" -eq 0 ] || PGUSER=$(id -un)
	as_pg initdb -D "$CLUSTER_DIR/data" -U "$PGUSER" --auth=trust --no-sync >"$CLUSTER_DIR/initdb.log"
	cat >>"$CLUSTER_DIR/data/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$CLUSTER_DIR'
port = $PGPORT
shared_preload_libraries = 'dedup'
fsync = off
max_prepared_transactions = 10
CONF
	printf '%s\n' "$@" >>"$CLUSTER_DIR/data/postgresql.conf"
	as_pg pg_ctl -D "$CLUSTER_DIR/data" -l "$CLUSTER_DIR/server.log" -w start >/dev/null
	echo "== throwaway cluster in $CLUSTER_DIR (port $PGPORT)"
}

cluster_stop() {
	[ -f "$CLUSTER_DIR/data/postmaster.pid" ] &&
		as_pg pg_ctl -D "$CLUSTER_DIR/data" -m fast -w stop >/dev/null 2>&1 || true
	rm -rf "$CLUSTER_DIR"
}
