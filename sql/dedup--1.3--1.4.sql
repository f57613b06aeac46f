/* sql/dedup--1.3--1.4.sql: from dedup 1.3 to 1.4 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION dedup UPDATE TO '1.4'" to load this file. \quit

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
			'table dedup_outbox_destinations',
			'index dedup_outbox_destinations_pkey',
			'table dedup_outbox_publishers',
			'index dedup_outbox_publishers_pkey',
			'table dedup_outbox',
			'sequence dedup_outbox_seq_seq',
			'index dedup_outbox_pkey',
			'index dedup_outbox_unsent_idx',
			'index dedup_outbox_key_idx',
			'index dedup_outbox_sent_idx',
			'function dedup_outbox_valid(pg_catalog.text,pg_catalog.text,pg_catalog.text)',
			'function dedup_add_destination(pg_catalog.text,pg_catalog.text)',
			'function dedup_outbox_drop_messages(pg_catalog.text,pg_catalog.bool)',
			'function dedup_drop_destination(pg_catalog.text,pg_catalog.bool)',
			'function dedup_allow_publisher(pg_catalog.text,pg_catalog.regrole)',
			'function dedup_disallow_publisher(pg_catalog.text,pg_catalog.regrole)',
			'function dedup_publish(pg_catalog.text,pg_catalog.text,pg_catalog.text,pg_catalog.jsonb)',
			'function dedup_outbox_valid_lease(pg_catalog.text,pg_catalog.int4,pg_catalog.interval)',
			'function dedup_outbox_lease(pg_catalog.text,pg_catalog.int4,pg_catalog.interval,pg_catalog.text[])',
			'function dedup_outbox_sent(pg_catalog.text,pg_catalog.int8[])',
			'function dedup_outbox_release(pg_catalog.text,pg_catalog.int8[])',
			'function dedup_outbox_audit_resend(pg_catalog.text,pg_catalog.int8)',
			'function dedup_outbox_resend(pg_catalog.text)',
			'function dedup_outbox_sweep()',
			'function dedup_outbox_retention()',
			'view dedup_outbox_backlog',
			'view dedup_outbox_slots'
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
			DETAIL = pg_catalog.format('dedup 1.4 creates %s %s in schema %s; the one there is owned by role "%s".'::pg_catalog.text,
									   planted.kind,
									   pg_catalog.split_part(planted.name, '('::pg_catalog.text, 1),
									   pg_catalog.quote_ident(planted.nspname), planted.owner),
			HINT = 'Drop or rename it, then run ALTER EXTENSION dedup UPDATE (or CREATE EXTENSION) again. A schema that only the extension''s owner can create in, as in the README''s install steps, admits no such object.'::pg_catalog.text;
	END IF;
END;
$guard$;

/* --- the outbox: messages published in the caller's transaction --- */

/*
 * Where messages go, and how they leave: 'table' (a row in dedup_outbox
 * that a relay leases, sends and marks sent) or 'wal' (a transactional
 * logical decoding message with prefix 'dedup', read by a logical
 * replication client; nothing is stored).  A destination is the name the
 * relay routes by (with RabbitMQ, the queue).  Configuration: kept by
 * pg_dump.
 */
CREATE TABLE @extschema@.dedup_outbox_destinations (
	destination text NOT NULL,
	mode text NOT NULL DEFAULT 'table'::pg_catalog.text,
	created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	CONSTRAINT dedup_outbox_destinations_pkey PRIMARY KEY (destination),
	CONSTRAINT dedup_outbox_destinations_mode
		CHECK (mode OPERATOR(pg_catalog.=) ANY ('{table,wal}'::pg_catalog.text[]))
);
COMMENT ON TABLE @extschema@.dedup_outbox_destinations IS
	'dedup: the destinations dedup_publish() accepts, and how their messages leave (table or wal)';
