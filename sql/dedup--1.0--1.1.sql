/* sql/dedup--1.0--1.1.sql: from dedup 1.0 to 1.1 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION dedup UPDATE TO '1.1'" to load this file. \quit

/*
 * The same rules as the install script: everything schema-qualified,
 * operators included; CREATE OR REPLACE only for functions that are already
 * members of the extension (it fails for anything else).
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
			'function dedup_claim(pg_catalog.text,pg_catalog.text,pg_catalog.bytea)',
			'type dedup_claim_status',
			'function dedup_try_claim(pg_catalog.text,pg_catalog.text,pg_catalog.bytea)',
			'function dedup_claim_many(pg_catalog.text,pg_catalog.text[])',
			'function dedup_retention_is_valid(pg_catalog.interval)',
			'function dedup_retention_cutoff(pg_catalog.timestamptz,pg_catalog.interval)',
			'function dedup_valid_retention(pg_catalog.interval)',
			'function dedup_valid_consumer(pg_catalog.text,pg_catalog.text)',
			'table dedup_consumer_roles',
			'index dedup_consumer_roles_pkey',
			'function dedup_consumer_roles_changed()',
			'function dedup_allow_claimant(pg_catalog.text,pg_catalog.regrole)',
			'function dedup_disallow_claimant(pg_catalog.text,pg_catalog.regrole)',
			'function dedup_seen(pg_catalog.text,pg_catalog.text)',
			'function dedup_forget(pg_catalog.text,pg_catalog.text)',
			'function dedup_forget_since(pg_catalog.text,pg_catalog.timestamptz)',
			'function dedup_retire_consumer(pg_catalog.text)',
			'function dedup_consumer_storage()',
			'view dedup_storage',
			'function dedup_claim_counters()',
			'view dedup_stats'
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
			DETAIL = pg_catalog.format('dedup 1.1 creates %s %s in schema %s; the one there is owned by role "%s".'::pg_catalog.text,
									   planted.kind,
									   pg_catalog.split_part(planted.name, '('::pg_catalog.text, 1),
									   pg_catalog.quote_ident(planted.nspname), planted.owner),
			HINT = 'Drop or rename it, then run ALTER EXTENSION dedup UPDATE (or CREATE EXTENSION) again. A schema that only the extension''s owner can create in, as in the README''s install steps, admits no such object.'::pg_catalog.text;
	END IF;
END;
$guard$;

/*
 * The claim writes processed_messages itself, by OID, so it no longer needs
 * its owner's rights: it runs as the caller, which is what the
 * per-consumer claimant check (dedup_consumer_roles) looks at.
 */
ALTER FUNCTION @extschema@.dedup_claim(text, text) SECURITY INVOKER;

/*
 * A payload fingerprint, recorded with a claim that gives one (NULL
 * otherwise: a null costs no space in a row that already has a null bitmap
 * slot to spare, and ADD COLUMN rewrites nothing).  The same message id
 * claimed again with a different fingerprint is an error (SQLSTATE UD001):
 * the producer reused an id.
 */
ALTER TABLE @extschema@.processed_messages ADD COLUMN fingerprint bytea;
COMMENT ON COLUMN @extschema@.processed_messages.fingerprint IS
	'digest of the message given with its claim, if any (at most 64 bytes)';

CREATE FUNCTION @extschema@.dedup_claim(consumer text, message_id text, fingerprint bytea)
RETURNS boolean
AS 'MODULE_PATHNAME', 'dedup_claim'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.dedup_claim(text, text, bytea) IS
	'dedup: dedup_claim, and an error if the message id was claimed with a different fingerprint';

/*
 * dedup_try_claim: never waits for another transaction's claim of the same
 * key; says so ('in_progress') instead.
 */
CREATE TYPE @extschema@.dedup_claim_status AS ENUM ('claimed', 'duplicate', 'in_progress');

CREATE FUNCTION @extschema@.dedup_try_claim(consumer text, message_id text,
											 fingerprint bytea DEFAULT NULL)
RETURNS @extschema@.dedup_claim_status
AS 'MODULE_PATHNAME', 'dedup_try_claim'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.dedup_try_claim(text, text, bytea) IS
	'dedup: claim without waiting; claimed, duplicate, or in_progress (another open transaction holds the claim)';

