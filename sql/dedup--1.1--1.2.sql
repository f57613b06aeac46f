/* sql/dedup--1.1--1.2.sql: from dedup 1.1 to 1.2 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION dedup UPDATE TO '1.2'" to load this file. \quit

/*
 * The same rules as the earlier scripts, and one more: every literal in a
 * function body or view is cast to its type with a schema-qualified cast,
 * so that overload resolution can never prefer a look-alike planted in the
 * extension's schema before CREATE EXTENSION or ALTER EXTENSION UPDATE.
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
			'function dedup_retention_audit()',
			'table stream_positions',
			'index stream_positions_pkey',
			'function dedup_claim_offset(pg_catalog.text,pg_catalog.text,pg_catalog.int4,pg_catalog.int8)',
			'function dedup_claim_offsets(pg_catalog.text,pg_catalog.text,pg_catalog.int4,pg_catalog.int8[])',
			'function dedup_stream_positions(pg_catalog.text,pg_catalog.text)',
			'function dedup_set_stream_position(pg_catalog.text,pg_catalog.text,pg_catalog.int4,pg_catalog.int8)',
			'function dedup_forget_stream_positions(pg_catalog.text,pg_catalog.text)',
			'function dedup_stream_counters()',
			'view dedup_stream_progress',
			'view dedup_stream_stats',
			'table dedup_colocated_tables',
			'index dedup_colocated_tables_pkey',
			'function dedup_create_colocated_records(pg_catalog.text,pg_catalog.regclass)',
			'function dedup_claim_routed(pg_catalog.regclass,pg_catalog.text,pg_catalog.text,pg_catalog.text)',
			'function dedup_claim_routed_many(pg_catalog.regclass,pg_catalog.text,pg_catalog.text,pg_catalog.text[])',
			'function dedup_seen_routed(pg_catalog.regclass,pg_catalog.text,pg_catalog.text,pg_catalog.text)',
			'function dedup_sweep_colocated(pg_catalog.regclass)',
			'function dedup_colocated_storage()',
			'function dedup_register_colocated_records(pg_catalog.regclass)',
			'function dedup_forget_routed(pg_catalog.regclass,pg_catalog.text,pg_catalog.text,pg_catalog.text)'
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
			DETAIL = pg_catalog.format('dedup 1.2 creates %s %s in schema %s; the one there is owned by role "%s".'::pg_catalog.text,
									   planted.kind,
									   pg_catalog.split_part(planted.name, '('::pg_catalog.text, 1),
									   pg_catalog.quote_ident(planted.nspname), planted.owner),
			HINT = 'Drop or rename it, then run ALTER EXTENSION dedup UPDATE (or CREATE EXTENSION) again. A schema that only the extension''s owner can create in, as in the README''s install steps, admits no such object.'::pg_catalog.text;
	END IF;
END;
$guard$;

/*
 * dedup_retire_consumer: 1.1 called dedup_forget_since(consumer,
 * '-infinity') with an untyped literal, which a dedup_forget_since(text,
 * text) planted beside the real one would have won.  It is bound again
 * below, once the stream positions it also removes exist.
 */

/* The bodies that pass literals to the extension's functions. */
CREATE OR REPLACE FUNCTION @extschema@.dedup_set_retention(consumer text, retention interval)
RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER
BEGIN ATOMIC
	INSERT INTO @extschema@.dedup_retention AS r (consumer_name, retention)
		 VALUES (@extschema@.dedup_valid_consumer(consumer, 'dedup_set_retention'::pg_catalog.text),
				 @extschema@.dedup_valid_retention(retention))
	ON CONFLICT (consumer_name) DO UPDATE SET retention = excluded.retention;
END;

CREATE OR REPLACE FUNCTION @extschema@.dedup_keep_forever(consumer text)
RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER
BEGIN ATOMIC
	INSERT INTO @extschema@.dedup_retention AS r (consumer_name, retention)
		 VALUES (@extschema@.dedup_valid_consumer(consumer, 'dedup_keep_forever'::pg_catalog.text),
				 NULL::pg_catalog.interval)
	ON CONFLICT (consumer_name) DO UPDATE SET retention = NULL::pg_catalog.interval;
END;

