--
-- who may claim for whom: dedup_consumer_roles and dedup.require_consumer_roles
--
CREATE EXTENSION dedup;
CREATE ROLE regress_billing LOGIN;
CREATE ROLE regress_billing_worker LOGIN IN ROLE regress_billing;
CREATE ROLE regress_shipping LOGIN;
GRANT EXECUTE ON FUNCTION dedup_claim(text, text) TO regress_billing, regress_shipping;

-- no mapping: every role with EXECUTE may claim for every consumer (1.0 behaviour)
SET ROLE regress_shipping;
SELECT dedup_claim('billing', 'evt-1') AS shipping_forges_billing;
RESET ROLE;
DELETE FROM processed_messages;

-- mapping billing to its role: only its members may claim for it
SELECT dedup_allow_claimant('billing', 'regress_billing');
SELECT dedup_allow_claimant('billing', 'regress_billing');  -- idempotent
SELECT consumer_name, claimant FROM dedup_consumer_roles;
SET ROLE regress_shipping;
SELECT dedup_claim('billing', 'evt-1');
\echo :SQLSTATE
SELECT dedup_claim('shipping', 'evt-1') AS unmapped_consumer_still_open;
RESET ROLE;
SET ROLE regress_billing;
SELECT dedup_claim('billing', 'evt-1') AS mapped_role;
RESET ROLE;
SET ROLE regress_billing_worker;
SELECT dedup_claim('billing', 'evt-2') AS member_of_mapped_role;
RESET ROLE;
SELECT dedup_claim('billing', 'evt-3') AS superuser;
-- a refused claim wrote nothing
SELECT consumer_name, message_id FROM processed_messages ORDER BY 1, 2;

-- the mapping takes effect in other sessions too (they cache whether it is empty)
\c -
SET ROLE regress_shipping;
SELECT dedup_claim('billing', 'evt-4');
\echo :SQLSTATE
RESET ROLE;

-- require a mapping for every consumer
SET dedup.require_consumer_roles = on;
SET ROLE regress_shipping;
SELECT dedup_claim('shipping', 'evt-5');
\echo :SQLSTATE
SET dedup.require_consumer_roles = off;   -- superuser only
\echo :SQLSTATE
RESET ROLE;
SELECT dedup_allow_claimant('shipping', 'regress_shipping');
SET ROLE regress_shipping;
SELECT dedup_claim('shipping', 'evt-5') AS mapped_now;
RESET ROLE;
SELECT dedup_claim('unmapped', 'evt-6') AS superuser_unmapped;
RESET dedup.require_consumer_roles;

-- an application role cannot change the mapping or the switch
SET ROLE regress_shipping;
SELECT dedup_allow_claimant('billing', 'regress_shipping');
\echo :SQLSTATE
INSERT INTO dedup_consumer_roles VALUES ('billing', 'regress_shipping');
\echo :SQLSTATE
ALTER ROLE regress_shipping SET dedup.require_consumer_roles = off;
\echo :SQLSTATE
RESET ROLE;

-- unmapping: the consumer is open again
SELECT dedup_disallow_claimant('billing', 'regress_billing') AS was_allowed,
       dedup_disallow_claimant('billing', 'regress_billing') AS again;
SELECT dedup_disallow_claimant(NULL, 'regress_billing');
\echo :SQLSTATE
SET ROLE regress_shipping;
SELECT dedup_claim('billing', 'evt-7') AS open_again;
RESET ROLE;

DROP EXTENSION dedup;
DROP ROLE regress_billing_worker;
DROP ROLE regress_billing;
DROP ROLE regress_shipping;
