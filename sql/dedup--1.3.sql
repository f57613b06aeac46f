/* sql/dedup--1.3.sql: dedup 1.3, the current version, as a fresh install creates it */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION dedup" to load this file. \quit

/*
 * This script is the current version as it stands: each object once, in its
 * final form.  CREATE EXTENSION dedup runs it alone; an older version is
 * installed from dedup--1.0.sql and its update scripts, and a database on
 * an older version reaches this one through them (ALTER EXTENSION dedup
 * UPDATE).  Both ways must give the same objects, and a TAP test of the
 * install paths checks that they do (test/README.md): the definitions,
 * privileges (initial ones included), dependencies, pg_dump registrations,
 * comments and attributes of every object, after a fresh install and after
 * every update path, the versions taken from the names of these scripts.
 *
 * Keeping them in step.  A change to the SQL objects in 1.4 (say) is
 * written twice:
 *   - as an update, in dedup--1.3--1.4.sql: the change itself (ALTER,
 *     CREATE OR REPLACE, or DROP and CREATE), the guard at its top naming
 *     every object it creates, as in the earlier update scripts;
 *   - in final form here: this file becomes dedup--1.4.sql (git mv: one
 *     current script only; dedup--1.0.sql and the update scripts stay),
 *     each changed object edited where it stands, a new one put beside its
 *     kin, the version numbers of this header moved on;
 * then default_version in dedup.control and DATA in the Makefile follow.
 * The test fails, showing the difference, until both ways give the same
 * objects.  Some things here are as they are because an update made them
 * so: the retention check is NOT VALID (an update cannot check the rows
 * 1.0 accepted), the 1.1 claim counters keep their own C symbol.
 *
 * Security notes (PostgreSQL docs, "Security Considerations for Extension
 * Scripts"): every object is created schema-qualified, without IF NOT
 * EXISTS or OR REPLACE, so a pre-existing object with a clashing name makes
 * CREATE EXTENSION fail instead of being adopted; every function and
 * operator used is qualified with pg_catalog or @extschema@, and every
 * literal passed to one of the extension's functions is cast to its
 * schema-qualified type, so that overload resolution can never prefer a
 * look-alike planted in the extension's schema; @extschema@ never appears
 * inside a string literal.  Nothing is granted to PUBLIC.
 */

