/* sql/dedup--1.4--1.5.sql: from dedup 1.4 to 1.5 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION dedup UPDATE TO '1.5'" to load this file. \quit

/*
 * The same rules as the earlier scripts: everything schema-qualified, every
 * literal in a function body or view cast to its schema-qualified type, no
 * OR REPLACE but for the extension's own functions, no IF NOT EXISTS; and
 * every object a section creates is named in the list of the guard below.
 * A parameter of a SQL function that has the name of a column is written
 * qualified with its function's name: in a SQL function the column would
 * win.
 */

/*
 * Before anything changes: no object that this script creates may already
 * be in the extension's schema without being dedup's.  Whoever may create
 * in that schema (since PostgreSQL 15 the database owner owns public) could
 * have planted one, and the script would stop at it with PostgreSQL's own
 * error, which says neither whose it is nor what to do; this one names the
 * object and its owner.  Each line of the list is a kind and a name, one
 * for every object created below: a table, view or type collides with a
 * relation or a type of its name, an index with a relation, a function
 * with one of the same argument types (schema-qualified, no spaces).
 * Everything is looked up schema-qualified, nothing through search_path.
 */
DO LANGUAGE plpgsql $guard$
DECLARE
	planted record;
BEGIN
	SELECT o.sqlstate, i.type, i.identity, w.kind, w.name, s.nspname,
		   pg_catalog.pg_get_userbyid(o.owner) AS owner
	  INTO planted
	  FROM pg_catalog.pg_extension e
	  JOIN pg_catalog.pg_namespace s ON s.oid OPERATOR(pg_catalog.=) e.extnamespace
	 CROSS JOIN pg_catalog.unnest(ARRAY[
			'table dedup_outbox_signing_key',
			'table dedup_outbox_dead_letters',
			'index dedup_outbox_dead_letters_pkey',
			'function dedup_outbox_refused(pg_catalog.text,pg_catalog.int8[],pg_catalog.text)',
			'function dedup_outbox_refused_wal(pg_catalog.text,pg_catalog.text,pg_catalog.text,pg_catalog.text,pg_catalog.jsonb,pg_catalog.text,pg_catalog.int4,pg_catalog.text)',
			'function dedup_outbox_audit_retry(pg_catalog.text,pg_catalog.int8)',
			'function dedup_outbox_retry(pg_catalog.text)'
		 ]::pg_catalog.text[]) AS n(object)
	 CROSS JOIN LATERAL (SELECT pg_catalog.split_part(n.object, ' '::pg_catalog.text, 1) AS kind,
								pg_catalog.split_part(n.object, ' '::pg_catalog.text, 2) AS name) AS w
	 CROSS JOIN LATERAL pg_catalog.format('%I.%s'::pg_catalog.text, s.nspname, w.name) AS q(name)
	 CROSS JOIN LATERAL (
		SELECT '42P07'::pg_catalog.text, 'pg_catalog.pg_class'::pg_catalog.regclass, c.oid, c.relowner
		  FROM pg_catalog.pg_class c
		 WHERE c.oid OPERATOR(pg_catalog.=)
			   CASE WHEN w.kind OPERATOR(pg_catalog.<>) 'function'::pg_catalog.text
					THEN pg_catalog.to_regclass(q.name) END
		UNION ALL
		SELECT '42710'::pg_catalog.text, 'pg_catalog.pg_type'::pg_catalog.regclass, t.oid, t.typowner
		  FROM pg_catalog.pg_type t
		 WHERE t.oid OPERATOR(pg_catalog.=)
			   CASE WHEN w.kind OPERATOR(pg_catalog.<>) ALL ('{function,index}'::pg_catalog.text[])
					THEN pg_catalog.to_regtype(q.name) END
		   AND t.typrelid OPERATOR(pg_catalog.=) 0::pg_catalog.oid
		UNION ALL
		SELECT '42710'::pg_catalog.text, 'pg_catalog.pg_proc'::pg_catalog.regclass, p.oid, p.proowner
		  FROM pg_catalog.pg_proc p
		 WHERE p.oid OPERATOR(pg_catalog.=)
			   CASE WHEN w.kind OPERATOR(pg_catalog.=) 'function'::pg_catalog.text
					THEN pg_catalog.to_regprocedure(q.name) END
		) AS o(sqlstate, classid, objid, owner)
	 CROSS JOIN LATERAL pg_catalog.pg_identify_object(o.classid, o.objid, 0) AS i
	 WHERE e.extname OPERATOR(pg_catalog.=) 'dedup'::pg_catalog.name
	   AND NOT EXISTS (SELECT FROM pg_catalog.pg_depend d
						WHERE d.classid OPERATOR(pg_catalog.=) o.classid
						  AND d.objid OPERATOR(pg_catalog.=) o.objid
						  AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
						  AND d.refobjid OPERATOR(pg_catalog.=) e.oid
						  AND d.deptype OPERATOR(pg_catalog.=) 'e'::pg_catalog.char)
	 LIMIT 1;
	IF FOUND THEN
		RAISE EXCEPTION USING
			ERRCODE = planted.sqlstate,
			MESSAGE = pg_catalog.format('%s %s already exists and is not a member of extension "dedup"'::pg_catalog.text,
										planted.type, planted.identity),
			DETAIL = pg_catalog.format('dedup 1.5 creates %s %s in schema %s; the one there is owned by role "%s".'::pg_catalog.text,
									   planted.kind,
									   pg_catalog.split_part(planted.name, '('::pg_catalog.text, 1),
									   pg_catalog.quote_ident(planted.nspname), planted.owner),
			HINT = 'Drop or rename it, then run ALTER EXTENSION dedup UPDATE (or CREATE EXTENSION) again. A schema that only the extension''s owner can create in, as in the README''s install steps, admits no such object.'::pg_catalog.text;
	END IF;
