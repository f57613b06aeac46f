/* sql/dedup--1.5.sql: dedup 1.5, the current version, as a fresh install creates it */

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
 * Keeping them in step.  A change to the SQL objects in 1.6 (say) is
 * written twice:
 *   - as an update, in dedup--1.5--1.6.sql: the change itself (ALTER,
 *     CREATE OR REPLACE, or DROP and CREATE), the guard at its top naming
 *     every object it creates, as in the earlier update scripts;
 *   - in final form here: this file becomes dedup--1.6.sql (git mv: one
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
 * inside a string literal.  A parameter of a SQL function that has the name
 * of a column is written qualified with its function's name: in the
 * function's queries the column would win.  Nothing is granted to PUBLIC.
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
 * sequence, view or type collides with a relation or a type of its name,
 * an index with a relation, a function with one of the same argument types
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
			'function dedup_colocated_dropped()',
			'table dedup_outbox_destinations',
			'index dedup_outbox_destinations_pkey',
			'table dedup_outbox_publishers',
			'index dedup_outbox_publishers_pkey',
			'table dedup_outbox_signing_key',
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
			'table dedup_outbox_dead_letters',
			'index dedup_outbox_dead_letters_pkey',
			'function dedup_outbox_refused(pg_catalog.text,pg_catalog.int8[],pg_catalog.text)',
			'function dedup_outbox_refused_wal(pg_catalog.text,pg_catalog.text,pg_catalog.text,pg_catalog.text,pg_catalog.jsonb,pg_catalog.text,pg_catalog.int4,pg_catalog.text)',
			'function dedup_outbox_audit_retry(pg_catalog.text,pg_catalog.int8)',
			'function dedup_outbox_retry(pg_catalog.text)',
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
			DETAIL = pg_catalog.format('dedup 1.5 creates %s %s in schema %s; the one there is owned by role "%s".'::pg_catalog.text,
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
 * change no indexed column: fillfactor 80 leaves room for them to be HOT
 * updates.  pg_dump keeps the unsent messages.
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
REVOKE ALL ON TABLE @extschema@.dedup_outbox_signing_key FROM PUBLIC;
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
REVOKE ALL ON TABLE @extschema@.dedup_outbox_dead_letters FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_outbox_refused(text, bigint[], text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_outbox_refused_wal(text, text, text, text, jsonb, text, integer, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_outbox_audit_retry(text, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_outbox_retry(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_outbox_sweep() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_outbox_retention() FROM PUBLIC;
REVOKE ALL ON @extschema@.dedup_outbox_backlog FROM PUBLIC;
REVOKE ALL ON @extschema@.dedup_outbox_slots FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.dedup_outbox_retention() TO pg_monitor;
GRANT SELECT ON @extschema@.dedup_outbox_backlog TO pg_monitor;
GRANT SELECT ON @extschema@.dedup_outbox_slots TO pg_monitor;

/*
 * Tell a running sweeper about this database (a newly created extension is
 * swept at once), or warn, once, that without shared_preload_libraries
 * nothing will be swept.
 */
SELECT @extschema@.dedup_sweeper_wake();