REVOKE ALL ON FUNCTION @extschema@.dedup_claim(text, text, bytea) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_try_claim(text, text, bytea) FROM PUBLIC;

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

REVOKE ALL ON FUNCTION @extschema@.dedup_claim_many(text, text[]) FROM PUBLIC;

/*
 * Retention windows.  A valid window moves every component back and is at
 * most 100 years; the constraint is NOT VALID so that an upgrade never fails
 * on a row 1.0 accepted (the sweep keeps such a consumer's claims, the
 * views show its window as invalid).
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

ALTER TABLE @extschema@.dedup_retention
	DROP CONSTRAINT dedup_retention_positive,
	ADD CONSTRAINT dedup_retention_valid
		CHECK (@extschema@.dedup_retention_is_valid(retention)) NOT VALID;

/*
 * The maintenance functions are bound to the extension's objects when they
 * are created (BEGIN ATOMIC), so renaming or replacing a schema later cannot
 * redirect them; SECURITY DEFINER, so that EXECUTE is all a maintenance role
 * needs, and all it can do is what the function does.
 */
CREATE OR REPLACE FUNCTION @extschema@.dedup_set_retention(consumer text, retention interval)
RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER
BEGIN ATOMIC
	INSERT INTO @extschema@.dedup_retention AS r (consumer_name, retention)
		 VALUES (@extschema@.dedup_valid_consumer(consumer, 'dedup_set_retention'),
				 @extschema@.dedup_valid_retention(retention))
	ON CONFLICT (consumer_name) DO UPDATE SET retention = excluded.retention;
END;

CREATE OR REPLACE FUNCTION @extschema@.dedup_keep_forever(consumer text)
RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER
BEGIN ATOMIC
	INSERT INTO @extschema@.dedup_retention AS r (consumer_name, retention)
		 VALUES (@extschema@.dedup_valid_consumer(consumer, 'dedup_keep_forever'), NULL)
	ON CONFLICT (consumer_name) DO UPDATE SET retention = NULL;
END;

CREATE OR REPLACE FUNCTION @extschema@.dedup_reset_retention(consumer text)
RETURNS boolean
LANGUAGE sql VOLATILE SECURITY DEFINER
BEGIN ATOMIC
	SELECT @extschema@.dedup_valid_consumer(consumer, 'dedup_reset_retention');
	WITH deleted AS (
		DELETE FROM @extschema@.dedup_retention r
		 WHERE r.consumer_name OPERATOR(pg_catalog.=) consumer
		RETURNING 1)
	SELECT pg_catalog.count(*) OPERATOR(pg_catalog.>) 0 FROM deleted;
END;

/*
 * Who may claim for whom.  When a consumer has rows here, only members of
 * those roles may claim for it; dedup.require_consumer_roles = on makes
 * every consumer need one.  A statement trigger tells every backend about a
 * change (claims cache whether the table is empty).
 */
CREATE TABLE @extschema@.dedup_consumer_roles (
	consumer_name text NOT NULL,
	claimant regrole NOT NULL,
	CONSTRAINT dedup_consumer_roles_pkey PRIMARY KEY (consumer_name, claimant)
);
COMMENT ON TABLE @extschema@.dedup_consumer_roles IS
	'dedup: which roles may claim for a consumer; consumers without a row are open to every claimant unless dedup.require_consumer_roles is on';

SELECT pg_catalog.pg_extension_config_dump(c.oid::pg_catalog.regclass, '')
  FROM pg_catalog.pg_class c
 WHERE c.relnamespace OPERATOR(pg_catalog.=)
	   (SELECT e.extnamespace FROM pg_catalog.pg_extension e
		 WHERE e.extname OPERATOR(pg_catalog.=) 'dedup')
   AND c.relname OPERATOR(pg_catalog.=) 'dedup_consumer_roles';

CREATE FUNCTION @extschema@.dedup_consumer_roles_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'dedup_consumer_roles_changed'
LANGUAGE C;

CREATE TRIGGER dedup_consumer_roles_changed
	AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON @extschema@.dedup_consumer_roles
	FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.dedup_consumer_roles_changed();

