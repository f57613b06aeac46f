#!/usr/bin/env bash
# test/demo.sh: set everything up on a fresh Debian 12 machine and show dedup
# doing its job on a throwaway cluster, which is removed afterwards.
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
SQL