SELECT pg_catalog.pg_extension_config_dump(c.oid::pg_catalog.regclass, ''::pg_catalog.text)
  FROM pg_catalog.pg_class c
 WHERE c.relnamespace OPERATOR(pg_catalog.=)
	   (SELECT e.extnamespace FROM pg_catalog.pg_extension e
		 WHERE e.extname OPERATOR(pg_catalog.=) 'dedup'::pg_catalog.name)
   AND c.relname OPERATOR(pg_catalog.=) 'dedup_outbox_destinations'::pg_catalog.name;

/*
 * Who may publish where: when a destination has rows here, only members of
 * those roles may publish to it (superusers are members of every role);
 * one without rows is open to every role with EXECUTE on dedup_publish.
 * Like the claimant mapping, a row of a dropped role maps nothing and is
 * left out of dumps.
 */
CREATE TABLE @extschema@.dedup_outbox_publishers (
	destination text NOT NULL,
	publisher regrole NOT NULL,
	CONSTRAINT dedup_outbox_publishers_pkey PRIMARY KEY (destination, publisher)
);
/*
 * Every backend keeps the destinations it publishes to, with their modes
 * and publishers: a change of either table must reach them however it is
 * made.  The function of dedup_consumer_roles' triggers invalidates the
 * relcache entry of its table, which empties their caches; ENABLE ALWAYS,
 * for each row and for TRUNCATE, as there.
 */
CREATE TRIGGER dedup_outbox_destinations_changed
	AFTER INSERT OR UPDATE OR DELETE ON @extschema@.dedup_outbox_destinations
	FOR EACH ROW EXECUTE FUNCTION @extschema@.dedup_consumer_roles_changed();
CREATE TRIGGER dedup_outbox_destinations_truncated
	AFTER TRUNCATE ON @extschema@.dedup_outbox_destinations
	FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.dedup_consumer_roles_changed();
CREATE TRIGGER dedup_outbox_publishers_changed
	AFTER INSERT OR UPDATE OR DELETE ON @extschema@.dedup_outbox_publishers
	FOR EACH ROW EXECUTE FUNCTION @extschema@.dedup_consumer_roles_changed();
CREATE TRIGGER dedup_outbox_publishers_truncated
	AFTER TRUNCATE ON @extschema@.dedup_outbox_publishers
	FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.dedup_consumer_roles_changed();
ALTER TABLE @extschema@.dedup_outbox_destinations
	ENABLE ALWAYS TRIGGER dedup_outbox_destinations_changed,
	ENABLE ALWAYS TRIGGER dedup_outbox_destinations_truncated;
ALTER TABLE @extschema@.dedup_outbox_publishers
	ENABLE ALWAYS TRIGGER dedup_outbox_publishers_changed,
	ENABLE ALWAYS TRIGGER dedup_outbox_publishers_truncated;

COMMENT ON TABLE @extschema@.dedup_outbox_publishers IS
	'dedup: which roles may publish to a destination; a destination without a row is open to every role with EXECUTE on dedup_publish';
SELECT pg_catalog.pg_extension_config_dump(c.oid::pg_catalog.regclass,
		'WHERE publisher OPERATOR(pg_catalog.=) ANY (SELECT a.oid FROM pg_catalog.pg_roles a)'::pg_catalog.text)
  FROM pg_catalog.pg_class c
 WHERE c.relnamespace OPERATOR(pg_catalog.=)
	   (SELECT e.extnamespace FROM pg_catalog.pg_extension e
		 WHERE e.extname OPERATOR(pg_catalog.=) 'dedup'::pg_catalog.name)
   AND c.relname OPERATOR(pg_catalog.=) 'dedup_outbox_publishers'::pg_catalog.name;