END;
$guard$;

/* --- the outbox: WAL-mode messages signed --- */

/*
 * The key that signs the messages of WAL-mode destinations: dedup_publish()
 * puts an HMAC-SHA256 of each message, with its transaction's id, in front
 * of it, and the relay sends only what it can verify, so that nobody who
 * can emit a logical decoding message (pg_logical_emit_message) can make
 * the relay send one.  One row, made at CREATE EXTENSION; never dumped (a
 * restored database makes a key of its own).  Readable by nobody but its
 * owner: a relay in WAL mode is granted SELECT on it.  A change reaches
 * every backend's cache as a change of the destinations does.
 */
CREATE TABLE @extschema@.dedup_outbox_signing_key (
	key bytea NOT NULL,
	CONSTRAINT dedup_outbox_signing_key_length
		CHECK (pg_catalog.octet_length(key) OPERATOR(pg_catalog.=) 32)
);
COMMENT ON TABLE @extschema@.dedup_outbox_signing_key IS
	'dedup: the key that signs the messages of WAL-mode destinations; readable only by the relay''s role';
INSERT INTO @extschema@.dedup_outbox_signing_key (key)
SELECT pg_catalog.sha256(pg_catalog.uuid_send(pg_catalog.gen_random_uuid())
						 OPERATOR(pg_catalog.||)
						 pg_catalog.uuid_send(pg_catalog.gen_random_uuid()));
CREATE TRIGGER dedup_outbox_signing_key_changed
	AFTER INSERT OR UPDATE OR DELETE ON @extschema@.dedup_outbox_signing_key
	FOR EACH ROW EXECUTE FUNCTION @extschema@.dedup_consumer_roles_changed();
CREATE TRIGGER dedup_outbox_signing_key_truncated
	AFTER TRUNCATE ON @extschema@.dedup_outbox_signing_key
	FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.dedup_consumer_roles_changed();
ALTER TABLE @extschema@.dedup_outbox_signing_key
	ENABLE ALWAYS TRIGGER dedup_outbox_signing_key_changed,
	ENABLE ALWAYS TRIGGER dedup_outbox_signing_key_truncated;
REVOKE ALL ON TABLE @extschema@.dedup_outbox_signing_key FROM PUBLIC;

/* --- the outbox: messages the broker refuses, moved aside --- */

/*
 * Messages the broker refused dedup.outbox_max_attempts times (no queue
 * for their destination, a nack again and again), moved aside by the
 * relay (dedup_outbox_refused) so that they stop taking its time and stop
 * holding back the later messages of their key.  seq is the one they had
 * in dedup_outbox (NULL for a message of WAL mode, which was never a row:
 * dedup_outbox_refused_wal).  An operator sends one again with
 * dedup_outbox_retry().  pg_dump keeps them.
 */
CREATE TABLE @extschema@.dedup_outbox_dead_letters (
	message_id text NOT NULL,
	seq bigint,
	destination text NOT NULL,
	key text,
	headers jsonb,
	payload text NOT NULL,
	created_at timestamptz NOT NULL,
	attempts integer NOT NULL,
	dead_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	reason text NOT NULL,
	CONSTRAINT dedup_outbox_dead_letters_pkey PRIMARY KEY (message_id)
);
COMMENT ON TABLE @extschema@.dedup_outbox_dead_letters IS
	'dedup: outbox messages the broker refused dedup.outbox_max_attempts times, moved aside; dedup_outbox_retry() sends one again';