/* dedup_allow_claimant(consumer, role): role (and its members) may claim for consumer */
CREATE FUNCTION @extschema@.dedup_allow_claimant(consumer text, claimant regrole)
RETURNS void
LANGUAGE sql VOLATILE
BEGIN ATOMIC
	INSERT INTO @extschema@.dedup_consumer_roles (consumer_name, claimant)
		 VALUES (@extschema@.dedup_valid_consumer(consumer, 'dedup_allow_claimant'),
				 claimant)
	ON CONFLICT DO NOTHING;
END;

/* dedup_disallow_claimant(consumer, role): undo it; true if it was allowed */
CREATE FUNCTION @extschema@.dedup_disallow_claimant(consumer text, claimant regrole)
RETURNS boolean
LANGUAGE sql VOLATILE
BEGIN ATOMIC
	SELECT @extschema@.dedup_valid_consumer(consumer, 'dedup_disallow_claimant');
	WITH deleted AS (
		DELETE FROM @extschema@.dedup_consumer_roles r
		 WHERE r.consumer_name OPERATOR(pg_catalog.=) consumer
		   AND r.claimant OPERATOR(pg_catalog.=) claimant
		RETURNING 1)
	SELECT pg_catalog.count(*) OPERATOR(pg_catalog.>) 0 FROM deleted;
END;