/*
 * The messages of table-mode destinations.  seq is the order of the
 * dedup_publish() calls, which a relay keeps per (destination, key);
 * message_id is what the next hop claims.  A relay leases unsent messages
 * (lease_until, lease_holder, attempts) and marks them sent (sent_at) once
 * its broker has confirmed them; the retention worker deletes sent
 * messages after dedup.outbox_retention, never an unsent one.  The indexes:
 * the key (message_id: a message published again is not written twice),
 * the unsent messages in order (the leases, and the relay's calls by seq),
 * per key (the order check), and the sent ones by time (the sweep); a
 * publish writes the first two, and the third for a keyed message.  Leases
 * change no indexed column:
 * fillfactor 80 leaves room for them to be HOT updates.  pg_dump keeps the
 * unsent messages.
 */
CREATE TABLE @extschema@.dedup_outbox (
	seq bigint GENERATED ALWAYS AS IDENTITY,
	message_id text NOT NULL,
	destination text NOT NULL,
	key text,
	headers jsonb,
	payload text NOT NULL,
	created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	lease_until timestamptz,
	lease_holder text,
	attempts integer NOT NULL DEFAULT 0,
	sent_at timestamptz,
	CONSTRAINT dedup_outbox_pkey PRIMARY KEY (message_id)
) WITH (fillfactor = 80,
		autovacuum_vacuum_scale_factor = 0.02,
		autovacuum_analyze_scale_factor = 0.02);
CREATE INDEX dedup_outbox_unsent_idx ON @extschema@.dedup_outbox (seq)
	WHERE sent_at IS NULL;
CREATE INDEX dedup_outbox_key_idx ON @extschema@.dedup_outbox (destination, key, seq)
	WHERE sent_at IS NULL AND key IS NOT NULL;
CREATE INDEX dedup_outbox_sent_idx ON @extschema@.dedup_outbox (sent_at)
	WHERE sent_at IS NOT NULL;
COMMENT ON TABLE @extschema@.dedup_outbox IS
	'dedup: messages published to table-mode destinations (written by dedup_publish, sent by a relay)';
SELECT pg_catalog.pg_extension_config_dump(c.oid::pg_catalog.regclass,
		'WHERE sent_at IS NULL'::pg_catalog.text)
  FROM pg_catalog.pg_class c
 WHERE c.relnamespace OPERATOR(pg_catalog.=)
	   (SELECT e.extnamespace FROM pg_catalog.pg_extension e
		 WHERE e.extname OPERATOR(pg_catalog.=) 'dedup'::pg_catalog.name)
   AND c.relname OPERATOR(pg_catalog.=) 'dedup_outbox'::pg_catalog.name;
/* and the position of its seq, which restored rows must not meet again */
SELECT pg_catalog.pg_extension_config_dump(d.objid::pg_catalog.regclass, ''::pg_catalog.text)
  FROM pg_catalog.pg_depend d
  JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) d.refobjid
  JOIN pg_catalog.pg_class q ON q.oid OPERATOR(pg_catalog.=) d.objid
 WHERE q.relkind OPERATOR(pg_catalog.=) 'S'::pg_catalog.char
   AND d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
   AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
   AND d.deptype OPERATOR(pg_catalog.=) 'i'::pg_catalog.char
   AND c.relnamespace OPERATOR(pg_catalog.=)
	   (SELECT e.extnamespace FROM pg_catalog.pg_extension e
		 WHERE e.extname OPERATOR(pg_catalog.=) 'dedup'::pg_catalog.name)
   AND c.relname OPERATOR(pg_catalog.=) 'dedup_outbox'::pg_catalog.name;

/*
 * dedup_outbox_valid(value, argument, function): value, or the error a
 * caller of function must see when argument value is NULL (22004), empty
 * or longer than 255 bytes (22023): destination and relay names.
 */
CREATE FUNCTION @extschema@.dedup_outbox_valid(value text, argument text, function_name text)
RETURNS text
AS 'MODULE_PATHNAME', 'dedup_outbox_valid'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

/* dedup_add_destination(destination [, mode]): accept it, or change its mode */
CREATE FUNCTION @extschema@.dedup_add_destination(destination text,
												  mode text DEFAULT 'table'::pg_catalog.text)
