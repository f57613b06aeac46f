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
 * retention sweep, which deletes a consumer's oldest rows first.
 */
CREATE TABLE @extschema@.processed_messages (
	consumer_name text NOT NULL,
	message_id text NOT NULL,
	processed_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	CONSTRAINT processed_messages_pkey PRIMARY KEY (consumer_name, message_id)
);
CREATE INDEX processed_messages_consumer_time_idx
	ON @extschema@.processed_messages (consumer_name, processed_at);

COMMENT ON TABLE @extschema@.processed_messages IS
	'dedup: messages each consumer has claimed (written by dedup_claim)';

/*
 * The records are user data: pg_dump must keep them so that a restored
 * database still rejects redeliveries.
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

CREATE VIEW @extschema@.dedup_sweeper AS
	SELECT pg_catalog.current_database() AS database,
		   pg_catalog.current_setting('dedup.retention') AS default_retention,
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
GRANT EXECUTE ON FUNCTION @extschema@.dedup_sweeper_status() TO pg_monitor;
GRANT SELECT ON @extschema@.dedup_sweeper TO pg_monitor;

/*
 * Tell a running sweeper about this database (a newly created extension is
 * swept at once), or warn, once, that without shared_preload_libraries
 * nothing will be swept.
 */
SELECT @extschema@.dedup_sweeper_wake();