SELECT pg_catalog.pg_extension_config_dump(c.oid::pg_catalog.regclass, ''::pg_catalog.text)
  FROM pg_catalog.pg_class c
 WHERE c.relnamespace OPERATOR(pg_catalog.=)
	   (SELECT e.extnamespace FROM pg_catalog.pg_extension e
		 WHERE e.extname OPERATOR(pg_catalog.=) 'dedup'::pg_catalog.name)
   AND c.relname OPERATOR(pg_catalog.=) 'dedup_outbox_dead_letters'::pg_catalog.name;

/*
 * dedup_outbox_refused(relay, seqs, reason): the broker refused the
 * messages seqs that relay leased (returned them, nacked them): their
 * leases are given back, and those leased dedup.outbox_max_attempts times
 * or more (0: never) are moved to dedup_outbox_dead_letters with reason;
 * returns how many were moved.  A relay gives back with
 * dedup_outbox_release() what it did not send (an outage, the later
 * messages of a key), which counts nothing.
 */
CREATE FUNCTION @extschema@.dedup_outbox_refused(relay text, seqs bigint[], reason text)
RETURNS bigint
LANGUAGE sql VOLATILE SECURITY DEFINER
SET jit = off
BEGIN ATOMIC
	SELECT @extschema@.dedup_outbox_valid(dedup_outbox_refused.relay, 'relay'::pg_catalog.text,
										  'dedup_outbox_refused'::pg_catalog.text);
	WITH settings AS (
		SELECT pg_catalog.current_setting('dedup.outbox_max_attempts'::pg_catalog.text)::pg_catalog.int4 AS max_attempts),
	dead AS (
		DELETE FROM @extschema@.dedup_outbox o
		 USING settings s
		 WHERE o.seq OPERATOR(pg_catalog.=) ANY (dedup_outbox_refused.seqs)
		   AND o.sent_at IS NULL
		   AND o.lease_holder OPERATOR(pg_catalog.=) dedup_outbox_refused.relay
		   AND o.lease_until IS NOT NULL
		   AND s.max_attempts OPERATOR(pg_catalog.>) 0
		   AND o.attempts OPERATOR(pg_catalog.>=) s.max_attempts
		RETURNING o.message_id, o.seq, o.destination, o.key, o.headers,
				  o.payload, o.created_at, o.attempts),
	moved AS (
		INSERT INTO @extschema@.dedup_outbox_dead_letters AS l
			   (message_id, seq, destination, key, headers, payload, created_at,
				attempts, reason)
		SELECT d.message_id, d.seq, d.destination, d.key, d.headers, d.payload,
			   d.created_at, d.attempts,
			   COALESCE(dedup_outbox_refused.reason, 'refused by the broker'::pg_catalog.text)
		  FROM dead d
		RETURNING 1),
	released AS (
		UPDATE @extschema@.dedup_outbox o
		   SET lease_until = NULL::pg_catalog.timestamptz
		  FROM settings s
		 WHERE o.seq OPERATOR(pg_catalog.=) ANY (dedup_outbox_refused.seqs)
		   AND o.sent_at IS NULL
		   AND o.lease_holder OPERATOR(pg_catalog.=) dedup_outbox_refused.relay
		   AND o.lease_until IS NOT NULL
		   AND (s.max_attempts OPERATOR(pg_catalog.=) 0
				OR o.attempts OPERATOR(pg_catalog.<) s.max_attempts)
		RETURNING 1)
	SELECT pg_catalog.count(*) FROM moved;
END;

/*
 * dedup_outbox_refused_wal(relay, message_id, destination, key, headers,
 * payload, attempts, reason): the broker refused a WAL-mode message for
 * the attempts-th time, as relay counts them: at dedup.outbox_max_attempts
 * (0: never) it is written to dedup_outbox_dead_letters with reason (no
 * seq: it was never a row), so that relay may confirm the slot past it;
 * returns whether it is a dead letter now.  dedup_outbox_retry() brings it
 * back as a row of dedup_outbox, which a table-mode relay sends.
 */
CREATE FUNCTION @extschema@.dedup_outbox_refused_wal(relay text, message_id text,
													 destination text, key text,
													 headers jsonb, payload text,
													 attempts integer, reason text)
