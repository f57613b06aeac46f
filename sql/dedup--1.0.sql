/* sql/dedup--1.0.sql: objects of dedup 1.0 */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION dedup" to load this file. \quit

/*
 * Security notes for this script (PostgreSQL docs, "Security Considerations
 * for Extension Scripts"): every object is created schema-qualified, without
 * IF NOT EXISTS or OR REPLACE, so a pre-existing object with a clashing name
 * makes CREATE EXTENSION fail instead of being adopted; every function and
 * operator used is qualified with pg_catalog; @extschema@ never appears inside
 * a string literal.
 */

/*
 * One row per message a consumer has processed.  The primary key is the
 * deduplication decision; the (consumer_name, processed_at) index serves the
 * retention sweep, which deletes a consumer's oldest rows first.  The table
 * churns (inserted by claims, deleted by sweeps), so autovacuum visits it
 * after 2% of it has changed rather than 20%, which keeps bloat and the
 * planner's row estimates in check.
 */
CREATE TABLE @extschema@.processed_messages (
	consumer_name text NOT NULL,
	message_id text NOT NULL,
	processed_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	CONSTRAINT processed_messages_pkey PRIMARY KEY (consumer_name, message_id)
) WITH (autovacuum_vacuum_scale_factor = 0.02,
		autovacuum_analyze_scale_factor = 0.02);
CREATE INDEX processed_messages_consumer_time_idx
	ON @extschema@.processed_messages (consumer_name, processed_at);

COMMENT ON TABLE @extschema@.processed_messages IS
	'dedup: messages each consumer has claimed (written by dedup_claim)';

/*
 * The records are user data: pg_dump must keep them so that a restored
 * database still rejects redeliveries.  (One table per statement: a second
 * pg_extension_config_dump() call in the same command would update the
 * pg_extension row twice.)
 */
SELECT pg_catalog.pg_extension_config_dump(c.oid::pg_catalog.regclass, '')
  FROM pg_catalog.pg_class c
 WHERE c.relnamespace OPERATOR(pg_catalog.=)
	   (SELECT e.extnamespace FROM pg_catalog.pg_extension e
		 WHERE e.extname OPERATOR(pg_catalog.=) 'dedup')
   AND c.relname OPERATOR(pg_catalog.=) 'processed_messages';

/*
 * dedup_claim(consumer, message_id): true when this transaction has just
 * recorded the claim (do the work), false when the message was already
 * processed (skip).  Never NULL: bad input raises an error.
 *
 * SECURITY DEFINER so that callers need only EXECUTE, never INSERT, UPDATE or
 * DELETE on processed_messages.  It runs no search_path-dependent code: the C
 * function reaches its table through the schema of its own pg_proc entry with
 * a fully qualified statement that calls no function or operator.
 */