CREATE OR REPLACE FUNCTION @extschema@.dedup_reset_retention(consumer text)
RETURNS boolean
LANGUAGE sql VOLATILE SECURITY DEFINER
BEGIN ATOMIC
	SELECT @extschema@.dedup_valid_consumer(consumer, 'dedup_reset_retention'::pg_catalog.text);
	WITH deleted AS (
		DELETE FROM @extschema@.dedup_retention r
		 WHERE r.consumer_name OPERATOR(pg_catalog.=) consumer
		RETURNING 1)
	SELECT pg_catalog.count(*) OPERATOR(pg_catalog.>) 0::pg_catalog.int8 FROM deleted;
END;

CREATE OR REPLACE FUNCTION @extschema@.dedup_allow_claimant(consumer text, claimant regrole)
RETURNS void
LANGUAGE sql VOLATILE
BEGIN ATOMIC
	INSERT INTO @extschema@.dedup_consumer_roles (consumer_name, claimant)
		 VALUES (@extschema@.dedup_valid_consumer(consumer, 'dedup_allow_claimant'::pg_catalog.text),
				 claimant)
	ON CONFLICT DO NOTHING;
END;

CREATE OR REPLACE FUNCTION @extschema@.dedup_disallow_claimant(consumer text, claimant regrole)
RETURNS boolean
LANGUAGE sql VOLATILE
BEGIN ATOMIC
	SELECT @extschema@.dedup_valid_consumer(consumer, 'dedup_disallow_claimant'::pg_catalog.text);
	WITH deleted AS (
		DELETE FROM @extschema@.dedup_consumer_roles r
		 WHERE r.consumer_name OPERATOR(pg_catalog.=) consumer
		   AND r.claimant OPERATOR(pg_catalog.=) claimant
		RETURNING 1)
	SELECT pg_catalog.count(*) OPERATOR(pg_catalog.>) 0::pg_catalog.int8 FROM deleted;
END;

/*
 * PUBLIC gets USAGE on a new type by default; the claim status is dedup's
 * own (a column of it in someone's table would hold DROP EXTENSION up).
 * Calling dedup_try_claim and comparing its result need no USAGE.
 */
REVOKE USAGE ON TYPE @extschema@.dedup_claim_status FROM PUBLIC;

/*
 * The claimant mapping is cached by every backend: a change must reach
 * them however it is made.  A statement trigger does not fire in
 * logical replication's apply worker, and no ordinary trigger fires with
 * session_replication_role = replica; these fire always, for each row and
 * for TRUNCATE.
 */
DROP TRIGGER dedup_consumer_roles_changed ON @extschema@.dedup_consumer_roles;
CREATE TRIGGER dedup_consumer_roles_changed
	AFTER INSERT OR UPDATE OR DELETE ON @extschema@.dedup_consumer_roles
	FOR EACH ROW EXECUTE FUNCTION @extschema@.dedup_consumer_roles_changed();
CREATE TRIGGER dedup_consumer_roles_truncated
	AFTER TRUNCATE ON @extschema@.dedup_consumer_roles
	FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.dedup_consumer_roles_changed();
ALTER TABLE @extschema@.dedup_consumer_roles
	ENABLE ALWAYS TRIGGER dedup_consumer_roles_changed,
	ENABLE ALWAYS TRIGGER dedup_consumer_roles_truncated;

/*
 * A mapping to a role that has been dropped maps nothing, and is left out
 * of dumps: its claimant would be dumped as a bare OID, which in
 * another cluster may name another role.
 */
SELECT pg_catalog.pg_extension_config_dump(c.oid::pg_catalog.regclass,
		'WHERE claimant OPERATOR(pg_catalog.=) ANY (SELECT a.oid FROM pg_catalog.pg_roles a)'::pg_catalog.text)
  FROM pg_catalog.pg_class c
 WHERE c.relnamespace OPERATOR(pg_catalog.=)
	   (SELECT e.extnamespace FROM pg_catalog.pg_extension e
		 WHERE e.extname OPERATOR(pg_catalog.=) 'dedup'::pg_catalog.name)
   AND c.relname OPERATOR(pg_catalog.=) 'dedup_consumer_roles'::pg_catalog.name;

/* --- audit trail --- */

