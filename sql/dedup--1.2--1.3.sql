/* sql/dedup--1.2--1.3.sql: from dedup 1.2 to 1.3 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION dedup UPDATE TO '1.3'" to load this file. \quit

/*
 * The same rules as the earlier scripts: everything schema-qualified, every
 * literal in a function body or view cast to its schema-qualified type, no
 * OR REPLACE but for the extension's own functions, no IF NOT EXISTS.
 */

/* --- colocated records on Citus: a dropped table leaves the registry (issue 29, item 8) --- */

/*
 * A registered records table that is dropped takes its registry row with
 * it, in the DROP's transaction: until 1.2 the row stayed, and a table made
 * later that was given the same OID, of the same shape, was taken for the
 * registered one (claimed into, swept).  An event trigger rather than a
 * check at each use: nothing in a table tells a reused OID from the
 * original.  ENABLE ALWAYS: it fires under session_replication_role =
 * replica too.  dedup_colocated_dropped() deletes the rows as the
 * registry's owner (colocated.c).  Rows of tables dropped before this
 * update are deleted here.
 */
CREATE FUNCTION @extschema@.dedup_colocated_dropped()
RETURNS event_trigger
AS 'MODULE_PATHNAME', 'dedup_colocated_dropped'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.dedup_colocated_dropped() FROM PUBLIC;

CREATE EVENT TRIGGER dedup_colocated_dropped ON sql_drop
	EXECUTE FUNCTION @extschema@.dedup_colocated_dropped();
ALTER EVENT TRIGGER dedup_colocated_dropped ENABLE ALWAYS;

DELETE FROM @extschema@.dedup_colocated_tables t
 WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_class c
					WHERE c.oid OPERATOR(pg_catalog.=) t.records::pg_catalog.oid);
