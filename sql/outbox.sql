--
-- the outbox (issue 32): dedup_publish() with ids derived from the
-- transaction's claim, errors, privileges, the relay's calls, the sweep of
-- sent messages, and a tampered dedup_outbox.  WAL mode needs wal_level
-- logical, which this instance does not have (test/dedup.conf): here only
-- its refusal; TAP 070_outbox_wal.pl reads WAL-mode messages back.
--
CREATE SCHEMA dedup;
CREATE EXTENSION dedup SCHEMA dedup;
SET search_path = public, dedup;
CREATE ROLE regress_ob_app LOGIN;
CREATE ROLE regress_ob_other LOGIN;
CREATE ROLE regress_ob_relay LOGIN;
CREATE ROLE regress_ob_monitor LOGIN IN ROLE pg_monitor;
GRANT USAGE ON SCHEMA dedup TO regress_ob_app, regress_ob_other, regress_ob_relay, regress_ob_monitor;
GRANT EXECUTE ON FUNCTION dedup_claim(text, text), dedup_publish(text, text, text, jsonb)
	TO regress_ob_app, regress_ob_other;
GRANT EXECUTE ON FUNCTION dedup_outbox_lease(text, integer, interval, text[]),
	dedup_outbox_sent(text, bigint[]), dedup_outbox_release(text, bigint[])
	TO regress_ob_relay;
\set SHOW_CONTEXT never

-- the documented derivation (origin.c), in SQL
CREATE FUNCTION pg_temp.derived(consumer text, incoming text, destination text, ordinal int)
RETURNS text LANGUAGE sql AS $$
SELECT regexp_replace(
		 overlay(overlay(encode(substr(d, 1, 16), 'hex')
						 PLACING '8' FROM 13 FOR 1)
				 PLACING substr('89ab', (get_byte(d, 8) >> 4 & 3) + 1, 1) FROM 17 FOR 1),
		 '^(.{8})(.{4})(.{4})(.{4})(.{12})$', '\1-\2-\3-\4-\5')
  FROM sha256('dedup-outbox-v1'::bytea || '\x00'::bytea
			  || int4send(octet_length(consumer)) || convert_to(consumer, 'UTF8')
			  || int4send(octet_length(incoming)) || convert_to(incoming, 'UTF8')
			  || int4send(octet_length(destination)) || convert_to(destination, 'UTF8')
			  || int4send(ordinal)) AS h(d)
$$;
CREATE FUNCTION pg_temp.uuid_version(id text) RETURNS text
LANGUAGE sql AS $$ SELECT CASE WHEN id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$'
						  THEN substr(id, 15, 1) ELSE 'not a UUID: ' || id END $$;

-- a destination must exist
SELECT dedup_publish('orders', 'x');
\echo :LAST_ERROR_SQLSTATE
SELECT dedup_add_destination('orders');
SELECT dedup_add_destination('audit', 'table');
SELECT dedup_add_destination('events', 'wal');
\set VERBOSITY terse
SELECT dedup_add_destination('bad', 'kafka');
\set VERBOSITY default
\echo :LAST_ERROR_SQLSTATE
SELECT destination, mode FROM dedup_outbox_destinations ORDER BY 1;

-- without a claim: random ids (version 4), each its own
SELECT pg_temp.uuid_version(dedup_publish('orders', 'no claim 1')) AS version,
	   dedup_publish('orders', 'no claim 2') <> dedup_publish('orders', 'no claim 3') AS distinct_ids;

-- with a claim: derived from it, in the order of the publishes
TRUNCATE dedup_outbox;
ALTER TABLE dedup_outbox ALTER COLUMN seq RESTART;
BEGIN;
SELECT dedup_claim('billing', 'in-1') AS claimed;
SELECT dedup_publish('orders', 'first', 'cust-1', '{"type": "charged"}') = pg_temp.derived('billing', 'in-1', 'orders', 1) AS first_derived,
	   dedup_publish('audit', 'second') = pg_temp.derived('billing', 'in-1', 'audit', 2) AS second_derived;