/*
 * Every change of a retention window is written to the server log,
 * whatever makes it: the retention functions, dedup_retire_consumer, a
 * superuser's INSERT, UPDATE, DELETE or TRUNCATE, or logical replication.
 * Each row change is audited after it is made; a TRUNCATE before it, while
 * the windows it removes can still be read.  ENABLE ALWAYS: the triggers
 * also fire with session_replication_role = replica and in replication
 * apply.  (processed_messages must have no trigger; dedup_retention may.)
 */
CREATE FUNCTION @extschema@.dedup_retention_audit()
RETURNS trigger
AS 'MODULE_PATHNAME', 'dedup_retention_audit'
LANGUAGE C;

CREATE TRIGGER dedup_retention_audit
	AFTER INSERT OR UPDATE OR DELETE ON @extschema@.dedup_retention
	FOR EACH ROW EXECUTE FUNCTION @extschema@.dedup_retention_audit();

CREATE TRIGGER dedup_retention_audit_truncate
	BEFORE TRUNCATE ON @extschema@.dedup_retention
	FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.dedup_retention_audit();

ALTER TABLE @extschema@.dedup_retention
	ENABLE ALWAYS TRIGGER dedup_retention_audit,
	ENABLE ALWAYS TRIGGER dedup_retention_audit_truncate;

REVOKE ALL ON FUNCTION @extschema@.dedup_retention_audit() FROM PUBLIC;

/*
 * dedup_consumer_storage(), behind dedup_stats and dedup_storage, in C on
 * the sweep's own consumer walk: the columns and figures of
 * its 1.1 SQL definition, with the retention rule implemented once.  It
 * reads the tables by OID and needs no privilege on them, so it runs as its
 * caller: EXECUTE (pg_monitor) is still all a monitoring role needs.
 * CREATE OR REPLACE keeps its OID, owner and privileges, and the views.
 */
