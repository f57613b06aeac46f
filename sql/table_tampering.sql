--
-- table tampering: what a table owner or a superuser can change in the
-- extension's tables.  Claims, forgets and sweeps write and read them
-- directly, so each change they would silently get wrong is refused with
-- 55000 and a hint saying what to undo; the rest is honoured.  Every case
-- runs in a backend that has claimed before the change, and claims again
-- once it is undone.
--
CREATE EXTENSION dedup;
SELECT dedup_claim('svc', 'warm', '\x01'::bytea) AS claimed;

-- NOT NULL on fingerprint: claims without a fingerprint store NULL there
ALTER TABLE processed_messages ALTER COLUMN fingerprint SET NOT NULL;
SELECT dedup_claim('svc', 'not-null');
\echo :SQLSTATE
ALTER TABLE processed_messages ALTER COLUMN fingerprint DROP NOT NULL;
-- nor may the others lose theirs
ALTER TABLE processed_messages ALTER COLUMN processed_at DROP NOT NULL;
SELECT dedup_claim('svc', 'not-null');
\echo :SQLSTATE
ALTER TABLE processed_messages ALTER COLUMN processed_at SET NOT NULL;
SELECT dedup_claim('svc', 'not-null') AS claimed;

-- defaults: claims write every column themselves and would ignore them
ALTER TABLE processed_messages ALTER COLUMN fingerprint SET DEFAULT '\x00';
SELECT dedup_claim('svc', 'default');
\echo :SQLSTATE
ALTER TABLE processed_messages ALTER COLUMN fingerprint DROP DEFAULT;
ALTER TABLE processed_messages ALTER COLUMN processed_at
	SET DEFAULT now() - interval '1 day';
SELECT dedup_claim('svc', 'default');
\echo :SQLSTATE
ALTER TABLE processed_messages ALTER COLUMN processed_at DROP DEFAULT;
SELECT dedup_claim('svc', 'default');
\echo :SQLSTATE
ALTER TABLE processed_messages ALTER COLUMN processed_at SET DEFAULT now();
SELECT dedup_claim('svc', 'default') AS claimed;

-- collations are the extension's: the key compares ids in the column's
ALTER TABLE processed_messages ALTER COLUMN message_id TYPE text COLLATE "C";
SELECT dedup_claim('svc', 'collation');
\echo :SQLSTATE
ALTER TABLE processed_messages ALTER COLUMN message_id TYPE text COLLATE "default";
SELECT dedup_claim('svc', 'collation') AS claimed;

-- a rule would not be applied either
CREATE RULE regress_rule AS ON INSERT TO processed_messages DO ALSO NOTIFY regress_dedup;
SELECT dedup_claim('svc', 'rule');
\echo :SQLSTATE
DROP RULE regress_rule ON processed_messages;
SELECT dedup_claim('svc', 'rule') AS claimed;
-- nor a foreign key's triggers: a forget would leave rows referencing nothing
CREATE TABLE regress_ref (c text, m text, FOREIGN KEY (c, m) REFERENCES processed_messages);
SELECT dedup_forget('svc', 'rule');
\echo :SQLSTATE
DROP TABLE regress_ref;

-- a partition: claims of other consumers would land outside its bounds
CREATE TABLE regress_parent (consumer_name text NOT NULL, message_id text NOT NULL,
	processed_at timestamptz NOT NULL, fingerprint bytea) PARTITION BY LIST (consumer_name);
ALTER TABLE regress_parent ATTACH PARTITION processed_messages FOR VALUES IN ('svc');
SELECT dedup_claim('other', 'partition');
\echo :SQLSTATE
ALTER TABLE regress_parent DETACH PARTITION processed_messages;
DROP TABLE regress_parent;
SELECT dedup_claim('other', 'partition') AS claimed;

-- inheritance, either way
CREATE TABLE regress_parent (consumer_name text);
ALTER TABLE processed_messages INHERIT regress_parent;
SELECT dedup_claim('svc', 'inherits');
\echo :SQLSTATE
ALTER TABLE processed_messages NO INHERIT regress_parent;
DROP TABLE regress_parent;
CREATE TABLE regress_child () INHERITS (processed_messages);
SELECT dedup_claim('svc', 'inherited');
\echo :SQLSTATE
SELECT dedup_sweep();
\echo :SQLSTATE
DROP TABLE regress_child;
SELECT dedup_claim('svc', 'inherits') AS claimed, dedup_claim('svc', 'inherited') AS claimed;

-- unlogged: a crash would empty it
ALTER TABLE processed_messages SET UNLOGGED;
SELECT dedup_claim('svc', 'unlogged');
\echo :SQLSTATE
ALTER TABLE processed_messages SET LOGGED;
SELECT dedup_claim('svc', 'unlogged') AS claimed;
-- and an unlogged dedup_retention would forget every window
ALTER TABLE dedup_retention SET UNLOGGED;
SELECT dedup_sweep();
\echo :SQLSTATE
ALTER TABLE dedup_retention SET LOGGED;