COMMIT;
SELECT seq, message_id = pg_temp.derived('billing', 'in-1', destination, seq::int) AS derived,
	   destination, key, headers, payload, attempts, lease_until, sent_at
  FROM dedup_outbox ORDER BY seq;

-- the same message handled again (forgotten, then claimed): the same ids,
-- nothing written twice
SELECT dedup_forget('billing', 'in-1');
BEGIN;
SELECT dedup_claim('billing', 'in-1') AS claimed_again;
SELECT dedup_publish('orders', 'first, again', 'cust-1') = pg_temp.derived('billing', 'in-1', 'orders', 1) AS same_first,
	   dedup_publish('audit', 'second, again') = pg_temp.derived('billing', 'in-1', 'audit', 2) AS same_second;
COMMIT;
SELECT count(*) AS rows, min(payload) AS kept FROM dedup_outbox;

-- a redelivery the claim answers false for publishes nothing derived
BEGIN;
SELECT dedup_claim('billing', 'in-1') AS duplicate;
SELECT pg_temp.uuid_version(dedup_publish('audit', 'after a duplicate')) AS version;
ROLLBACK;

-- rollback keeps nothing, and the next transaction starts afresh
BEGIN;
SELECT dedup_claim('billing', 'in-2') AS claimed;
SELECT dedup_publish('orders', 'rolled back') = pg_temp.derived('billing', 'in-2', 'orders', 1) AS derived;
ROLLBACK;
SELECT count(*) AS rows FROM dedup_outbox;
SELECT pg_temp.uuid_version(dedup_publish('audit', 'next transaction')) AS version;

-- a claim rolled back to a savepoint stops the derivation ...
BEGIN;
SAVEPOINT before_claim;
SELECT dedup_claim('billing', 'in-3') AS claimed;
ROLLBACK TO before_claim;
SELECT pg_temp.uuid_version(dedup_publish('audit', 'claim rolled back')) AS version;
ROLLBACK;
-- ... and so does one in a subtransaction inside it; a savepoint rolled
-- back after the claim does not (its publish still counts)
BEGIN;
SAVEPOINT outer_sp;
SAVEPOINT inner_sp;
SELECT dedup_claim('billing', 'in-4') AS claimed;
RELEASE inner_sp;
ROLLBACK TO outer_sp;
SELECT pg_temp.uuid_version(dedup_publish('audit', 'nested claim rolled back')) AS version;
SELECT dedup_claim('billing', 'in-5') AS claimed;
SAVEPOINT after_claim;
SELECT dedup_publish('audit', 'rolled back to a savepoint') = pg_temp.derived('billing', 'in-5', 'audit', 1) AS first;
ROLLBACK TO after_claim;
SELECT dedup_publish('audit', 'kept') = pg_temp.derived('billing', 'in-5', 'audit', 2) AS second;
-- a later claim derives from itself, from 1 again
SELECT dedup_try_claim('billing', 'in-6') AS try_claimed;
SELECT dedup_publish('audit', 'after try_claim') = pg_temp.derived('billing', 'in-6', 'audit', 1) AS derived;
-- a batch of one key derives; of several keys, not
SELECT dedup_claim_many('billing', ARRAY['in-7']) AS batch_of_one;
SELECT dedup_publish('audit', 'after a batch of one') = pg_temp.derived('billing', 'in-7', 'audit', 1) AS derived;
SELECT dedup_claim_many('billing', ARRAY['in-8', 'in-9']) AS batch;
SELECT pg_temp.uuid_version(dedup_publish('audit', 'after a batch')) AS version;
COMMIT;
-- a prepared transaction forgets its claim too
BEGIN;
SELECT dedup_claim('billing', 'in-10') AS claimed;
PREPARE TRANSACTION 'outbox-prepared';
SELECT pg_temp.uuid_version(dedup_publish('audit', 'after prepare')) AS version;
ROLLBACK PREPARED 'outbox-prepared';