RETURNS void
LANGUAGE sql VOLATILE
BEGIN ATOMIC
	INSERT INTO @extschema@.dedup_outbox_destinations AS d (destination, mode)
		 VALUES (@extschema@.dedup_outbox_valid(dedup_add_destination.destination,
												'destination'::pg_catalog.text,
												'dedup_add_destination'::pg_catalog.text),
				 dedup_add_destination.mode)
	ON CONFLICT (destination) DO UPDATE SET mode = excluded.mode;
END;

/*
 * dedup_drop_destination(destination [, force]): no more publishing to it,
 * and its mapping gone; true if it existed.  Refused while it has unsent
 * messages, unless force, which deletes them unsent.
 */
/*
 * Its first step: waits for the transactions publishing, holds new ones
 * back, and deletes the destination's unsent messages (refused while there
 * are any, unless force); not a statement of its own, see publish.c
 */
CREATE FUNCTION @extschema@.dedup_outbox_drop_messages(destination text, force boolean)
RETURNS bigint
AS 'MODULE_PATHNAME', 'dedup_outbox_drop_messages'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.dedup_drop_destination(destination text,
												   force boolean DEFAULT false)
RETURNS boolean
LANGUAGE sql VOLATILE
BEGIN ATOMIC
	SELECT @extschema@.dedup_outbox_drop_messages(dedup_drop_destination.destination,
												  dedup_drop_destination.force);
	DELETE FROM @extschema@.dedup_outbox_publishers p
	 WHERE p.destination OPERATOR(pg_catalog.=) dedup_drop_destination.destination;
	WITH dropped AS (
		DELETE FROM @extschema@.dedup_outbox_destinations d
		 WHERE d.destination OPERATOR(pg_catalog.=) dedup_drop_destination.destination
		RETURNING 1)
	SELECT pg_catalog.count(*) OPERATOR(pg_catalog.>) 0::pg_catalog.int8 FROM dropped;
END;

/* dedup_allow_publisher(destination, role): role (and its members) may publish to it */
CREATE FUNCTION @extschema@.dedup_allow_publisher(destination text, publisher regrole)
RETURNS void
LANGUAGE sql VOLATILE
BEGIN ATOMIC
	INSERT INTO @extschema@.dedup_outbox_publishers (destination, publisher)
		 VALUES (@extschema@.dedup_outbox_valid(dedup_allow_publisher.destination,
												'destination'::pg_catalog.text,
												'dedup_allow_publisher'::pg_catalog.text),
				 dedup_allow_publisher.publisher)
	ON CONFLICT (destination, publisher) DO NOTHING;
END;

/* dedup_disallow_publisher(destination, role): undo it; true if it was allowed */
CREATE FUNCTION @extschema@.dedup_disallow_publisher(destination text, publisher regrole)
RETURNS boolean
LANGUAGE sql VOLATILE
BEGIN ATOMIC
	SELECT @extschema@.dedup_outbox_valid(dedup_disallow_publisher.destination,
										  'destination'::pg_catalog.text,
										  'dedup_disallow_publisher'::pg_catalog.text);
	WITH deleted AS (
		DELETE FROM @extschema@.dedup_outbox_publishers p
		 WHERE p.destination OPERATOR(pg_catalog.=) dedup_disallow_publisher.destination
		   AND p.publisher OPERATOR(pg_catalog.=) dedup_disallow_publisher.publisher
		RETURNING 1)
	SELECT pg_catalog.count(*) OPERATOR(pg_catalog.>) 0::pg_catalog.int8 FROM deleted;
END;

/*
 * dedup_publish(destination, payload [, key [, headers]]): publish a
 * message in the caller's transaction (commit keeps it, rollback keeps
 * nothing) and return its id.  Published while the transaction's latest
 * successful claim is alive, the id is derived from that claim (consumer,
 * message id), the destination and the publish's place since the claim,
 * so handling the same message again publishes the same ids; otherwise it
 * is random.  It runs as its caller (the publisher mapping is checked for
 * the caller) and writes dedup_outbox as the table's owner.
 */