-- the indexes are the ones the extension created: a time index in the
-- other order would make sweeps find nothing
DROP INDEX processed_messages_consumer_time_idx;
CREATE INDEX regress_time_desc ON processed_messages (consumer_name DESC, processed_at DESC);
SELECT dedup_sweep();
\echo :SQLSTATE
DROP INDEX regress_time_desc;
CREATE INDEX regress_time_nulls ON processed_messages (consumer_name, processed_at NULLS FIRST);
SELECT dedup_sweep();
\echo :SQLSTATE
DROP INDEX regress_time_nulls;
CREATE INDEX regress_time_ops ON processed_messages (consumer_name text_pattern_ops, processed_at);
SELECT dedup_sweep();
\echo :SQLSTATE
DROP INDEX regress_time_ops;
CREATE INDEX regress_time_collation ON processed_messages (consumer_name COLLATE "C", processed_at);
SELECT dedup_sweep();
\echo :SQLSTATE
DROP INDEX regress_time_collation;
CREATE INDEX processed_messages_consumer_time_idx
	ON processed_messages (consumer_name, processed_at);
-- the same for the key of dedup_retention
ALTER TABLE dedup_retention DROP CONSTRAINT dedup_retention_pkey;
CREATE UNIQUE INDEX regress_retention_desc ON dedup_retention (consumer_name DESC);
SELECT dedup_sweep();
\echo :SQLSTATE
DROP INDEX regress_retention_desc;
ALTER TABLE dedup_retention ADD CONSTRAINT dedup_retention_pkey PRIMARY KEY (consumer_name);
SELECT dedup_set_retention('svc', '1 day');
INSERT INTO processed_messages VALUES ('svc', 'expired', now() - interval '2 days');
SELECT dedup_sweep() AS swept;

-- REPLICA IDENTITY NOTHING with a publication that publishes deletes:
-- forgets and sweeps fail as a DELETE does; claims insert as before
SET client_min_messages = error;	-- no wal_level warning
CREATE PUBLICATION regress_pub FOR TABLE processed_messages;
RESET client_min_messages;
ALTER TABLE processed_messages REPLICA IDENTITY NOTHING;
INSERT INTO processed_messages VALUES ('svc', 'expired', now() - interval '2 days');
DELETE FROM processed_messages WHERE message_id = 'no such id';
\echo :SQLSTATE
SELECT dedup_forget('svc', 'warm');
\echo :SQLSTATE
SELECT dedup_forget_since('svc', '-infinity');
\echo :SQLSTATE
SELECT dedup_sweep();
\echo :SQLSTATE
SELECT dedup_claim('svc', 'published') AS claimed;
ALTER TABLE processed_messages REPLICA IDENTITY DEFAULT;
SELECT dedup_forget('svc', 'published') AS forgotten, dedup_sweep() AS swept;
DROP PUBLICATION regress_pub;

-- a column added and dropped again leaves a dropped attribute behind: every
-- claim, look-up, forget and sweep works as before, and stores NULL in it
ALTER TABLE processed_messages ADD COLUMN regress_extra int;
SELECT dedup_claim('svc', 'extra-column');
\echo :SQLSTATE
ALTER TABLE processed_messages DROP COLUMN regress_extra;
SELECT dedup_claim('svc', 'dropped') AS claimed,
       dedup_claim('svc', 'dropped-fp', '\x02'::bytea) AS with_fingerprint,
       dedup_claim('svc', 'dropped-fp', '\x02'::bytea) AS duplicate,
       dedup_claim_many('svc', ARRAY['many-1', 'dropped', 'many-2']) AS many,
       dedup_try_claim('svc', 'try') AS try;
SELECT dedup_claim('svc', 'dropped-fp', '\x03'::bytea);
\echo :SQLSTATE
SELECT seen FROM dedup_seen('svc', 'dropped-fp');
SELECT dedup_forget('svc', 'many-2') AS forgotten;
INSERT INTO processed_messages VALUES ('svc', 'expired', now() - interval '2 days');
SELECT dedup_sweep() AS swept;
SELECT dedup_forget_since('other', '-infinity') AS forgotten;
SELECT consumer_name, message_id, fingerprint,
       processed_at > now() - interval '1 hour' AS claimed_lately
  FROM processed_messages ORDER BY consumer_name, message_id;

-- a 1.0 table with a dropped attribute, updated to 1.1 and later: the
-- fingerprint column comes after the dropped one
DROP EXTENSION dedup;
CREATE EXTENSION dedup VERSION '1.0';
ALTER TABLE processed_messages ADD COLUMN regress_extra int;
ALTER TABLE processed_messages DROP COLUMN regress_extra;
SELECT dedup_claim('svc', 'v1.0') AS claimed;
ALTER EXTENSION dedup UPDATE;
SELECT attnum FROM pg_attribute
 WHERE attrelid = 'processed_messages'::regclass AND attname = 'fingerprint';
SELECT dedup_claim('svc', 'updated', '\x04'::bytea) AS claimed,
       dedup_claim('svc', 'updated', '\x04'::bytea) AS duplicate,
       dedup_claim_many('svc', ARRAY['v1.0', 'many']) AS many,
       dedup_try_claim('svc', 'try', '\x05'::bytea) AS try;
SELECT dedup_claim('svc', 'updated', '\x06'::bytea);
\echo :SQLSTATE
SELECT seen FROM dedup_seen('svc', 'updated');
SELECT dedup_forget('svc', 'many') AS forgotten;
SELECT message_id, fingerprint FROM processed_messages ORDER BY message_id;
-- from 1.1 on, the fingerprint column must be there
ALTER TABLE processed_messages DROP COLUMN fingerprint;
SELECT dedup_claim('svc', 'no-fingerprint');
\echo :SQLSTATE
ALTER TABLE processed_messages ADD COLUMN fingerprint bytea;
SELECT dedup_claim('svc', 'fingerprint-again', '\x07'::bytea) AS claimed;
SELECT message_id, fingerprint FROM processed_messages ORDER BY message_id;

DROP EXTENSION dedup;
