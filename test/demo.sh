#!/usr/bin/env bash
# test/demo.sh: set everything up on a fresh Debian 12 machine and show dedup
# doing its job on a throwaway cluster, which is removed afterwards: a few
# claims by hand, then a private RabbitMQ node with consumers that crash
# (test/demo_broker.pl), ending with a one-line summary.
#
#   sudo test/demo.sh
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ "$(id -u)" -eq 0 ]; then
	"$top/test/setup.sh"
fi
. "$top/test/cluster.sh"
cluster_start

as_pg psql -X -q -v ON_ERROR_STOP=1 -e <<'SQL'
CREATE EXTENSION dedup;
CREATE TABLE loyalty (customer_id text PRIMARY KEY, points int NOT NULL);
INSERT INTO loyalty VALUES ('CUS-291', 0);

-- first delivery of evt-91827: the claim returns true, the work is done
BEGIN;
SELECT dedup_claim('loyalty-service', 'evt-91827') AS first_delivery;
UPDATE loyalty SET points = points + 120 WHERE customer_id = 'CUS-291';
COMMIT;

-- the broker redelivers it: the claim returns false, the work is skipped
BEGIN;
SELECT dedup_claim('loyalty-service', 'evt-91827') AS redelivery;
COMMIT;

-- one statement: the update runs only for a first delivery
UPDATE loyalty SET points = points + 120
 WHERE customer_id = 'CUS-291' AND dedup_claim('loyalty-service', 'evt-91827');

SELECT * FROM loyalty;
SELECT * FROM processed_messages;

-- what dedup counted
SELECT consumer, claims, duplicates, lock_waits, retention FROM dedup_stats;

-- retention: with a one-hour window, records more than an hour older than
-- the consumer's latest claim are swept by the background worker
SELECT dedup_set_retention('loyalty-service', '1 hour');
INSERT INTO processed_messages
SELECT 'loyalty-service', 'evt-old-' || g, now() - interval '2 hours' - g * interval '1 minute'
  FROM generate_series(1, 5) g;
SELECT dedup_sweeper_wake() AS sweeper_woken;
DO $$
BEGIN
	FOR i IN 1 .. 100 LOOP
		EXIT WHEN (SELECT total_rows_deleted >= 5 FROM dedup_sweeper);
		PERFORM pg_sleep(0.1);
	END LOOP;
END $$;
SELECT database_state, last_sweep_outcome, total_rows_deleted FROM dedup_sweeper;
SELECT message_id FROM processed_messages;
SQL

# the broker: run from a copy the cluster's owner can read
demo=$CLUSTER_DIR/demo
mkdir -p "$demo/perl"
cp "$top/test/demo_broker.pl" "$top/test/rabbitmq_consumer.py" "$demo/"
cp "$top"/test/perl/*.pm "$demo/perl/"
[ "$(id -u)" -eq 0 ] && chown -R postgres: "$demo"
as_pg perl "$demo/demo_broker.pl"
