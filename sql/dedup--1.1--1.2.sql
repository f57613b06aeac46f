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
 * dedup_retire_consumer: 1.1 called dedup_forget_since(consumer,
 * '-infinity') with an untyped literal, which a dedup_forget_since(text,
 * text) planted beside the real one would have won.  Bound again here.
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
	SELECT @extschema@.dedup_forget_since(consumer, '-infinity'::pg_catalog.timestamptz);
END;

/* --- audit trail (issue 14 items 5 and 9) --- */

/*
 * Every change of a retention window is written to the server log (audit.c),
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
