#!/usr/bin/env bash
# test/setup.sh: install what dedup needs on Debian 12, then build and install it.
#
# Run as root (or with sudo).  Idempotent; PG_MAJOR (default 15) picks the
# PostgreSQL version.  Warnings are errors.
set -euo pipefail

PG_MAJOR=${PG_MAJOR:-15}
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
packages=(
	"postgresql-$PG_MAJOR" "postgresql-server-dev-$PG_MAJOR" postgresql-contrib
	build-essential libipc-run-perl python3-psycopg2 rsync
	prometheus-postgres-exporter prometheus rabbitmq-server python3-pika
	pgbouncer python3-psycopg
)

if [ "$(id -u)" -ne 0 ]; then
	echo "test/setup.sh: run me as root (sudo $0)" >&2
	exit 1
fi

missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "== installing ${missing[*]}"
	# keep Debian from creating and starting its own default cluster, and
	# its services from starting: tests start what they need themselves
	mkdir -p /etc/postgresql-common/createcluster.d
	echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.d/dedup-tests.conf
	policy=
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		policy=/usr/sbin/policy-rc.d
		printf '#!/bin/sh\nexit 101\n' > "$policy"
		chmod +x "$policy"
	fi
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
	[ -z "$policy" ] || rm -f "$policy"
fi

PG_CONFIG=/usr/lib/postgresql/$PG_MAJOR/bin/pg_config
echo "== building dedup against $($PG_CONFIG --version)"
make -C "$top" -s clean PG_CONFIG="$PG_CONFIG"
make -C "$top" -s PG_CONFIG="$PG_CONFIG" COPT=-Werror
make -C "$top" -s install PG_CONFIG="$PG_CONFIG"