CREATE OR REPLACE FUNCTION @extschema@.dedup_consumer_storage(
	OUT consumer text,
	OUT records_estimate bigint,
	OUT oldest_record_at timestamptz,
	OUT latest_record_at timestamptz,
	OUT retention interval,
	OUT keep_forever boolean,
	OUT retention_valid boolean,
	OUT expired_backlog bigint,
	OUT future_records bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'dedup_consumer_storage'
LANGUAGE C STABLE PARALLEL RESTRICTED;

/* --- ordered streams --- */

/*
 * Where each consumer is in each partition of each ordered stream (a Kafka
 * topic, a RabbitMQ stream): the last offset it has processed.  For a
 * consumer that processes a partition in order, that position is the whole
 * deduplication record: one row per (consumer, stream, partition), however
 * many messages, and nothing to sweep.  Claims by offset move it in place:
 * they change only columns that no index covers, so every update is a HOT
 * update (the new version on the same page, the old one pruned when the
 * page is next read) and the table keeps its size; fillfactor 50 leaves
 * every page the room to do so.  Claims write every column themselves: no
 * defaults.
 */
CREATE TABLE @extschema@.stream_positions (
	consumer_name text NOT NULL,
	stream text NOT NULL,
	partition integer NOT NULL,
	committed_offset bigint NOT NULL,
	updated_at timestamptz NOT NULL,
	CONSTRAINT stream_positions_pkey PRIMARY KEY (consumer_name, stream, partition)
) WITH (fillfactor = 50);
COMMENT ON TABLE @extschema@.stream_positions IS
	'dedup: the last offset each consumer has processed in each partition of each stream (written by dedup_claim_offset)';
COMMENT ON COLUMN @extschema@.stream_positions.committed_offset IS
	'last offset processed; -1 after dedup_set_stream_position(..., 0): the partition is read again from its start';

/* user data, kept by pg_dump like the records */
SELECT pg_catalog.pg_extension_config_dump(c.oid::pg_catalog.regclass, ''::pg_catalog.text)
  FROM pg_catalog.pg_class c
 WHERE c.relnamespace OPERATOR(pg_catalog.=)
	   (SELECT e.extnamespace FROM pg_catalog.pg_extension e
		 WHERE e.extname OPERATOR(pg_catalog.=) 'dedup'::pg_catalog.name)
   AND c.relname OPERATOR(pg_catalog.=) 'stream_positions'::pg_catalog.name;

/*
 * dedup_claim_offset(consumer, stream, partition, message_offset): true
 * when message_offset is past the consumer's position in the partition,
 * which moves to it in this transaction (do the work); false when it is at
 * or before it (a replay: skip).  Never NULL.  Exactly dedup_claim's
 * transactional guarantees, claimant check and counters.
 */
CREATE FUNCTION @extschema@.dedup_claim_offset(consumer text, stream text,
											   partition integer, message_offset bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'dedup_claim_offset'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.dedup_claim_offset(text, text, integer, bigint) IS
	'dedup: claim a record of an ordered stream by its offset; true = past the position (do it), false = a replay (skip)';

/*
 * dedup_claim_offsets(consumer, stream, partition, message_offsets): a
 * poll's records of one partition in one call and one write; element i is
 * what dedup_claim_offset(message_offsets[i]) would answer after the
 * elements before it.
 */
CREATE FUNCTION @extschema@.dedup_claim_offsets(consumer text, stream text,
												partition integer, message_offsets bigint[])
RETURNS boolean[]
AS 'MODULE_PATHNAME', 'dedup_claim_offsets'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

/*
 * dedup_stream_positions(consumer [, only_stream]): where the consumer is,
 * and where to seek on assignment (next_offset).  Only reads: a hot standby
 * answers it.  The same roles may look as may claim for the consumer.
 */
CREATE FUNCTION @extschema@.dedup_stream_positions(consumer text,
												   only_stream text DEFAULT NULL)
RETURNS TABLE (stream text, partition integer, committed_offset bigint,
			   next_offset bigint, updated_at timestamptz)
AS 'MODULE_PATHNAME', 'dedup_stream_positions'
LANGUAGE C STABLE PARALLEL RESTRICTED;

/*
 * dedup_set_stream_position(consumer, stream, partition, next_offset):
 * move a position on purpose, back (replay) or forward (skip a poison
 * range); returns the previous next_offset (NULL: none).  For operators
 * only: every call is in the server log.
 */
CREATE FUNCTION @extschema@.dedup_set_stream_position(consumer text, stream text,
													  partition integer, next_offset bigint)
RETURNS bigint
AS 'MODULE_PATHNAME', 'dedup_set_stream_position'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

/*
 * dedup_forget_stream_positions(consumer [, only_stream]): delete the
 * consumer's positions (in one stream), so that its partitions are claimed
 * again from any offset; returns how many.  Audited.
 */
CREATE FUNCTION @extschema@.dedup_forget_stream_positions(consumer text,
														  only_stream text DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'dedup_forget_stream_positions'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

/*
 * dedup_retire_consumer: its positions go with it; every literal typed (see
 * the top of this script).
 */
CREATE OR REPLACE FUNCTION @extschema@.dedup_retire_consumer(consumer text)
RETURNS bigint
LANGUAGE sql VOLATILE SECURITY DEFINER
BEGIN ATOMIC
	SELECT @extschema@.dedup_valid_consumer(consumer, 'dedup_retire_consumer'::pg_catalog.text);
	DELETE FROM @extschema@.dedup_retention r
	 WHERE r.consumer_name OPERATOR(pg_catalog.=) consumer;
	DELETE FROM @extschema@.dedup_consumer_roles r
	 WHERE r.consumer_name OPERATOR(pg_catalog.=) consumer;
	SELECT @extschema@.dedup_forget_stream_positions(consumer, NULL::pg_catalog.text);
	SELECT @extschema@.dedup_forget_since(consumer, '-infinity'::pg_catalog.timestamptz);
END;

REVOKE ALL ON TABLE @extschema@.stream_positions FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_claim_offset(text, text, integer, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_claim_offsets(text, text, integer, bigint[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_stream_positions(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_set_stream_position(text, text, integer, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_forget_stream_positions(text, text) FROM PUBLIC;

/*
 * Observability of ordered streams.  Claims by offset count in their
 * consumer's counters (dedup_stats), and per consumer and stream in
 * dedup_stream_counters() (its columns are those of
 * dedup_claim_counters(), then the stream).  dedup_stream_stats shows them
 * with the positions of each stream; dedup_stream_progress shows each
 * partition's position and how long ago it last moved: a position that
 * stops while its partition receives messages is a stuck consumer.  Both
 * are for monitoring roles (pg_monitor): names and offsets, never a message.
 */
CREATE FUNCTION @extschema@.dedup_stream_counters(
	OUT consumer text, OUT claims bigint, OUT duplicates bigint, OUT lock_waits bigint,
	OUT serialization_failures bigint, OUT last_claim_at timestamptz,
	OUT last_duplicate_at timestamptz, OUT counters_since timestamptz,
	OUT deadlocks bigint, OUT lock_timeouts bigint, OUT cancels bigint, OUT other_errors bigint,
	OUT total_claim_time double precision, OUT max_claim_time double precision,
	OUT total_lock_wait_time double precision, OUT stream text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'dedup_stream_counters'
LANGUAGE C VOLATILE PARALLEL SAFE;

CREATE VIEW @extschema@.dedup_stream_progress AS
	SELECT p.consumer_name AS consumer,
		   p.stream,
		   p.partition,
		   p.committed_offset,
		   p.committed_offset OPERATOR(pg_catalog.+) 1::pg_catalog.int8 AS next_offset,
		   p.updated_at,
		   pg_catalog.now() OPERATOR(pg_catalog.-) p.updated_at AS idle_for
	  FROM @extschema@.stream_positions p;
COMMENT ON VIEW @extschema@.dedup_stream_progress IS
	'dedup: each consumer''s position in each partition of each stream, and how long since it last moved';

CREATE VIEW @extschema@.dedup_stream_stats AS
	SELECT COALESCE(c.consumer, p.consumer) AS consumer,
		   COALESCE(c.stream, p.stream) AS stream,
		   COALESCE(p.partitions, 0::pg_catalog.int8) AS partitions,
		   c.claims,
		   c.duplicates AS replays,
		   c.last_claim_at,
		   c.last_duplicate_at AS last_replay_at,
		   p.oldest_update AS least_recent_move_at,
		   p.latest_update AS most_recent_move_at,
		   c.lock_waits,
		   c.serialization_failures,
		   c.deadlocks,
		   c.lock_timeouts,
		   c.cancels,
		   c.other_errors,
		   c.total_claim_time,
		   c.max_claim_time,
		   c.total_lock_wait_time,
		   c.counters_since
	  FROM @extschema@.dedup_stream_counters() c
	  FULL JOIN (SELECT g.consumer_name AS consumer,
						g.stream,
						pg_catalog.count(*) AS partitions,
						pg_catalog.min(g.updated_at) AS oldest_update,
						pg_catalog.max(g.updated_at) AS latest_update
				   FROM @extschema@.stream_positions g
				  GROUP BY g.consumer_name, g.stream) p
		ON p.consumer OPERATOR(pg_catalog.=) c.consumer
	   AND p.stream OPERATOR(pg_catalog.=) c.stream;
COMMENT ON VIEW @extschema@.dedup_stream_stats IS
	'dedup: claims by offset and replays skipped per consumer and stream, with its partitions'' positions';

REVOKE ALL ON FUNCTION @extschema@.dedup_stream_counters() FROM PUBLIC;
REVOKE ALL ON @extschema@.dedup_stream_progress FROM PUBLIC;
REVOKE ALL ON @extschema@.dedup_stream_stats FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.dedup_stream_counters() TO pg_monitor;
GRANT SELECT ON @extschema@.dedup_stream_progress TO pg_monitor;
GRANT SELECT ON @extschema@.dedup_stream_stats TO pg_monitor;

/* --- records colocated with the business rows on Citus --- */

/*
 * The registry of colocated records tables: distributed tables, created by
 * dedup_create_colocated_records() and owned by its caller (not members of
 * the extension: DROP EXTENSION leaves them, and their rows, in place, and
 * takes the registry with it).  Only registered tables are written by the
 * routed claims, swept, and counted.  A row whose table has
 * been dropped is ignored.  Kept by pg_dump, as the tables it names are.
 */
CREATE TABLE @extschema@.dedup_colocated_tables (
	records regclass NOT NULL,
	registered_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	CONSTRAINT dedup_colocated_tables_pkey PRIMARY KEY (records)
);
COMMENT ON TABLE @extschema@.dedup_colocated_tables IS
	'dedup: the distributed tables of records colocated with business tables on Citus (written by dedup_create_colocated_records)';
SELECT pg_catalog.pg_extension_config_dump(c.oid::pg_catalog.regclass, ''::pg_catalog.text)
  FROM pg_catalog.pg_class c
 WHERE c.relnamespace OPERATOR(pg_catalog.=)
	   (SELECT e.extnamespace FROM pg_catalog.pg_extension e
		 WHERE e.extname OPERATOR(pg_catalog.=) 'dedup'::pg_catalog.name)
   AND c.relname OPERATOR(pg_catalog.=) 'dedup_colocated_tables'::pg_catalog.name;

/*
 * dedup_create_colocated_records(records_table, colocate_with): on a Citus
 * coordinator, create records_table (route, consumer, message_id,
 * processed_at; the route of colocate_with's distribution column type),
 * distributed by route and colocated with colocate_with, which the caller
 * must own; register it.  Not for PUBLIC.
 */
CREATE FUNCTION @extschema@.dedup_create_colocated_records(records_table text,
														   colocate_with regclass)
RETURNS regclass
AS 'MODULE_PATHNAME', 'dedup_create_colocated_records'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

/*
 * The claims routed by key, on the coordinator: dedup_claim and
 * dedup_claim_many for records kept in the shard of route (a value of the
 * table's route column, as text), committed with the business update on
 * the worker that holds both, in one-phase commit.  They run as the
 * caller: INSERT and SELECT on the records table are needed too.
 */
CREATE FUNCTION @extschema@.dedup_claim_routed(records regclass, route text,
											   consumer text, message_id text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'dedup_claim_routed'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.dedup_claim_routed(regclass, text, text, text) IS
	'dedup: claim a message in a colocated records table, routed by key; true = first time (do it), false = duplicate (skip)';

CREATE FUNCTION @extschema@.dedup_claim_routed_many(records regclass, route text,
													consumer text, message_ids text[])
RETURNS boolean[]
AS 'MODULE_PATHNAME', 'dedup_claim_routed_many'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.dedup_seen_routed(records regclass, route text,
											  consumer text, message_id text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'dedup_seen_routed'
LANGUAGE C STABLE PARALLEL UNSAFE;

/*
 * dedup_sweep_colocated([records]): delete the expired rows of the
 * colocated records tables now, with the windows of dedup_retention, as
 * the caller; the coordinator's sweeper does it on its own.
 */
CREATE FUNCTION @extschema@.dedup_sweep_colocated(records regclass DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'dedup_sweep_colocated'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

/* what each colocated records table holds per consumer, on all nodes */
CREATE FUNCTION @extschema@.dedup_colocated_storage(
	OUT records regclass,
	OUT consumer text,
	OUT records_count bigint,
	OUT oldest_record_at timestamptz,
	OUT latest_record_at timestamptz,
	OUT expires_before timestamptz,
	OUT table_bytes bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'dedup_colocated_storage'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON TABLE @extschema@.dedup_colocated_tables FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_create_colocated_records(text, regclass) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_claim_routed(regclass, text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_claim_routed_many(regclass, text, text, text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_seen_routed(regclass, text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_sweep_colocated(regclass) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_colocated_storage() FROM PUBLIC;
GRANT SELECT ON TABLE @extschema@.dedup_colocated_tables TO pg_monitor;
GRANT EXECUTE ON FUNCTION @extschema@.dedup_colocated_storage() TO pg_monitor;

/*
 * dedup_register_colocated_records(records): register a table that has
 * exactly the shape dedup_create_colocated_records() gives, hash-distributed
 * by route (one left by DROP EXTENSION, restored, or made by hand); the
 * caller must own it.  A table registered already is left as it is, with
 * a notice.  Not for PUBLIC.
 */
CREATE FUNCTION @extschema@.dedup_register_colocated_records(records regclass)
RETURNS regclass
AS 'MODULE_PATHNAME', 'dedup_register_colocated_records'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

/*
 * dedup_forget_routed(records, route, consumer, message_id): dedup_forget
 * for colocated records, as the caller (DELETE and SELECT on the table are
 * needed too); every call is in the server log.  For operators only.
 */
CREATE FUNCTION @extschema@.dedup_forget_routed(records regclass, route text,
												consumer text, message_id text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'dedup_forget_routed'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION @extschema@.dedup_register_colocated_records(regclass) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_forget_routed(regclass, text, text, text) FROM PUBLIC;
