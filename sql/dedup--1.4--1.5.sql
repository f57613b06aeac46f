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
			'table dedup_outbox_signing_key'
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