CREATE FUNCTION @extschema@.dedup_publish(destination text, payload text,
										  key text DEFAULT NULL::pg_catalog.text,
										  headers jsonb DEFAULT NULL::pg_catalog.jsonb)
RETURNS text
AS 'MODULE_PATHNAME', 'dedup_publish'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.dedup_publish(text, text, text, jsonb) IS
	'dedup: publish a message in this transaction; returns its id (derived from the transaction''s claim, if any)';

/* --- the relay's calls (table mode): EXECUTE for nobody by default --- */

/* the arguments of a lease, or the error its caller must see */
CREATE FUNCTION @extschema@.dedup_outbox_valid_lease(relay text, max_messages integer,
													 lease interval)
RETURNS boolean
AS 'MODULE_PATHNAME', 'dedup_outbox_valid_lease'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

/*
 * The relay's calls run without JIT: planned again at each call, a lease
 * whose estimated cost passes jit_above_cost (a table with statistics) spent
 * about 20 ms compiling for every 100 messages, ten times its work.
 *
 * dedup_outbox_lease(relay [, max_messages [, lease [, destinations]]]):
 * lease up to max_messages unsent messages (of the given destinations) to
 * relay for lease, in seq order.  Messages leased to a live lease, or
 * locked by another relay's lease right now, are skipped (SKIP LOCKED);
 * a message whose key has an earlier unsent message that neither this call
 * leases too nor relay holds on a live lease waits for it (the order per
 * destination and key: a relay sends its leases in seq order, and gives
 * back a key's later leases with an earlier one).  An expired lease is
 * leasable again; each lease counts an attempt.
 */
CREATE FUNCTION @extschema@.dedup_outbox_lease(relay text,
											   max_messages integer DEFAULT 100,
											   lease interval DEFAULT '30 seconds'::pg_catalog.interval,
											   destinations text[] DEFAULT NULL::pg_catalog.text[])
RETURNS TABLE (seq bigint, message_id text, destination text, key text,
			   headers jsonb, payload text, created_at timestamptz,
			   attempts integer)
LANGUAGE sql VOLATILE SECURITY DEFINER ROWS 100
SET jit = off
BEGIN ATOMIC
	SELECT @extschema@.dedup_outbox_valid_lease(dedup_outbox_lease.relay,
												dedup_outbox_lease.max_messages,
												dedup_outbox_lease.lease);
	WITH candidates AS MATERIALIZED (
		SELECT o.seq, o.destination, o.key
		  FROM @extschema@.dedup_outbox o
		 WHERE o.sent_at IS NULL
		   AND (o.lease_until IS NULL OR o.lease_until OPERATOR(pg_catalog.<=) pg_catalog.now())
		   AND (dedup_outbox_lease.destinations IS NULL
				OR o.destination OPERATOR(pg_catalog.=) ANY (dedup_outbox_lease.destinations))
		 ORDER BY o.seq
		 LIMIT dedup_outbox_lease.max_messages
		   FOR UPDATE SKIP LOCKED),
	in_order AS (
		SELECT c.seq
		  FROM candidates c
		 WHERE c.key IS NULL
			OR NOT EXISTS (
				SELECT FROM @extschema@.dedup_outbox e
				 WHERE e.destination OPERATOR(pg_catalog.=) c.destination
				   AND e.key OPERATOR(pg_catalog.=) c.key
				   AND e.sent_at IS NULL
				   AND e.seq OPERATOR(pg_catalog.<) c.seq
				   AND (e.lease_holder OPERATOR(pg_catalog.=) dedup_outbox_lease.relay
						AND e.lease_until OPERATOR(pg_catalog.>) pg_catalog.now()) IS NOT TRUE
				   AND NOT EXISTS (SELECT FROM candidates b
									WHERE b.seq OPERATOR(pg_catalog.=) e.seq))),
	leased AS (
		UPDATE @extschema@.dedup_outbox o
		   SET lease_until = pg_catalog.now() OPERATOR(pg_catalog.+) dedup_outbox_lease.lease,
			   lease_holder = dedup_outbox_lease.relay,
			   attempts = o.attempts OPERATOR(pg_catalog.+) 1
		 WHERE o.seq OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT i.seq FROM in_order i))
		   AND o.sent_at IS NULL
		RETURNING o.seq, o.message_id, o.destination, o.key, o.headers,
				  o.payload, o.created_at, o.attempts)
	SELECT l.seq, l.message_id, l.destination, l.key, l.headers, l.payload,
		   l.created_at, l.attempts
	  FROM leased l
	 ORDER BY l.seq;