-- after a claim of one offset: derived from the consumer, stream, partition
-- and offset (their own tag: never an id of a message id's), the same when
-- the offset is replayed after a rollback; it ends an earlier claim's
-- derivation, and a batch of several offsets derives nothing
CREATE FUNCTION pg_temp.derived_offset(consumer text, stream text, part int,
									   message_offset bigint, destination text, ordinal int)
RETURNS text LANGUAGE sql AS $$
SELECT regexp_replace(
		 overlay(overlay(encode(substr(d, 1, 16), 'hex')
						 PLACING '8' FROM 13 FOR 1)
				 PLACING substr('89ab', (get_byte(d, 8) >> 4 & 3) + 1, 1) FROM 17 FOR 1),
		 '^(.{8})(.{4})(.{4})(.{4})(.{12})$', '\1-\2-\3-\4-\5')
  FROM sha256('dedup-outbox-offset-v1'::bytea || '\x00'::bytea
			  || int4send(octet_length(consumer)) || convert_to(consumer, 'UTF8')
			  || int4send(octet_length(stream)) || convert_to(stream, 'UTF8')
			  || int4send(part) || int8send(message_offset)
			  || int4send(octet_length(destination)) || convert_to(destination, 'UTF8')
			  || int4send(ordinal)) AS h(d)
$$;
BEGIN;
SELECT dedup_claim('billing', 'in-11') AS claimed;
SELECT dedup_claim_offset('billing', 'payments', 3, 4100) AS claimed_offset;
SELECT dedup_publish('audit', 'after an offset') = pg_temp.derived_offset('billing', 'payments', 3, 4100, 'audit', 1) AS derived,
	   dedup_publish('orders', 'after an offset, 2') = pg_temp.derived_offset('billing', 'payments', 3, 4100, 'orders', 2) AS second;
SELECT dedup_claim_offsets('billing', 'payments', 3, ARRAY[4101]::bigint[]) AS batch_of_one;
SELECT dedup_publish('audit', 'after a batch of one offset') = pg_temp.derived_offset('billing', 'payments', 3, 4101, 'audit', 1) AS derived;
-- a replayed offset (false) changes nothing
SELECT dedup_claim_offset('billing', 'payments', 3, 4101) AS replay;
SELECT dedup_publish('audit', 'after a replay') = pg_temp.derived_offset('billing', 'payments', 3, 4101, 'audit', 2) AS derived;
-- the offset 4101 of partition 3 is not 4 of 1013, nor message id '3/4101'
SELECT pg_temp.derived_offset('billing', 'payments', 3, 4101, 'audit', 1)
	   NOT IN (pg_temp.derived_offset('billing', 'payments', 1013, 4, 'audit', 1),
			   pg_temp.derived('billing', '3/4101', 'audit', 1)) AS no_collision;
SELECT dedup_claim_offsets('billing', 'payments', 3, ARRAY[4102, 4103]::bigint[]) AS batch;
SELECT pg_temp.uuid_version(dedup_publish('audit', 'after a batch of offsets')) AS version;
ROLLBACK;
BEGIN;
SELECT dedup_claim_offset('billing', 'payments', 3, 4100) AS claimed_again;
SELECT dedup_publish('audit', 'the offset handled again') = pg_temp.derived_offset('billing', 'payments', 3, 4100, 'audit', 1) AS same_id;
ROLLBACK;

-- bad input: a clear error, nothing written
SELECT count(*) AS rows_before FROM dedup_outbox \gset
SELECT dedup_publish(NULL, 'x');
\echo :LAST_ERROR_SQLSTATE
SELECT dedup_publish('orders', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT dedup_publish('', 'x');
\echo :LAST_ERROR_SQLSTATE
SELECT dedup_publish(repeat('d', 256), 'x');
\echo :LAST_ERROR_SQLSTATE
SELECT dedup_publish('orders', 'x', '');
\echo :LAST_ERROR_SQLSTATE
SELECT dedup_publish('orders', 'x', repeat('k', 1024 * 1024));
\echo :LAST_ERROR_SQLSTATE
SELECT dedup_publish('orders', 'x', NULL, '[1, 2]');
\echo :LAST_ERROR_SQLSTATE
SELECT dedup_publish('orders', 'x', NULL, '"scalar"');
\echo :LAST_ERROR_SQLSTATE
-- headers every broker can carry: a flat object of short names (none that
-- a broker routes by or the relay sets) with strings, 64-bit integers or
-- booleans, at most 2048 bytes encoded (22023, naming the header)
SELECT dedup_publish('orders', 'x', NULL, '{"CC": "other-queue"}');
\echo :LAST_ERROR_SQLSTATE
SELECT dedup_publish('orders', 'x', NULL, '{"bcc": ["other-queue"]}');
\echo :LAST_ERROR_SQLSTATE
SELECT dedup_publish('orders', 'x', NULL, '{"X-Delay": 5000}');
\echo :LAST_ERROR_SQLSTATE
SELECT dedup_publish('orders', 'x', NULL, '{"dedup-key": "someone else''s"}');
\echo :LAST_ERROR_SQLSTATE
SELECT dedup_publish('orders', 'x', NULL, '{"": "empty name"}');
\echo :LAST_ERROR_SQLSTATE
SELECT dedup_publish('orders', 'x', NULL, jsonb_build_object(repeat('n', 256), 'long name'));
\echo :LAST_ERROR_SQLSTATE
SELECT dedup_publish('orders', 'x', NULL, '{"ratio": 0.5}');
\echo :LAST_ERROR_SQLSTATE
SELECT dedup_publish('orders', 'x', NULL, '{"big": 9223372036854775808}');
\echo :LAST_ERROR_SQLSTATE
SELECT dedup_publish('orders', 'x', NULL, '{"nested": {"a": 1}}');
\echo :LAST_ERROR_SQLSTATE
SELECT dedup_publish('orders', 'x', NULL, '{"none": null}');
\echo :LAST_ERROR_SQLSTATE
SELECT dedup_publish('orders', 'x', NULL, jsonb_build_object('trace', repeat('t', 2048)));
\echo :LAST_ERROR_SQLSTATE
SELECT dedup_publish('orders', repeat('p', 1024 * 1024 + 1));
\echo :LAST_ERROR_SQLSTATE
SET dedup.outbox_max_payload = '16B';
SELECT dedup_publish('orders', repeat('p', 17));
\echo :LAST_ERROR_SQLSTATE
SELECT dedup_publish('orders', 'p', NULL, '{"a": "0123456789abcdef"}');
\echo :LAST_ERROR_SQLSTATE
SELECT dedup_publish('orders', repeat('p', 16)) IS NOT NULL AS at_the_limit;
RESET dedup.outbox_max_payload;
-- ... and what they accept
SELECT dedup_publish('orders', 'x', NULL,
		'{"type": "charged", "Content-Language": "de", "count": -9223372036854775808, "replay": false, "ccx": "a name like CC"}') AS headers_id \gset
SELECT headers FROM dedup_outbox WHERE message_id = :'headers_id';
SELECT dedup_publish('orders', 'x', NULL, jsonb_build_object('trace', repeat('t', 2048 - 12))) IS NOT NULL AS at_the_limit;
-- a huge payload within the limit is fine (and toasted)
SET dedup.outbox_max_payload = '8MB';
SELECT dedup_publish('orders', repeat('p', 4 * 1024 * 1024)) AS huge_id \gset
SELECT length(payload), pg_column_size(payload) < 1024 * 1024 AS compressed
  FROM dedup_outbox WHERE message_id = :'huge_id';
RESET dedup.outbox_max_payload;
-- WAL mode needs wal_level logical
SELECT dedup_publish('events', 'x');
\echo :LAST_ERROR_SQLSTATE
-- read-only transactions publish nothing
BEGIN READ ONLY;
SELECT dedup_publish('orders', 'x');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT count(*) - :rows_before AS rows_written FROM dedup_outbox;
SELECT count(*) AS huge FROM dedup_outbox WHERE length(payload) > 1000;

-- privileges: EXECUTE is all a publisher needs, and all it gets
SET ROLE regress_ob_app;
BEGIN;
SELECT dedup_claim('app', 'in-1') AS claimed;
SELECT dedup.dedup_publish('orders', 'by the app') = pg_temp.derived('app', 'in-1', 'orders', 1) AS derived;
COMMIT;
SELECT count(*) FROM dedup.dedup_outbox;
\echo :LAST_ERROR_SQLSTATE
INSERT INTO dedup.dedup_outbox (message_id, destination, payload) VALUES ('forged', 'orders', 'x');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM dedup.dedup_outbox_lease('app');
\echo :LAST_ERROR_SQLSTATE
SELECT dedup.dedup_add_destination('mine');
\echo :LAST_ERROR_SQLSTATE
SELECT dedup.dedup_allow_publisher('orders', 'regress_ob_app');
\echo :LAST_ERROR_SQLSTATE
SELECT dedup.dedup_outbox_resend('x');
\echo :LAST_ERROR_SQLSTATE
SELECT dedup.dedup_outbox_sweep();
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM dedup.dedup_outbox_backlog;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
-- nor may a role without EXECUTE publish
SET ROLE regress_ob_relay;
SELECT dedup.dedup_publish('orders', 'by the relay');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- the publisher mapping: a mapped destination takes its roles' members only
SELECT dedup_allow_publisher('orders', 'regress_ob_app');
SELECT dedup_allow_publisher('orders', 'regress_ob_app');  -- idempotent
SELECT destination, publisher FROM dedup_outbox_publishers;
SET ROLE regress_ob_other;
SELECT dedup.dedup_publish('orders', 'by another');
\echo :LAST_ERROR_SQLSTATE
SELECT dedup.dedup_publish('audit', 'unmapped: open') IS NOT NULL AS published;
RESET ROLE;
SET ROLE regress_ob_app;
SELECT dedup.dedup_publish('orders', 'mapped') IS NOT NULL AS published;
RESET ROLE;
SELECT dedup_disallow_publisher('orders', 'regress_ob_app') AS was_allowed,
	   dedup_disallow_publisher('orders', 'regress_ob_app') AS again;

-- monitoring reads the views, never a message
SET ROLE regress_ob_monitor;
SELECT destination, mode, unsent, leased, oldest_unsent_age > '0'::interval AS waiting,
	   max_attempts, sent_last_minute, last_sent_at, retention
  FROM dedup.dedup_outbox_backlog ORDER BY destination;
SELECT count(*) FROM dedup.dedup_outbox_slots;
SELECT count(*) FROM dedup.dedup_outbox;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- the relay: leases in seq order, per key one relay at a time
TRUNCATE dedup_outbox;
ALTER TABLE dedup_outbox ALTER COLUMN seq RESTART;
SELECT dedup_publish('orders', 'k1 first', 'k1') IS NOT NULL,
	   dedup_publish('orders', 'k2 first', 'k2') IS NOT NULL,
	   dedup_publish('orders', 'k1 second', 'k1') IS NOT NULL,
	   dedup_publish('audit', 'no key') IS NOT NULL,
	   dedup_publish('orders', 'k2 second', 'k2') IS NOT NULL;
SET ROLE regress_ob_relay;
SELECT seq, destination, key, payload, attempts FROM dedup.dedup_outbox_lease('relay-a', 1);
-- relay b may not take k1's second message while a holds its first
SELECT seq, destination, key, payload, attempts FROM dedup.dedup_outbox_lease('relay-b', 10, '1 minute', ARRAY['orders']);
SELECT seq, destination, key, payload FROM dedup.dedup_outbox_lease('relay-b', 10);
SELECT count(*) FROM dedup.dedup_outbox_lease('relay-c');
-- sent: only the holder's, and once
SELECT dedup.dedup_outbox_sent('relay-b', ARRAY[1]::bigint[]) AS not_its_lease;
SELECT dedup.dedup_outbox_sent('relay-a', ARRAY[1, 1, 99]::bigint[]) AS marked;
SELECT dedup.dedup_outbox_sent('relay-a', ARRAY[1]::bigint[]) AS again;
SELECT seq, payload FROM dedup.dedup_outbox_lease('relay-c');
-- released leases are leasable again, with one more attempt
SELECT dedup.dedup_outbox_release('relay-b', ARRAY[2, 4, 5]::bigint[]) AS released;
SELECT seq, payload, attempts FROM dedup.dedup_outbox_lease('relay-c');
-- a relay starting again gives back every lease it holds
SELECT dedup.dedup_outbox_release('relay-c', NULL) AS released_all;
SELECT seq, attempts FROM dedup.dedup_outbox_lease('relay-c');
-- an expired lease is leasable again
SELECT seq FROM dedup.dedup_outbox_lease('relay-c', 10, '1 microsecond');
RESET ROLE;
SELECT seq, lease_holder, attempts, sent_at IS NOT NULL AS sent FROM dedup_outbox ORDER BY seq;
-- the relay's calls are planned at every call: never JIT-compiled
SELECT p.proname, p.proconfig FROM pg_proc p
 WHERE p.proname IN ('dedup_outbox_lease', 'dedup_outbox_sent', 'dedup_outbox_release')
 ORDER BY 1;
SET ROLE regress_ob_relay;
SELECT seq, attempts FROM dedup.dedup_outbox_lease('relay-d');
-- the relay's arguments
SELECT * FROM dedup.dedup_outbox_lease(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM dedup.dedup_outbox_lease('');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM dedup.dedup_outbox_lease('r', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM dedup.dedup_outbox_lease('r', 10001);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM dedup.dedup_outbox_lease('r', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM dedup.dedup_outbox_lease('r', 1, '0');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM dedup.dedup_outbox_lease('r', 1, '-1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM dedup.dedup_outbox_lease('r', 1, '1 month');
\echo :LAST_ERROR_SQLSTATE
SELECT dedup.dedup_outbox_sent(NULL, ARRAY[1]::bigint[]);
\echo :LAST_ERROR_SQLSTATE
SELECT dedup.dedup_outbox_sent('relay-d', NULL) AS nothing;
-- nor may it publish, read the table or resend
SELECT dedup.dedup_outbox_resend('x');
\echo :LAST_ERROR_SQLSTATE
UPDATE dedup.dedup_outbox SET sent_at = NULL;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- resend on purpose: a sent message unsent again
SELECT message_id AS sent_id FROM dedup_outbox WHERE seq = 1 \gset
SELECT dedup_outbox_resend(:'sent_id') AS resent, dedup_outbox_resend(:'sent_id') AS not_sent_now;
SELECT dedup_outbox_resend('no such id') AS none;
SELECT dedup_outbox_resend(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT seq, lease_holder, sent_at FROM dedup_outbox WHERE seq = 1;

-- the sweep deletes sent messages past dedup.outbox_retention, never an
-- unsent one however old
UPDATE dedup_outbox SET sent_at = now() - interval '2 hours', lease_until = NULL, lease_holder = 'relay-d'
 WHERE seq IN (2, 3);
UPDATE dedup_outbox SET sent_at = now() - interval '10 minutes' WHERE seq = 4;
UPDATE dedup_outbox SET created_at = now() - interval '1 year' WHERE sent_at IS NULL;
SELECT dedup_outbox_sweep() AS swept;
SELECT seq, sent_at IS NOT NULL AS sent FROM dedup_outbox ORDER BY seq;
SELECT dedup_outbox_sweep() AS nothing_left;

-- dropping a destination with unsent messages takes force, and READ
-- COMMITTED (a snapshot of its own would miss what it waited for)
SELECT dedup_drop_destination('orders');
\echo :LAST_ERROR_SQLSTATE
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT dedup_drop_destination('orders', force => true);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT count(*) AS still_unsent FROM dedup_outbox WHERE destination = 'orders' AND sent_at IS NULL;
SELECT dedup_drop_destination('orders', force => true) AS dropped,
	   dedup_drop_destination('orders') AS again;
SELECT destination, count(*) FROM dedup_outbox GROUP BY 1 ORDER BY 1;
SELECT dedup_publish('orders', 'x');
\echo :LAST_ERROR_SQLSTATE
SELECT dedup_add_destination('orders');

-- a tampered dedup_outbox: whatever a superuser adds acts as it says, and
-- never makes a publish half-written or silently lost
CREATE FUNCTION pg_temp.refuse() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN RAISE EXCEPTION 'refused by a trigger'; END $$;
CREATE TRIGGER refuse BEFORE INSERT ON dedup_outbox FOR EACH ROW EXECUTE FUNCTION pg_temp.refuse();
SELECT dedup_publish('orders', 'x');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER refuse ON dedup_outbox;
CREATE RULE discard AS ON INSERT TO dedup_outbox DO INSTEAD NOTHING;
SELECT dedup_publish('orders', 'x');
\echo :LAST_ERROR_SQLSTATE
DROP RULE discard ON dedup_outbox;
-- row security, even forced: the owner (the superuser who installed dedup)
-- bypasses it
ALTER TABLE dedup_outbox ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
SELECT dedup_publish('orders', 'owner bypasses RLS') IS NOT NULL AS published;
ALTER TABLE dedup_outbox NO FORCE ROW LEVEL SECURITY, DISABLE ROW LEVEL SECURITY;
CREATE UNIQUE INDEX extra ON dedup_outbox (destination, payload);
SELECT dedup_publish('orders', 'same payload') IS NOT NULL AS published;
SELECT dedup_publish('orders', 'same payload');
\echo :LAST_ERROR_SQLSTATE
DROP INDEX extra;
SELECT count(*) AS rows FROM dedup_outbox WHERE payload IN ('x', 'same payload');
-- a CHECK constraint, a changed default, an added column act as the INSERT
-- says too (dedup_publish writes the table directly only as 1.4 made it)
ALTER TABLE dedup_outbox ADD CONSTRAINT short_payload CHECK (length(payload) < 10) NOT VALID;
\set VERBOSITY terse
SELECT dedup_publish('orders', 'a payload too long');
\set VERBOSITY default
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE dedup_outbox DROP CONSTRAINT short_payload;
ALTER TABLE dedup_outbox ALTER attempts SET DEFAULT 5;
SELECT dedup_publish('orders', 'default 5') IS NOT NULL AS published;
SELECT attempts FROM dedup_outbox WHERE payload = 'default 5';
ALTER TABLE dedup_outbox ALTER attempts SET DEFAULT 0;
UPDATE dedup_outbox SET key = 'k' WHERE key IS NULL;
ALTER TABLE dedup_outbox ALTER key SET NOT NULL;
\set VERBOSITY terse
SELECT dedup_publish('orders', 'no key');
\set VERBOSITY default
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE dedup_outbox ALTER key DROP NOT NULL;
ALTER TABLE dedup_outbox ADD COLUMN tenant text NOT NULL DEFAULT 'acme';
SELECT dedup_publish('orders', 'added column') IS NOT NULL AS published;
SELECT tenant FROM dedup_outbox WHERE payload = 'added column';
ALTER TABLE dedup_outbox DROP COLUMN tenant;
SELECT dedup_publish('orders', 'after a dropped column') IS NOT NULL AS published;
SELECT attempts, created_at > now() - interval '1 hour' AS recent FROM dedup_outbox WHERE payload = 'after a dropped column';

-- refused by the broker: given back, moved to the dead letters at the
-- dedup.outbox_max_attempts-th lease (10 here, the default; not a setting a
-- session may change), unblocking its key; retried on purpose, audited
SELECT dedup_add_destination('no-queue');
SELECT dedup_publish('no-queue', 'never routed', 'k-dead') AS dead_id \gset
SELECT dedup_publish('no-queue', 'behind it', 'k-dead') IS NOT NULL AS published;
SET dedup.outbox_max_attempts = 1;
\echo :LAST_ERROR_SQLSTATE
GRANT EXECUTE ON FUNCTION dedup_outbox_refused(text, bigint[], text) TO regress_ob_relay;
SET ROLE regress_ob_relay;
-- nine leases, each refused: given back each time, nothing moved
DO $$
DECLARE
	m record;
BEGIN
	FOR i IN 1..9 LOOP
		SELECT * INTO m FROM dedup.dedup_outbox_lease('relay-dl', 1, '1 minute', ARRAY['no-queue']);
		IF dedup.dedup_outbox_refused('relay-dl', ARRAY[m.seq], '312 NO_ROUTE') <> 0 THEN
			RAISE 'moved at attempt %', m.attempts;
		END IF;
	END LOOP;
END $$;
-- another relay's lease is not this one's to refuse
SELECT seq, payload, attempts FROM dedup.dedup_outbox_lease('relay-dl', 1, '1 minute', ARRAY['no-queue']) \gset dl_
\echo :dl_payload :dl_attempts
SELECT dedup.dedup_outbox_refused('relay-other', ARRAY[:dl_seq]::bigint[], 'not mine') AS not_its_lease;
SELECT dedup.dedup_outbox_refused('relay-dl', ARRAY[:dl_seq]::bigint[], '312 NO_ROUTE: no queue "no-queue"') AS moved;
SELECT dedup.dedup_outbox_refused(NULL, ARRAY[1]::bigint[], 'x');
\echo :LAST_ERROR_SQLSTATE
-- the key goes on behind it
SELECT payload, attempts FROM dedup.dedup_outbox_lease('relay-dl', 10, '1 minute', ARRAY['no-queue']);
SELECT dedup.dedup_outbox_release('relay-dl', NULL) AS released;
-- nor may the relay read or retry a dead letter
SELECT count(*) FROM dedup.dedup_outbox_dead_letters;
\echo :LAST_ERROR_SQLSTATE
SELECT dedup.dedup_outbox_retry(:'dead_id');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT message_id = :'dead_id' AS the_message, seq = :dl_seq AS its_seq, destination, key,
	   payload, attempts, reason, dead_at > now() - interval '1 hour' AS recent
  FROM dedup_outbox_dead_letters;
SELECT destination, unsent, dead_letters FROM dedup.dedup_outbox_backlog WHERE destination = 'no-queue';
-- monitoring sees the count, never the letter
SET ROLE regress_ob_monitor;
SELECT destination, dead_letters FROM dedup.dedup_outbox_backlog WHERE destination = 'no-queue';
SELECT count(*) FROM dedup.dedup_outbox_dead_letters;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT dedup_outbox_retry(:'dead_id') AS retried, dedup_outbox_retry(:'dead_id') AS not_dead_now;
SELECT dedup_outbox_retry(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT payload, attempts, sent_at IS NULL AS unsent, seq > :dl_seq AS behind_its_key
  FROM dedup_outbox WHERE message_id = :'dead_id';
SELECT count(*) AS dead_letters FROM dedup_outbox_dead_letters;
-- WAL mode: the relay counts the refusals; at the 10th the message is a
-- dead letter (without a seq), once however often it is told
GRANT EXECUTE ON FUNCTION dedup_outbox_refused_wal(text, text, text, text, jsonb, text, integer, text)
	TO regress_ob_relay;
SET ROLE regress_ob_relay;
SELECT dedup.dedup_outbox_refused_wal('relay-w', 'wal-1', 'events', 'k', '{"type": "t"}', 'p', 9, 'nacked') AS dead_at_9,
	   dedup.dedup_outbox_refused_wal('relay-w', 'wal-1', 'events', 'k', '{"type": "t"}', 'p', 10, 'nacked') AS dead_at_10,
	   dedup.dedup_outbox_refused_wal('relay-w', 'wal-1', 'events', 'k', '{"type": "t"}', 'p', 11, 'nacked') AS still_dead;
SELECT dedup.dedup_outbox_refused_wal(NULL, 'wal-2', 'events', NULL, NULL, 'p', 10, 'x');
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY terse
SELECT dedup.dedup_outbox_refused_wal('relay-w', 'wal-2', 'events', NULL, NULL, NULL, 10, 'x');
\set VERBOSITY default
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT message_id, seq, destination, key, headers, payload, attempts, reason FROM dedup_outbox_dead_letters;
SELECT dedup_outbox_retry('wal-1') AS retried;
SELECT destination, key, payload, sent_at IS NULL AS unsent FROM dedup_outbox WHERE message_id = 'wal-1';

DROP EXTENSION dedup;
DROP SCHEMA dedup;
DROP ROLE regress_ob_app, regress_ob_other, regress_ob_relay, regress_ob_monitor;
