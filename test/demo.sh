#!/usr/bin/env bash
# test/demo.sh: set everything up on a fresh Debian 12 machine and show dedup
# doing its job on a throwaway cluster, which is removed afterwards: a few
# claims by hand (test/demo.sql), then a private RabbitMQ node with consumers
# that crash and a chain of two services through dedup's outbox and
# dedup_relay (test/demo_broker.pl), ending with a summary line of each.
#
#   sudo test/demo.sh
#
# As root, test/setup.sh runs first (DEDUP_SETUP=none skips it).  The cluster
# is Debian's pg_virtualenv (PostgreSQL PG_MAJOR, default 15) with dedup
# preloaded; the demo connects to it with the PG* variables pg_virtualenv sets.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[ "$(id -u)" -ne 0 ] || "$top/test/setup.sh"
pg_virtualenv -t -v "${PG_MAJOR:-15}" -o shared_preload_libraries=dedup \
	sh -c 'psql -X -q -v ON_ERROR_STOP=1 -e -f "$1/test/demo.sql" && perl "$1/test/demo_broker.pl"' - "$top"