REVOKE ALL ON TABLE @extschema@.dedup_consumer_roles FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_consumer_roles_changed() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_allow_claimant(text, regrole) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_disallow_claimant(text, regrole) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_retention_is_valid(interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_retention_cutoff(timestamptz, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_valid_retention(interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_valid_consumer(text, text) FROM PUBLIC;

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

/*
 * dedup_retire_consumer(consumer): a consumer that is gone for good: its
 * records, its window and its claimants; returns the records deleted.
 */
CREATE FUNCTION @extschema@.dedup_retire_consumer(consumer text)
RETURNS bigint
LANGUAGE sql VOLATILE SECURITY DEFINER
BEGIN ATOMIC
	SELECT @extschema@.dedup_valid_consumer(consumer, 'dedup_retire_consumer');
	DELETE FROM @extschema@.dedup_retention r
	 WHERE r.consumer_name OPERATOR(pg_catalog.=) consumer;
	DELETE FROM @extschema@.dedup_consumer_roles r
	 WHERE r.consumer_name OPERATOR(pg_catalog.=) consumer;
	SELECT @extschema@.dedup_forget_since(consumer, '-infinity');
END;

REVOKE ALL ON FUNCTION @extschema@.dedup_seen(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_forget(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_forget_since(text, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_retire_consumer(text) FROM PUBLIC;

/*
 * Storage figures follow the 1.1 retention rule (counted back from the
 * earlier of the latest claim and now; an invalid window expires nothing
 * and says so), and count claims dated in the future.
 */
DROP VIEW @extschema@.dedup_stats;
DROP VIEW @extschema@.dedup_storage;
DROP FUNCTION @extschema@.dedup_consumer_storage();

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
LANGUAGE sql STABLE SECURITY DEFINER
BEGIN ATOMIC
	WITH RECURSIVE with_rows(name) AS (
		(SELECT m.consumer_name FROM @extschema@.processed_messages m
		  ORDER BY m.consumer_name LIMIT 1)
	  UNION ALL
		SELECT (SELECT m.consumer_name FROM @extschema@.processed_messages m
				 WHERE m.consumer_name OPERATOR(pg_catalog.>) w.name
				 ORDER BY m.consumer_name LIMIT 1)
		  FROM with_rows w WHERE w.name IS NOT NULL
	),
	consumers(name) AS (
		SELECT w.name FROM with_rows w WHERE w.name IS NOT NULL
		UNION
		SELECT r.consumer_name FROM @extschema@.dedup_retention r
	),
	stats AS (
		SELECT s.most_common_vals::pg_catalog.text::pg_catalog.text[] AS vals,
			   s.most_common_freqs AS freqs,
			   s.null_frac,
			   CASE WHEN s.n_distinct OPERATOR(pg_catalog.>=) 0 THEN s.n_distinct
					ELSE (OPERATOR(pg_catalog.-) s.n_distinct) OPERATOR(pg_catalog.*) c.reltuples
			   END AS distinct_values,
			   c.reltuples
		  FROM pg_catalog.pg_class c
		  JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
		  JOIN pg_catalog.pg_stats s
			ON s.schemaname OPERATOR(pg_catalog.=) n.nspname
		   AND s.tablename OPERATOR(pg_catalog.=) c.relname
		   AND s.attname OPERATOR(pg_catalog.=) 'consumer_name'
		 WHERE c.oid OPERATOR(pg_catalog.=) 'processed_messages'::pg_catalog.regclass
		   AND c.reltuples OPERATOR(pg_catalog.>=) 0
	),
	windows AS (
		SELECT c.name,
			   (SELECT pg_catalog.min(m.processed_at) FROM @extschema@.processed_messages m
				 WHERE m.consumer_name OPERATOR(pg_catalog.=) c.name) AS oldest,
			   (SELECT pg_catalog.max(m.processed_at) FROM @extschema@.processed_messages m
				 WHERE m.consumer_name OPERATOR(pg_catalog.=) c.name) AS latest,
			   CASE WHEN r.consumer_name IS NULL THEN @extschema@.dedup_default_retention()
					ELSE r.retention END AS retention
		  FROM consumers c
		  LEFT JOIN @extschema@.dedup_retention r ON r.consumer_name OPERATOR(pg_catalog.=) c.name
	)
	SELECT w.name,
		   (SELECT CASE
				WHEN w.name OPERATOR(pg_catalog.=) ANY (s.vals) THEN
					pg_catalog.round(s.freqs[pg_catalog.array_position(s.vals, w.name)]
									 OPERATOR(pg_catalog.*) s.reltuples)
				ELSE
					pg_catalog.round((1 OPERATOR(pg_catalog.-) s.null_frac
									  OPERATOR(pg_catalog.-) COALESCE((SELECT pg_catalog.sum(f) FROM pg_catalog.unnest(s.freqs) f), 0))
									 OPERATOR(pg_catalog.*) s.reltuples
									 OPERATOR(pg_catalog./) GREATEST(s.distinct_values
											OPERATOR(pg_catalog.-) COALESCE(pg_catalog.cardinality(s.vals), 0), 1))
			   END::pg_catalog.int8 FROM stats s),
		   w.oldest,
		   w.latest,
		   w.retention,
		   w.retention IS NULL,
		   COALESCE(@extschema@.dedup_retention_is_valid(w.retention), true),
		   COALESCE((SELECT pg_catalog.count(*) FROM
						(SELECT FROM @extschema@.processed_messages m
						  WHERE m.consumer_name OPERATOR(pg_catalog.=) w.name
							AND m.processed_at OPERATOR(pg_catalog.<)
								@extschema@.dedup_retention_cutoff(w.latest, w.retention)
						  LIMIT 100000) expired), 0),
		   (SELECT pg_catalog.count(*) FROM
				(SELECT FROM @extschema@.processed_messages m
				  WHERE m.consumer_name OPERATOR(pg_catalog.=) w.name
					AND m.processed_at OPERATOR(pg_catalog.>) pg_catalog.now()
				  LIMIT 100000) future)
	  FROM windows w;
END;

/*
 * dedup_stats is created again at the end of this script, over the 1.1
 * definition of dedup_claim_counters().
 */

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

REVOKE ALL ON FUNCTION @extschema@.dedup_consumer_storage() FROM PUBLIC;
REVOKE ALL ON @extschema@.dedup_storage FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.dedup_consumer_storage() TO pg_monitor;
GRANT SELECT ON @extschema@.dedup_storage TO pg_monitor;

/*
 * Claim latency and errors.  dedup_claim_counters() gains
 * the failed claims by class of error (serialization failures no longer
 * include deadlocks) and the claim and lock-wait times, in milliseconds as
 * pg_stat_statements has them; its 1.1 definition has its own C symbol, so
 * that a database still on the 1.0 definition keeps working with this
 * library.  dedup_stats shows them after its 1.0 columns.
 */
DROP FUNCTION @extschema@.dedup_claim_counters();

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
REVOKE ALL ON @extschema@.dedup_stats FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.dedup_claim_counters() TO pg_monitor;
GRANT SELECT ON @extschema@.dedup_stats TO pg_monitor;