RETURNS boolean
LANGUAGE sql VOLATILE SECURITY DEFINER
SET jit = off
BEGIN ATOMIC
	SELECT @extschema@.dedup_outbox_valid(dedup_outbox_refused_wal.relay, 'relay'::pg_catalog.text,
										  'dedup_outbox_refused_wal'::pg_catalog.text);
	WITH settings AS (
		SELECT pg_catalog.current_setting('dedup.outbox_max_attempts'::pg_catalog.text)::pg_catalog.int4 AS max_attempts),
	due AS (
		SELECT s.max_attempts OPERATOR(pg_catalog.>) 0
			   AND dedup_outbox_refused_wal.attempts OPERATOR(pg_catalog.>=) s.max_attempts AS dead
		  FROM settings s),
	moved AS (
		INSERT INTO @extschema@.dedup_outbox_dead_letters AS l
			   (message_id, destination, key, headers, payload, created_at,
				attempts, reason)
		SELECT dedup_outbox_refused_wal.message_id, dedup_outbox_refused_wal.destination,
			   dedup_outbox_refused_wal.key, dedup_outbox_refused_wal.headers,
			   dedup_outbox_refused_wal.payload, pg_catalog.now(),
			   dedup_outbox_refused_wal.attempts,
			   COALESCE(dedup_outbox_refused_wal.reason, 'refused by the broker'::pg_catalog.text)
		  FROM due d
		 WHERE d.dead
		ON CONFLICT (message_id) DO NOTHING
		RETURNING 1)
	SELECT d.dead FROM due d;
END;

/*
 * dedup_outbox_retry(message_id): move a dead letter back into the outbox,
 * to be sent again (after what its key published since: a new seq, its
 * attempts from 0); true if there was one.  For operators: every call is in
 * the server log, which dedup_outbox_audit_retry() writes.
 */
CREATE FUNCTION @extschema@.dedup_outbox_audit_retry(message_id text, seq bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'dedup_outbox_audit_retry'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.dedup_outbox_retry(message_id text)
RETURNS boolean
LANGUAGE sql VOLATILE SECURITY DEFINER
BEGIN ATOMIC
	WITH back AS (
		DELETE FROM @extschema@.dedup_outbox_dead_letters l
		 WHERE l.message_id OPERATOR(pg_catalog.=) dedup_outbox_retry.message_id
		RETURNING l.message_id, l.destination, l.key, l.headers, l.payload,
				  l.created_at),
	unsent AS (
		INSERT INTO @extschema@.dedup_outbox AS o
			   (message_id, destination, key, headers, payload, created_at)
		SELECT b.message_id, b.destination, b.key, b.headers, b.payload,
			   b.created_at
		  FROM back b
		ON CONFLICT (message_id) DO NOTHING
		RETURNING o.seq)
	SELECT @extschema@.dedup_outbox_audit_retry(dedup_outbox_retry.message_id,
												(SELECT u.seq FROM unsent u));
END;

CREATE OR REPLACE VIEW @extschema@.dedup_outbox_backlog AS
	SELECT d.destination,
		   d.mode,
		   u.unsent,
		   u.leased,
		   u.oldest_unsent_at,
		   pg_catalog.now() OPERATOR(pg_catalog.-) u.oldest_unsent_at AS oldest_unsent_age,
		   u.max_attempts,
		   (SELECT pg_catalog.count(*) FROM @extschema@.dedup_outbox s
			 WHERE s.sent_at OPERATOR(pg_catalog.>)
				   (pg_catalog.now() OPERATOR(pg_catalog.-) '1 minute'::pg_catalog.interval)
			   AND s.destination OPERATOR(pg_catalog.=) d.destination) AS sent_last_minute,
		   (SELECT pg_catalog.max(s.sent_at) FROM @extschema@.dedup_outbox s
			 WHERE s.sent_at IS NOT NULL
			   AND s.destination OPERATOR(pg_catalog.=) d.destination) AS last_sent_at,
		   @extschema@.dedup_outbox_retention() AS retention,
		   (SELECT pg_catalog.count(*) FROM @extschema@.dedup_outbox_dead_letters l
			 WHERE l.destination OPERATOR(pg_catalog.=) d.destination) AS dead_letters
	  FROM @extschema@.dedup_outbox_destinations d
	 CROSS JOIN LATERAL (
		SELECT pg_catalog.count(*) AS unsent,
			   pg_catalog.count(*) FILTER (WHERE o.lease_until OPERATOR(pg_catalog.>) pg_catalog.now()) AS leased,
			   pg_catalog.min(o.created_at) AS oldest_unsent_at,
			   COALESCE(pg_catalog.max(o.attempts), 0) AS max_attempts
		  FROM @extschema@.dedup_outbox o
		 WHERE o.sent_at IS NULL
		   AND o.destination OPERATOR(pg_catalog.=) d.destination) u;
COMMENT ON VIEW @extschema@.dedup_outbox_backlog IS
	'dedup: per outbox destination, unsent and leased messages, the oldest unsent one''s age, what was sent lately, and the dead letters';

REVOKE ALL ON TABLE @extschema@.dedup_outbox_dead_letters FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_outbox_refused(text, bigint[], text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_outbox_refused_wal(text, text, text, text, jsonb, text, integer, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_outbox_audit_retry(text, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_outbox_retry(text) FROM PUBLIC;
