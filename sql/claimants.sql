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

-- dedup_seen answers only roles that may claim for the consumer: whether an
-- id was processed is the consumer's business, a monitoring role included
GRANT EXECUTE ON FUNCTION dedup_seen(text, text) TO regress_shipping, regress_billing;
SELECT dedup_allow_claimant('billing', 'regress_billing');
SET ROLE regress_shipping;
SELECT seen FROM dedup_seen('billing', 'evt-7');
\echo :SQLSTATE
SELECT seen FROM dedup_seen('shipping', 'evt-1') AS unmapped_consumer;
RESET ROLE;
SET ROLE regress_billing;
SELECT seen FROM dedup_seen('billing', 'evt-7') AS mapped_role_looks;
RESET ROLE;

-- a mapping to a role that is dropped maps nothing, and pg_dump leaves it
-- out (its claimant would be dumped as a bare OID, which in another
-- cluster may name another role)
CREATE ROLE regress_leaving;
SELECT dedup_allow_claimant('audit', 'regress_leaving');
SET ROLE regress_shipping;
SELECT dedup_claim('audit', 'evt-1');
\echo :SQLSTATE
RESET ROLE;
DROP ROLE regress_leaving;
SELECT consumer_name, claimant::text ~ '^[0-9]+$' AS bare_oid
  FROM dedup_consumer_roles ORDER BY 1;
SET ROLE regress_shipping;
SELECT dedup_claim('audit', 'evt-1') AS unmapped_with_the_role;
RESET ROLE;
-- what pg_dump would dump: the query it runs, with the extension's filter
SELECT format('SELECT consumer_name, claimant FROM dedup_consumer_roles %s ORDER BY 1',
			  e.extcondition[array_position(e.extconfig, 'dedup_consumer_roles'::regclass)])
  FROM pg_extension e WHERE e.extname = 'dedup'
\gexec

DROP EXTENSION dedup;
DROP ROLE regress_billing_worker;
DROP ROLE regress_billing;
DROP ROLE regress_shipping;