/*
 * Before anything is created: no object that this script creates may
 * already be in the extension's schema.  Whoever may create in that schema
 * (since PostgreSQL 15 the database owner owns public) could have planted
 * one, and the script would stop at it with PostgreSQL's own error, which
 * says neither whose it is nor what to do; this one names the object and
 * its owner.  Each line of the list is a kind and a name, one for every
 * object created below that 1.0 did not create (for those, a fresh install
 * has always stopped at PostgreSQL's own error, and still does): a table,
 * view or type collides with a relation or a type of its name, an index
 * with a relation, a function with one of the same argument types
 * (schema-qualified, no spaces).  Everything is looked up schema-qualified,
 * nothing through search_path.  An object added in a later version is
 * added to the list.
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
			'function dedup_claim(pg_catalog.text,pg_catalog.text,pg_catalog.bytea)',
			'type dedup_claim_status',
			'function dedup_try_claim(pg_catalog.text,pg_catalog.text,pg_catalog.bytea)',
			'function dedup_claim_many(pg_catalog.text,pg_catalog.text[])',
			'function dedup_retention_is_valid(pg_catalog.interval)',
			'function dedup_retention_cutoff(pg_catalog.timestamptz,pg_catalog.interval)',
			'function dedup_valid_retention(pg_catalog.interval)',
			'function dedup_valid_consumer(pg_catalog.text,pg_catalog.text)',
			'function dedup_retention_audit()',
			'table dedup_consumer_roles',
			'index dedup_consumer_roles_pkey',
			'function dedup_consumer_roles_changed()',
			'function dedup_allow_claimant(pg_catalog.text,pg_catalog.regrole)',
			'function dedup_disallow_claimant(pg_catalog.text,pg_catalog.regrole)',
			'function dedup_seen(pg_catalog.text,pg_catalog.text)',
			'function dedup_forget(pg_catalog.text,pg_catalog.text)',
			'function dedup_forget_since(pg_catalog.text,pg_catalog.timestamptz)',
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
			'function dedup_retire_consumer(pg_catalog.text)',
			'table dedup_colocated_tables',
			'index dedup_colocated_tables_pkey',
			'function dedup_create_colocated_records(pg_catalog.text,pg_catalog.regclass)',
			'function dedup_claim_routed(pg_catalog.regclass,pg_catalog.text,pg_catalog.text,pg_catalog.text)',
			'function dedup_claim_routed_many(pg_catalog.regclass,pg_catalog.text,pg_catalog.text,pg_catalog.text[])',
			'function dedup_seen_routed(pg_catalog.regclass,pg_catalog.text,pg_catalog.text,pg_catalog.text)',
			'function dedup_sweep_colocated(pg_catalog.regclass)',
			'function dedup_colocated_storage()',
			'function dedup_register_colocated_records(pg_catalog.regclass)',
			'function dedup_forget_routed(pg_catalog.regclass,pg_catalog.text,pg_catalog.text,pg_catalog.text)',
			'function dedup_colocated_dropped()'
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
			DETAIL = pg_catalog.format('dedup 1.3 creates %s %s in schema %s; the one there is owned by role "%s".'::pg_catalog.text,
									   planted.kind,
									   pg_catalog.split_part(planted.name, '('::pg_catalog.text, 1),
									   pg_catalog.quote_ident(planted.nspname), planted.owner),
			HINT = 'Drop or rename it, then run ALTER EXTENSION dedup UPDATE (or CREATE EXTENSION) again. A schema that only the extension''s owner can create in, as in the README''s install steps, admits no such object.'::pg_catalog.text;
	END IF;
END;
$guard$;

/* --- records and claims --- */

/*
 * One row per message a consumer has processed.  The primary key is the
 * deduplication decision; the (consumer_name, processed_at) index serves the
 * retention sweep, which deletes a consumer's oldest rows first.  The table
 * churns (inserted by claims, deleted by sweeps), so autovacuum visits it
 * after 2% of it has changed rather than 20%, which keeps bloat and the
 * planner's row estimates in check.  The fingerprint is NULL unless a claim
 * gives one (a null costs no space).
 */
CREATE TABLE @extschema@.processed_messages (
	consumer_name text NOT NULL,
	message_id text NOT NULL,
	processed_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	fingerprint bytea,
	CONSTRAINT processed_messages_pkey PRIMARY KEY (consumer_name, message_id)
) WITH (autovacuum_vacuum_scale_factor = 0.02,
		autovacuum_analyze_scale_factor = 0.02);
CREATE INDEX processed_messages_consumer_time_idx
	ON @extschema@.processed_messages (consumer_name, processed_at);

COMMENT ON TABLE @extschema@.processed_messages IS
	'dedup: messages each consumer has claimed (written by dedup_claim)';
COMMENT ON COLUMN @extschema@.processed_messages.fingerprint IS
	'digest of the message given with its claim, if any (at most 64 bytes)';

/*
 * The records are user data: pg_dump must keep them so that a restored
 * database still rejects redeliveries.  (One table per statement: a second
 * pg_extension_config_dump() call in the same command would update the
 * pg_extension row twice.)
 */
SELECT pg_catalog.pg_extension_config_dump(c.oid::pg_catalog.regclass, ''::pg_catalog.text)
  FROM pg_catalog.pg_class c
 WHERE c.relnamespace OPERATOR(pg_catalog.=)
	   (SELECT e.extnamespace FROM pg_catalog.pg_extension e
		 WHERE e.extname OPERATOR(pg_catalog.=) 'dedup'::pg_catalog.name)
   AND c.relname OPERATOR(pg_catalog.=) 'processed_messages'::pg_catalog.name;