END;

/*
 * dedup_outbox_sent(relay, seqs): the messages seqs that relay leased are
 * sent (its broker confirmed them); returns how many were marked.  A
 * message another relay has leased since is left to it.
 */
CREATE FUNCTION @extschema@.dedup_outbox_sent(relay text, seqs bigint[])
RETURNS bigint
LANGUAGE sql VOLATILE SECURITY DEFINER
SET jit = off
BEGIN ATOMIC
	SELECT @extschema@.dedup_outbox_valid(dedup_outbox_sent.relay, 'relay'::pg_catalog.text,
										  'dedup_outbox_sent'::pg_catalog.text);
	WITH marked AS (
		UPDATE @extschema@.dedup_outbox o
		   SET sent_at = pg_catalog.now(), lease_until = NULL::pg_catalog.timestamptz
		 WHERE o.seq OPERATOR(pg_catalog.=) ANY (dedup_outbox_sent.seqs)
		   AND o.sent_at IS NULL
		   AND o.lease_holder OPERATOR(pg_catalog.=) dedup_outbox_sent.relay
		RETURNING 1)
	SELECT pg_catalog.count(*) FROM marked;
END;

/*
 * dedup_outbox_release(relay, seqs): give the leases of seqs back now (the
 * broker is down), rather than let them expire, or every lease of relay
 * for seqs NULL (a relay starting again under its name); returns how many.
 */
CREATE FUNCTION @extschema@.dedup_outbox_release(relay text, seqs bigint[])
RETURNS bigint
LANGUAGE sql VOLATILE SECURITY DEFINER
SET jit = off
BEGIN ATOMIC
	SELECT @extschema@.dedup_outbox_valid(dedup_outbox_release.relay, 'relay'::pg_catalog.text,
										  'dedup_outbox_release'::pg_catalog.text);
	WITH released AS (
		UPDATE @extschema@.dedup_outbox o
		   SET lease_until = NULL::pg_catalog.timestamptz
		 WHERE (dedup_outbox_release.seqs IS NULL
				OR o.seq OPERATOR(pg_catalog.=) ANY (dedup_outbox_release.seqs))
		   AND o.sent_at IS NULL
		   AND o.lease_holder OPERATOR(pg_catalog.=) dedup_outbox_release.relay
		   AND o.lease_until IS NOT NULL
		RETURNING 1)
	SELECT pg_catalog.count(*) FROM released;
END;

/*
 * dedup_outbox_resend(message_id): send a sent message again, on purpose
 * (the next hop lost it); true if it was sent and is unsent now.  For
 * operators: every call is in the server log, which
 * dedup_outbox_audit_resend() writes.
 */