CREATE FUNCTION @extschema@.dedup_claim(consumer text, message_id text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'dedup_claim'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER;

COMMENT ON FUNCTION @extschema@.dedup_claim(text, text) IS
	'dedup: record a message as processed in this transaction; true = first time, false = duplicate';

/* Least privilege: nothing for PUBLIC; a DBA grants EXECUTE on dedup_claim. */
REVOKE ALL ON TABLE @extschema@.processed_messages FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_claim(text, text) FROM PUBLIC;

/*
 * Retention.  A consumer's claims expire when they are older than its
 * window, counted back from that consumer's latest claim (so an idle
 * consumer, or a server that was down, keeps what redeliveries still need).
 * The window is the consumer's row here, else the dedup.retention setting.
 */
CREATE TABLE @extschema@.dedup_retention (
	consumer_name text NOT NULL,
	retention interval,
	CONSTRAINT dedup_retention_pkey PRIMARY KEY (consumer_name),
	CONSTRAINT dedup_retention_positive
		CHECK (retention OPERATOR(pg_catalog.>) '0'::pg_catalog.interval)
);
COMMENT ON TABLE @extschema@.dedup_retention IS
	'dedup: per-consumer retention windows; a NULL retention keeps the consumer''s claims forever';
COMMENT ON COLUMN @extschema@.dedup_retention.retention IS
	'window counted back from the consumer''s latest claim; NULL = forever';

SELECT pg_catalog.pg_extension_config_dump(c.oid::pg_catalog.regclass, '')
  FROM pg_catalog.pg_class c
 WHERE c.relnamespace OPERATOR(pg_catalog.=)
	   (SELECT e.extnamespace FROM pg_catalog.pg_extension e
		 WHERE e.extname OPERATOR(pg_catalog.=) 'dedup')
   AND c.relname OPERATOR(pg_catalog.=) 'dedup_retention';

/* dedup_set_retention(consumer, window): give a consumer its own window */
CREATE FUNCTION @extschema@.dedup_set_retention(consumer text, retention interval)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
BEGIN
	IF consumer IS NULL OR retention IS NULL THEN
		RAISE EXCEPTION 'arguments of dedup_set_retention must not be null'
			USING ERRCODE = 'null_value_not_allowed',
				  HINT = 'Use dedup_keep_forever(consumer) to keep a consumer''s claims forever.';
	END IF;
	IF retention OPERATOR(pg_catalog.<=) '0'::pg_catalog.interval THEN
		RAISE EXCEPTION 'retention must be positive, not %', retention
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	INSERT INTO dedup_retention AS r (consumer_name, retention)
		 VALUES (consumer, retention)
	ON CONFLICT (consumer_name) DO UPDATE SET retention = excluded.retention;
END
$$;

/* dedup_keep_forever(consumer): never expire this consumer's claims */
CREATE FUNCTION @extschema@.dedup_keep_forever(consumer text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
BEGIN
	IF consumer IS NULL THEN
		RAISE EXCEPTION 'argument "consumer" of dedup_keep_forever must not be null'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	INSERT INTO dedup_retention AS r (consumer_name, retention)
		 VALUES (consumer, NULL)
	ON CONFLICT (consumer_name) DO UPDATE SET retention = NULL;
END
$$;

/* dedup_reset_retention(consumer): back to dedup.retention; true if it had its own */
CREATE FUNCTION @extschema@.dedup_reset_retention(consumer text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
BEGIN
	IF consumer IS NULL THEN
		RAISE EXCEPTION 'argument "consumer" of dedup_reset_retention must not be null'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	DELETE FROM dedup_retention r WHERE r.consumer_name OPERATOR(pg_catalog.=) consumer;
	RETURN FOUND;
END
$$;

/*
 * dedup_sweep([consumer]): delete expired claims now, in this transaction;
 * returns the number of rows deleted.  SECURITY DEFINER like dedup_claim:
 * EXECUTE is all a maintenance role needs, and all it can do is what the
 * retention rule allows.
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

/*
 * Observability.  Claim counters live in shared memory; what the table
 * holds is read from the table and its planner statistics.
 * Monitoring roles (pg_monitor) may read both views: they show consumers
 * and numbers, never a message id.
 */
CREATE FUNCTION @extschema@.dedup_claim_counters(
	OUT consumer text,
	OUT claims bigint,
	OUT duplicates bigint,
	OUT lock_waits bigint,
	OUT serialization_failures bigint,
	OUT last_claim_at timestamptz,
	OUT last_duplicate_at timestamptz,
	OUT counters_since timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'dedup_claim_counters'
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
 * with its own window.  Cheap at any size: one index probe per consumer for
 * the oldest and latest rows; row counts estimated from the planner
 * statistics (NULL before the first ANALYZE); the expired backlog counted up
 * to 100000 rows.  SECURITY DEFINER so that monitoring roles need no access
 * to the table; the body is bound at creation (BEGIN ATOMIC), so it does
 * not depend on anyone's search_path.
 */
CREATE FUNCTION @extschema@.dedup_consumer_storage(
	OUT consumer text,
	OUT records_estimate bigint,
	OUT oldest_record_at timestamptz,
	OUT latest_record_at timestamptz,
	OUT retention interval,
	OUT keep_forever boolean,
	OUT expired_backlog bigint)
RETURNS SETOF record
LANGUAGE sql STABLE SECURITY DEFINER
BEGIN ATOMIC
	WITH RECURSIVE with_rows(name) AS (
		(SELECT m.consumer_name FROM processed_messages m
		  ORDER BY m.consumer_name LIMIT 1)
	  UNION ALL
		SELECT (SELECT m.consumer_name FROM processed_messages m
				 WHERE m.consumer_name OPERATOR(pg_catalog.>) w.name
				 ORDER BY m.consumer_name LIMIT 1)
		  FROM with_rows w WHERE w.name IS NOT NULL
	),
	consumers(name) AS (
		SELECT w.name FROM with_rows w WHERE w.name IS NOT NULL
		UNION
		SELECT r.consumer_name FROM dedup_retention r
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
			   (SELECT pg_catalog.min(m.processed_at) FROM processed_messages m
				 WHERE m.consumer_name OPERATOR(pg_catalog.=) c.name) AS oldest,
			   (SELECT pg_catalog.max(m.processed_at) FROM processed_messages m
				 WHERE m.consumer_name OPERATOR(pg_catalog.=) c.name) AS latest,
			   CASE WHEN r.consumer_name IS NULL THEN dedup_default_retention()
					ELSE r.retention END AS retention
		  FROM consumers c
		  LEFT JOIN dedup_retention r ON r.consumer_name OPERATOR(pg_catalog.=) c.name
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
		   CASE WHEN w.retention IS NULL OR w.latest IS NULL THEN 0
				ELSE (SELECT pg_catalog.count(*) FROM
						(SELECT FROM processed_messages m
						  WHERE m.consumer_name OPERATOR(pg_catalog.=) w.name
							AND m.processed_at OPERATOR(pg_catalog.<)
								(w.latest OPERATOR(pg_catalog.-) w.retention)
						  LIMIT 100000) expired)
		   END
	  FROM windows w;
END;

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
				ELSE pg_catalog.justify_hours(s.retention)::pg_catalog.text END AS retention,
		   s.expired_backlog,
		   CASE WHEN @extschema@.dedup_counters_status() OPERATOR(pg_catalog.<>) 'on'
				THEN @extschema@.dedup_counters_status()
				WHEN c.consumer IS NULL THEN 'not counted'
				ELSE 'on' END AS counters,
		   c.counters_since
	  FROM @extschema@.dedup_claim_counters() c
	  FULL JOIN @extschema@.dedup_consumer_storage() s
		ON s.consumer OPERATOR(pg_catalog.=) c.consumer;
COMMENT ON VIEW @extschema@.dedup_stats IS
	'dedup: claims, duplicates and storage per consumer in this database';

/* dedup_storage: this database's record table, its growth and its sweeper */
CREATE VIEW @extschema@.dedup_storage AS
	SELECT pg_catalog.pg_table_size(t.oid) AS table_bytes,
		   pg_catalog.pg_indexes_size(t.oid) AS index_bytes,
		   pg_catalog.pg_total_relation_size(t.oid) AS total_bytes,
		   CASE WHEN t.reltuples OPERATOR(pg_catalog.>=) 0
				THEN t.reltuples::pg_catalog.int8 END AS rows_estimate,
		   st.consumers,
		   st.expired_backlog,
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
						COALESCE(pg_catalog.sum(x.expired_backlog), 0)::pg_catalog.int8 AS expired_backlog
				   FROM @extschema@.dedup_consumer_storage() x) st
	 CROSS JOIN @extschema@.dedup_sweeper w
	 WHERE t.relname OPERATOR(pg_catalog.=) 'processed_messages';
COMMENT ON VIEW @extschema@.dedup_storage IS
	'dedup: size and growth of processed_messages, and the health of its sweeper';

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

/*
 * Tell a running sweeper about this database (a newly created extension is
 * swept at once), or warn, once, that without shared_preload_libraries
 * nothing will be swept.
 */
SELECT @extschema@.dedup_sweeper_wake();