/*
 * dedup_claim(consumer, message_id [, fingerprint]): true when this
 * transaction has just recorded the claim (do the work), false when the
 * message was already processed (skip).  Never NULL: bad input raises an
 * error.  The same message id claimed again with a different fingerprint is
 * an error (SQLSTATE UD001): the producer reused an id.  The claim writes
 * processed_messages itself, by OID, so it runs as the caller, which is
 * what the per-consumer claimant check (dedup_consumer_roles) looks at.
 */
CREATE FUNCTION @extschema@.dedup_claim(consumer text, message_id text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'dedup_claim'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.dedup_claim(text, text) IS
	'dedup: record a message as processed in this transaction; true = first time, false = duplicate';

CREATE FUNCTION @extschema@.dedup_claim(consumer text, message_id text, fingerprint bytea)
RETURNS boolean
AS 'MODULE_PATHNAME', 'dedup_claim'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.dedup_claim(text, text, bytea) IS
	'dedup: dedup_claim, and an error if the message id was claimed with a different fingerprint';

/*
 * dedup_try_claim: never waits for another transaction's claim of the same
 * key; says so ('in_progress') instead.  PUBLIC gets USAGE on a new type by
 * default; the claim status is dedup's own (a column of it in someone's
 * table would hold DROP EXTENSION up).  Calling dedup_try_claim and
 * comparing its result need no USAGE.
 */
CREATE TYPE @extschema@.dedup_claim_status AS ENUM ('claimed', 'duplicate', 'in_progress');

CREATE FUNCTION @extschema@.dedup_try_claim(consumer text, message_id text,
											 fingerprint bytea DEFAULT NULL)
RETURNS @extschema@.dedup_claim_status
AS 'MODULE_PATHNAME', 'dedup_try_claim'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.dedup_try_claim(text, text, bytea) IS
	'dedup: claim without waiting; claimed, duplicate, or in_progress (another open transaction holds the claim)';

/*
 * dedup_claim_many(consumer, message_ids): a whole batch in one call;
 * element i of the result is true when message_ids[i] is new (do its work),
 * false when it is a duplicate, of an earlier claim or of an earlier element.
 */
CREATE FUNCTION @extschema@.dedup_claim_many(consumer text, message_ids text[])
RETURNS boolean[]
AS 'MODULE_PATHNAME', 'dedup_claim_many'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.dedup_claim_many(text, text[]) IS
	'dedup: claim a batch of messages in this transaction; element i true = message_ids[i] is new';

/* Least privilege: nothing for PUBLIC; a DBA grants EXECUTE on the claims. */
REVOKE ALL ON TABLE @extschema@.processed_messages FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_claim(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_claim(text, text, bytea) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_try_claim(text, text, bytea) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_claim_many(text, text[]) FROM PUBLIC;
REVOKE USAGE ON TYPE @extschema@.dedup_claim_status FROM PUBLIC;

/* --- retention --- */

/*
 * A consumer's claims expire when they are older than its window, counted
 * back from the earlier of that consumer's latest claim and now (so an idle
 * consumer, or a server that was down, keeps what redeliveries still need).
 * The window is the consumer's row in dedup_retention, else the
 * dedup.retention setting.  A valid window moves every component back and
 * is at most 100 years.
 */
CREATE FUNCTION @extschema@.dedup_retention_is_valid(retention interval)
RETURNS boolean
AS 'MODULE_PATHNAME', 'dedup_retention_is_valid'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE FUNCTION @extschema@.dedup_retention_cutoff(latest timestamptz, retention interval)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'dedup_retention_cutoff'
LANGUAGE C STABLE PARALLEL SAFE;

CREATE FUNCTION @extschema@.dedup_valid_retention(retention interval)
RETURNS interval
AS 'MODULE_PATHNAME', 'dedup_valid_retention'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

CREATE FUNCTION @extschema@.dedup_valid_consumer(consumer text, function_name text)
RETURNS text
AS 'MODULE_PATHNAME', 'dedup_valid_consumer'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

/*
 * The windows.  The check is NOT VALID, as an update from 1.0 leaves it (it
 * never fails on a row 1.0 accepted: the sweep keeps such a consumer's
 * claims, the views show its window as invalid); CREATE TABLE would mark a
 * check it creates valid, so it is added afterwards.
 */
CREATE TABLE @extschema@.dedup_retention (
	consumer_name text NOT NULL,
	retention interval,
	CONSTRAINT dedup_retention_pkey PRIMARY KEY (consumer_name)
);
ALTER TABLE @extschema@.dedup_retention
	ADD CONSTRAINT dedup_retention_valid
		CHECK (@extschema@.dedup_retention_is_valid(retention)) NOT VALID;
COMMENT ON TABLE @extschema@.dedup_retention IS
	'dedup: per-consumer retention windows; a NULL retention keeps the consumer''s claims forever';
COMMENT ON COLUMN @extschema@.dedup_retention.retention IS
	'window counted back from the consumer''s latest claim; NULL = forever';

SELECT pg_catalog.pg_extension_config_dump(c.oid::pg_catalog.regclass, ''::pg_catalog.text)
  FROM pg_catalog.pg_class c
 WHERE c.relnamespace OPERATOR(pg_catalog.=)
	   (SELECT e.extnamespace FROM pg_catalog.pg_extension e
		 WHERE e.extname OPERATOR(pg_catalog.=) 'dedup'::pg_catalog.name)
   AND c.relname OPERATOR(pg_catalog.=) 'dedup_retention'::pg_catalog.name;

/*
 * Every change of a retention window is written to the server log, whatever
 * makes it: the retention functions, dedup_retire_consumer, a superuser's
 * INSERT, UPDATE, DELETE or TRUNCATE, or logical replication.  Each row
 * change is audited after it is made; a TRUNCATE before it, while the
 * windows it removes can still be read.  ENABLE ALWAYS: the triggers also
 * fire with session_replication_role = replica and in replication apply.
 * (processed_messages must have no trigger; dedup_retention may.)
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

/*
 * The maintenance functions are bound to the extension's objects when they
 * are created (BEGIN ATOMIC), so renaming or replacing a schema later cannot
 * redirect them; SECURITY DEFINER, so that EXECUTE is all a maintenance role
 * needs, and all it can do is what the function does.
 */

/* dedup_set_retention(consumer, window): give a consumer its own window */
CREATE FUNCTION @extschema@.dedup_set_retention(consumer text, retention interval)
RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER
BEGIN ATOMIC
	INSERT INTO @extschema@.dedup_retention AS r (consumer_name, retention)
		 VALUES (@extschema@.dedup_valid_consumer(consumer, 'dedup_set_retention'::pg_catalog.text),
				 @extschema@.dedup_valid_retention(retention))
	ON CONFLICT (consumer_name) DO UPDATE SET retention = excluded.retention;
END;

/* dedup_keep_forever(consumer): never expire this consumer's claims */
CREATE FUNCTION @extschema@.dedup_keep_forever(consumer text)
RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER
BEGIN ATOMIC
	INSERT INTO @extschema@.dedup_retention AS r (consumer_name, retention)
		 VALUES (@extschema@.dedup_valid_consumer(consumer, 'dedup_keep_forever'::pg_catalog.text),
				 NULL::pg_catalog.interval)
	ON CONFLICT (consumer_name) DO UPDATE SET retention = NULL::pg_catalog.interval;
END;

/* dedup_reset_retention(consumer): back to dedup.retention; true if it had its own */
CREATE FUNCTION @extschema@.dedup_reset_retention(consumer text)
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

/*
 * dedup_sweep([consumer]): delete expired claims now, in this transaction;
 * returns the number of rows deleted.  SECURITY DEFINER: EXECUTE is all a
 * maintenance role needs, and all it can do is what the retention rule
 * allows.
 */
CREATE FUNCTION @extschema@.dedup_sweep(consumer text DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'dedup_sweep'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER;

/* The sweeper's state for this database (needs shared_preload_libraries). */
CREATE FUNCTION @extschema@.dedup_sweeper_status(
	OUT sweeper_running boolean,
	OUT sweep_enabled boolean,
	OUT database_state text,
	OUT sweeper_pid integer,
	OUT last_sweep_start timestamptz,
	OUT last_sweep_end timestamptz,
	OUT last_sweep_outcome text,
	OUT last_sweep_rows bigint,
	OUT total_rows_deleted bigint,
	OUT last_error text,
	OUT last_error_at timestamptz,
	OUT next_sweep timestamptz)
RETURNS record
AS 'MODULE_PATHNAME', 'dedup_sweeper_status'
LANGUAGE C VOLATILE PARALLEL SAFE;

/* dedup.retention as an interval; NULL when it keeps claims forever */
CREATE FUNCTION @extschema@.dedup_default_retention()
RETURNS interval
AS 'MODULE_PATHNAME', 'dedup_default_retention'
LANGUAGE C STABLE PARALLEL SAFE;

CREATE VIEW @extschema@.dedup_sweeper AS
	SELECT pg_catalog.current_database() AS database,
		   COALESCE(pg_catalog.justify_hours(@extschema@.dedup_default_retention())::pg_catalog.text,
					'forever') AS default_retention,
		   s.*
	  FROM @extschema@.dedup_sweeper_status() s;
COMMENT ON VIEW @extschema@.dedup_sweeper IS
	'dedup: the retention sweeper''s state in this database';

/* dedup_sweeper_wake(): sweep this database as soon as possible */
CREATE FUNCTION @extschema@.dedup_sweeper_wake()
RETURNS boolean
AS 'MODULE_PATHNAME', 'dedup_sweeper_wake'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON TABLE @extschema@.dedup_retention FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_retention_is_valid(interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_retention_cutoff(timestamptz, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_valid_retention(interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_valid_consumer(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_retention_audit() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_set_retention(text, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_keep_forever(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_reset_retention(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_sweep(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_sweeper_wake() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_sweeper_status() FROM PUBLIC;
REVOKE ALL ON @extschema@.dedup_sweeper FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_default_retention() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.dedup_default_retention() TO pg_monitor;
GRANT EXECUTE ON FUNCTION @extschema@.dedup_sweeper_status() TO pg_monitor;
GRANT SELECT ON @extschema@.dedup_sweeper TO pg_monitor;

/* --- claimants --- */

/*
 * Who may claim for whom.  When a consumer has rows here, only members of
 * those roles may claim for it; dedup.require_consumer_roles = on makes
 * every consumer need one.
 */
CREATE TABLE @extschema@.dedup_consumer_roles (
	consumer_name text NOT NULL,
	claimant regrole NOT NULL,
	CONSTRAINT dedup_consumer_roles_pkey PRIMARY KEY (consumer_name, claimant)
);
COMMENT ON TABLE @extschema@.dedup_consumer_roles IS
	'dedup: which roles may claim for a consumer; consumers without a row are open to every claimant unless dedup.require_consumer_roles is on';

/*
 * A mapping to a role that has been dropped maps nothing, and is left out
 * of dumps: its claimant would be dumped as a bare OID, which in another
 * cluster may name another role.
 */
SELECT pg_catalog.pg_extension_config_dump(c.oid::pg_catalog.regclass,
		'WHERE claimant OPERATOR(pg_catalog.=) ANY (SELECT a.oid FROM pg_catalog.pg_roles a)'::pg_catalog.text)
  FROM pg_catalog.pg_class c
 WHERE c.relnamespace OPERATOR(pg_catalog.=)
	   (SELECT e.extnamespace FROM pg_catalog.pg_extension e
		 WHERE e.extname OPERATOR(pg_catalog.=) 'dedup'::pg_catalog.name)
   AND c.relname OPERATOR(pg_catalog.=) 'dedup_consumer_roles'::pg_catalog.name;

/*
 * The mapping is cached by every backend: a change must reach them however
 * it is made.  A statement trigger does not fire in logical replication's
 * apply worker, and no ordinary trigger fires with session_replication_role
 * = replica; these fire always, for each row and for TRUNCATE.
 */
CREATE FUNCTION @extschema@.dedup_consumer_roles_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'dedup_consumer_roles_changed'
LANGUAGE C;

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
 * dedup_allow_claimant(consumer, role): role (and its members) may claim
 * for consumer.  Only the key is the arbiter: any other unique index or
 * exclusion constraint a DBA adds raises its own error rather than making
 * the call silently do nothing.
 */
CREATE FUNCTION @extschema@.dedup_allow_claimant(consumer text, claimant regrole)
RETURNS void
LANGUAGE sql VOLATILE
BEGIN ATOMIC
	INSERT INTO @extschema@.dedup_consumer_roles (consumer_name, claimant)
		 VALUES (@extschema@.dedup_valid_consumer(consumer, 'dedup_allow_claimant'::pg_catalog.text),
				 claimant)
	ON CONFLICT (consumer_name, claimant) DO NOTHING;
END;

/* dedup_disallow_claimant(consumer, role): undo it; true if it was allowed */
CREATE FUNCTION @extschema@.dedup_disallow_claimant(consumer text, claimant regrole)
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

REVOKE ALL ON TABLE @extschema@.dedup_consumer_roles FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_consumer_roles_changed() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_allow_claimant(text, regrole) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_disallow_claimant(text, regrole) FROM PUBLIC;

/* --- looking and forgetting --- */

/*
 * Look without claiming, and replay on purpose.  dedup_seen only reads (a
 * hot standby can answer it); grant it to whoever must look, monitoring
 * included.  Forgetting makes redeliveries be processed again: for
 * operators only, every call is in the server log.
 */
CREATE FUNCTION @extschema@.dedup_seen(consumer text, message_id text,
									   OUT seen boolean, OUT processed_at timestamptz)
RETURNS record
AS 'MODULE_PATHNAME', 'dedup_seen'
LANGUAGE C STABLE PARALLEL RESTRICTED;

CREATE FUNCTION @extschema@.dedup_forget(consumer text, message_id text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'dedup_forget'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.dedup_forget_since(consumer text, since timestamptz)
RETURNS bigint
AS 'MODULE_PATHNAME', 'dedup_forget_since'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION @extschema@.dedup_seen(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_forget(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_forget_since(text, timestamptz) FROM PUBLIC;

/* --- observability --- */

/*
 * Claim counters live in shared memory; what the table holds is read from
 * the table and its planner statistics.  Monitoring roles (pg_monitor) may
 * read both views: they show consumers and numbers, never a message id.
 * dedup_claim_counters() has the failed claims by class of error and the
 * claim and lock-wait times, in milliseconds as pg_stat_statements has
 * them; its C symbol is that of its 1.1 definition, so that a database
 * still on 1.0 keeps working with this library.
 */
CREATE FUNCTION @extschema@.dedup_claim_counters(
	OUT consumer text,
	OUT claims bigint,
	OUT duplicates bigint,
	OUT lock_waits bigint,
	OUT serialization_failures bigint,
	OUT last_claim_at timestamptz,
	OUT last_duplicate_at timestamptz,
	OUT counters_since timestamptz,
	OUT deadlocks bigint,
	OUT lock_timeouts bigint,
	OUT cancels bigint,
	OUT other_errors bigint,
	OUT total_claim_time double precision,
	OUT max_claim_time double precision,
	OUT total_lock_wait_time double precision)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'dedup_claim_counters_1_1'
LANGUAGE C VOLATILE PARALLEL SAFE;

CREATE FUNCTION @extschema@.dedup_counters_status()
RETURNS text
AS 'MODULE_PATHNAME', 'dedup_counters_status'
LANGUAGE C VOLATILE PARALLEL SAFE;

/* dedup_stats_reset([consumer]): forget this database's claim counters */
CREATE FUNCTION @extschema@.dedup_stats_reset(consumer text DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'dedup_stats_reset'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

/*
 * What processed_messages holds, per consumer: every consumer with rows or
 * with its own window, on the sweep's own consumer walk and retention rule
 * (an invalid window expires nothing and says so; claims dated in the
 * future are counted).  Cheap at any size: one index probe per consumer for
 * the oldest and latest rows; row counts estimated from the planner
 * statistics (NULL before the first ANALYZE); the expired backlog counted
 * up to 100000 rows.  It reads the tables by OID and needs no privilege on
 * them, so it runs as its caller: EXECUTE (pg_monitor) is all a monitoring
 * role needs.
 */
CREATE FUNCTION @extschema@.dedup_consumer_storage(
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

/* dedup_storage: this database's record table, its growth and its sweeper */
CREATE VIEW @extschema@.dedup_storage AS
	SELECT pg_catalog.pg_table_size(t.oid) AS table_bytes,
		   pg_catalog.pg_indexes_size(t.oid) AS index_bytes,
		   pg_catalog.pg_total_relation_size(t.oid) AS total_bytes,
		   CASE WHEN t.reltuples OPERATOR(pg_catalog.>=) 0
				THEN t.reltuples::pg_catalog.int8 END AS rows_estimate,
		   st.consumers,
		   st.expired_backlog,
		   st.future_records,
		   w.sweeper_running,
		   w.last_sweep_end,
		   w.last_sweep_outcome,
		   w.total_rows_deleted,
		   w.last_error,
		   w.last_error_at,
		   w.next_sweep
	  FROM pg_catalog.pg_class t
	  JOIN pg_catalog.pg_extension e
		ON e.extnamespace OPERATOR(pg_catalog.=) t.relnamespace
	   AND e.extname OPERATOR(pg_catalog.=) 'dedup'
	 CROSS JOIN (SELECT pg_catalog.count(*) AS consumers,
						COALESCE(pg_catalog.sum(x.expired_backlog), 0)::pg_catalog.int8 AS expired_backlog,
						COALESCE(pg_catalog.sum(x.future_records), 0)::pg_catalog.int8 AS future_records
				   FROM @extschema@.dedup_consumer_storage() x) st
	 CROSS JOIN @extschema@.dedup_sweeper w
	 WHERE t.relname OPERATOR(pg_catalog.=) 'processed_messages';
COMMENT ON VIEW @extschema@.dedup_storage IS
	'dedup: size and growth of processed_messages, and the health of its sweeper';

/* dedup_stats: per consumer of this database, counters and storage */
CREATE VIEW @extschema@.dedup_stats AS
	SELECT COALESCE(c.consumer, s.consumer) AS consumer,
		   c.claims,
		   c.duplicates,
		   c.lock_waits,
		   c.serialization_failures,
		   c.last_claim_at,
		   c.last_duplicate_at,
		   s.records_estimate,
		   s.oldest_record_at,
		   pg_catalog.now() OPERATOR(pg_catalog.-) s.oldest_record_at AS oldest_record_age,
		   s.latest_record_at,
		   CASE WHEN s.keep_forever THEN 'forever'
				WHEN NOT s.retention_valid THEN 'invalid: ' OPERATOR(pg_catalog.||) s.retention::pg_catalog.text
				ELSE pg_catalog.justify_hours(s.retention)::pg_catalog.text END AS retention,
		   s.expired_backlog,
		   s.future_records,
		   CASE WHEN @extschema@.dedup_counters_status() OPERATOR(pg_catalog.<>) 'on'
				THEN @extschema@.dedup_counters_status()
				WHEN c.consumer IS NULL THEN 'not counted'
				ELSE 'on' END AS counters,
		   c.counters_since,
		   c.total_claim_time,
		   c.total_claim_time OPERATOR(pg_catalog./)
			   NULLIF(c.claims OPERATOR(pg_catalog.+) c.duplicates, 0)::pg_catalog.float8 AS mean_claim_time,
		   c.max_claim_time,
		   c.total_lock_wait_time,
		   c.deadlocks,
		   c.lock_timeouts,
		   c.cancels,
		   c.other_errors
	  FROM @extschema@.dedup_claim_counters() c
	  FULL JOIN @extschema@.dedup_consumer_storage() s
		ON s.consumer OPERATOR(pg_catalog.=) c.consumer;
COMMENT ON VIEW @extschema@.dedup_stats IS
	'dedup: claims, duplicates and storage per consumer in this database';

REVOKE ALL ON FUNCTION @extschema@.dedup_claim_counters() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_counters_status() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_stats_reset(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_consumer_storage() FROM PUBLIC;
REVOKE ALL ON @extschema@.dedup_stats FROM PUBLIC;
REVOKE ALL ON @extschema@.dedup_storage FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.dedup_claim_counters() TO pg_monitor;
GRANT EXECUTE ON FUNCTION @extschema@.dedup_counters_status() TO pg_monitor;
GRANT EXECUTE ON FUNCTION @extschema@.dedup_consumer_storage() TO pg_monitor;
GRANT SELECT ON @extschema@.dedup_stats TO pg_monitor;
GRANT SELECT ON @extschema@.dedup_storage TO pg_monitor;

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

REVOKE ALL ON TABLE @extschema@.stream_positions FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_claim_offset(text, text, integer, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_claim_offsets(text, text, integer, bigint[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_stream_positions(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_set_stream_position(text, text, integer, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_forget_stream_positions(text, text) FROM PUBLIC;

/*
 * Observability of ordered streams.  Claims by offset count in their
 * consumer's counters (dedup_stats), and per consumer and stream in
 * dedup_stream_counters() (its columns are those of dedup_claim_counters(),
 * then the stream).  dedup_stream_stats shows them with the positions of
 * each stream; dedup_stream_progress shows each partition's position and
 * how long ago it last moved: a position that stops while its partition
 * receives messages is a stuck consumer.  Both are for monitoring roles
 * (pg_monitor): names and offsets, never a message.
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

/* --- retiring a consumer --- */

/*
 * dedup_retire_consumer(consumer): a consumer that is gone for good: its
 * records, its window, its claimants and its stream positions; returns the
 * records deleted.
 */
CREATE FUNCTION @extschema@.dedup_retire_consumer(consumer text)
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

REVOKE ALL ON FUNCTION @extschema@.dedup_retire_consumer(text) FROM PUBLIC;

/* --- records colocated with the business rows on Citus --- */

/*
 * The registry of colocated records tables: distributed tables, created by
 * dedup_create_colocated_records() and owned by its caller (not members of
 * the extension: DROP EXTENSION leaves them, and their rows, in place, and
 * takes the registry with it).  Only registered tables are written by the
 * routed claims, swept, and counted.  Kept by pg_dump, as the tables it
 * names are.
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

/*
 * A registered records table that is dropped takes its registry row with
 * it, in the DROP's transaction, so that a table made later that is given
 * the same OID, of the same shape, is never taken for the registered one.
 * An event trigger rather than a check at each use: nothing in a table
 * tells a reused OID from the original.  ENABLE ALWAYS: it fires under
 * session_replication_role = replica too.  dedup_colocated_dropped()
 * deletes the rows as the registry's owner.
 */
CREATE FUNCTION @extschema@.dedup_colocated_dropped()
RETURNS event_trigger
AS 'MODULE_PATHNAME', 'dedup_colocated_dropped'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE EVENT TRIGGER dedup_colocated_dropped ON sql_drop
	EXECUTE FUNCTION @extschema@.dedup_colocated_dropped();
ALTER EVENT TRIGGER dedup_colocated_dropped ENABLE ALWAYS;

REVOKE ALL ON TABLE @extschema@.dedup_colocated_tables FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_create_colocated_records(text, regclass) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_claim_routed(regclass, text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_claim_routed_many(regclass, text, text, text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_seen_routed(regclass, text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_sweep_colocated(regclass) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_colocated_storage() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_register_colocated_records(regclass) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_forget_routed(regclass, text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_colocated_dropped() FROM PUBLIC;
GRANT SELECT ON TABLE @extschema@.dedup_colocated_tables TO pg_monitor;
GRANT EXECUTE ON FUNCTION @extschema@.dedup_colocated_storage() TO pg_monitor;

/*
 * Tell a running sweeper about this database (a newly created extension is
 * swept at once), or warn, once, that without shared_preload_libraries
 * nothing will be swept.
 */
SELECT @extschema@.dedup_sweeper_wake();