CREATE FUNCTION @extschema@.dedup_outbox_audit_resend(message_id text, seq bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'dedup_outbox_audit_resend'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.dedup_outbox_resend(message_id text)
RETURNS boolean
LANGUAGE sql VOLATILE SECURITY DEFINER
BEGIN ATOMIC
	WITH unsent AS (
		UPDATE @extschema@.dedup_outbox o
		   SET sent_at = NULL::pg_catalog.timestamptz,
			   lease_until = NULL::pg_catalog.timestamptz,
			   lease_holder = NULL::pg_catalog.text
		 WHERE o.message_id OPERATOR(pg_catalog.=) dedup_outbox_resend.message_id
		   AND o.sent_at IS NOT NULL
		RETURNING o.seq)
	SELECT @extschema@.dedup_outbox_audit_resend(dedup_outbox_resend.message_id,
												 (SELECT u.seq FROM unsent u));
END;

/*
 * dedup_outbox_sweep(): delete the sent messages older than
 * dedup.outbox_retention now, in this transaction; returns how many.  The
 * retention worker does the same in batches.  dedup_outbox_retention():
 * that setting as an interval, NULL when sent messages are kept forever.
 */
CREATE FUNCTION @extschema@.dedup_outbox_sweep()
RETURNS bigint
AS 'MODULE_PATHNAME', 'dedup_outbox_sweep'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER;

CREATE FUNCTION @extschema@.dedup_outbox_retention()
RETURNS interval
AS 'MODULE_PATHNAME', 'dedup_outbox_retention'
LANGUAGE C STABLE PARALLEL SAFE;

/*
 * What waits to leave, per destination: unsent and leased messages, the
 * age of the oldest unsent one (a relay that stopped makes it grow), what
 * was sent in the last minute and when last.  For monitoring roles: names
 * and numbers, never a message.
 */
CREATE VIEW @extschema@.dedup_outbox_backlog AS
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
		   @extschema@.dedup_outbox_retention() AS retention
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
	'dedup: per outbox destination, unsent and leased messages, the oldest unsent one''s age, and what was sent lately';

/*
 * The logical replication slots of this database, with how far each is
 * behind (WAL mode: a relay that stopped makes lag_bytes grow, and WAL is
 * kept for it up to max_slot_wal_keep_size).
 */
CREATE VIEW @extschema@.dedup_outbox_slots AS
	SELECT s.slot_name,
		   s.plugin,
		   s.active,
		   s.active_pid,
		   s.confirmed_flush_lsn,
		   pg_catalog.pg_wal_lsn_diff(
			   CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn()
					ELSE pg_catalog.pg_current_wal_lsn() END,
			   s.confirmed_flush_lsn)::pg_catalog.int8 AS lag_bytes,
		   s.wal_status,
		   s.safe_wal_size
	  FROM pg_catalog.pg_replication_slots s
	 WHERE s.slot_type OPERATOR(pg_catalog.=) 'logical'::pg_catalog.text
	   AND s.database OPERATOR(pg_catalog.=) pg_catalog.current_database();
COMMENT ON VIEW @extschema@.dedup_outbox_slots IS
	'dedup: the logical replication slots of this database (WAL-mode relays) and how far behind each is';

REVOKE ALL ON TABLE @extschema@.dedup_outbox_destinations FROM PUBLIC;
REVOKE ALL ON TABLE @extschema@.dedup_outbox_publishers FROM PUBLIC;
REVOKE ALL ON TABLE @extschema@.dedup_outbox FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_outbox_valid(text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_add_destination(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_outbox_drop_messages(text, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_drop_destination(text, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_allow_publisher(text, regrole) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_disallow_publisher(text, regrole) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_publish(text, text, text, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_outbox_valid_lease(text, integer, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_outbox_lease(text, integer, interval, text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_outbox_sent(text, bigint[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_outbox_release(text, bigint[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_outbox_audit_resend(text, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_outbox_resend(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_outbox_sweep() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_outbox_retention() FROM PUBLIC;
REVOKE ALL ON @extschema@.dedup_outbox_backlog FROM PUBLIC;
REVOKE ALL ON @extschema@.dedup_outbox_slots FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.dedup_outbox_retention() TO pg_monitor;
GRANT SELECT ON @extschema@.dedup_outbox_backlog TO pg_monitor;
GRANT SELECT ON @extschema@.dedup_outbox_slots TO pg_monitor;
