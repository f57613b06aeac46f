--
-- Look-alikes planted in the extension's schema before CREATE EXTENSION and
-- ALTER EXTENSION UPDATE: whatever the install path, no routine or view of
-- dedup may use a function, operator, type or table that is neither in
-- pg_catalog nor a member of the extension (1.1 bound
-- dedup_retire_consumer, a SECURITY DEFINER function, to a planted
-- dedup_forget_since(text, text)); and PUBLIC holds no privilege on any of
-- its objects.  An update that meets an object planted under a name it
-- creates fails first, naming it, and leaves the extension as it was.
--
-- What the extension's objects, and what belongs to them (a view's rule, a
-- table's defaults, constraints, indexes and triggers, an array type), use
-- that is neither theirs nor pg_catalog's nor their schema.
CREATE TEMP VIEW foreign_uses AS
WITH RECURSIVE ext AS (
	SELECT e.oid, e.extnamespace FROM pg_extension e WHERE e.extname = 'dedup'),
owned(classid, objid) AS (
	SELECT d.classid, d.objid FROM pg_depend d, ext
	 WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid
	   AND d.deptype = 'e'
	UNION
	SELECT d.classid, d.objid FROM pg_depend d
	  JOIN owned o ON d.refclassid = o.classid AND d.refobjid = o.objid
	 WHERE d.deptype IN ('a', 'i'))
SELECT pg_describe_object(d.classid, d.objid, d.objsubid) AS object,
	   pg_describe_object(d.refclassid, d.refobjid, d.refobjsubid) AS uses
  FROM pg_depend d
  JOIN owned o ON (d.classid, d.objid) = (o.classid, o.objid)
 CROSS JOIN ext
 WHERE (d.refclassid, d.refobjid) NOT IN (SELECT classid, objid FROM owned)
   AND NOT (d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid)
   AND NOT (d.refclassid = 'pg_namespace'::regclass
			AND d.refobjid IN (ext.extnamespace, 'pg_catalog'::regnamespace))
   AND (pg_identify_object(d.refclassid, d.refobjid, 0)).schema
	   IS DISTINCT FROM 'pg_catalog';

-- The extension's objects on which PUBLIC holds a privilege (a NULL ACL
-- means the default one: EXECUTE on functions, USAGE on types).  Array
-- types have no privileges of their own, and a table's row type has
-- PUBLIC's USAGE in every database (17 and later list both as members).
CREATE TEMP VIEW public_privileges AS
SELECT pg_describe_object(d.classid, d.objid, 0) AS object, a.privilege_type
  FROM pg_depend d
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'dedup'
  LEFT JOIN pg_proc p ON d.classid = 'pg_proc'::regclass AND p.oid = d.objid
  LEFT JOIN pg_class c ON d.classid = 'pg_class'::regclass AND c.oid = d.objid
  LEFT JOIN pg_type t ON d.classid = 'pg_type'::regclass AND t.oid = d.objid
	   AND t.typrelid = 0 AND t.typcategory <> 'A'
 CROSS JOIN LATERAL aclexplode(COALESCE(
		p.proacl, acldefault('f', p.proowner),
		c.relacl, acldefault(CASE WHEN c.relkind = 'S' THEN 's' ELSE 'r' END::"char", c.relowner),
		t.typacl, acldefault('T', t.typowner))) a
 WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
   AND a.grantee = 0;

-- look-alikes of the extension's functions with other signatures, in the
-- schema it is installed in, each returning what no real one would
CREATE FUNCTION dedup_forget_since(consumer text, since text) RETURNS bigint
	LANGUAGE sql AS 'SELECT 42::bigint';
CREATE FUNCTION dedup_valid_consumer(consumer text, function_name varchar) RETURNS text
	LANGUAGE sql AS 'SELECT ''planted''::text';
CREATE FUNCTION dedup_valid_consumer(consumer varchar, function_name name) RETURNS text
	LANGUAGE sql AS 'SELECT ''planted''::text';
CREATE FUNCTION dedup_valid_retention(retention text) RETURNS interval
	LANGUAGE sql AS 'SELECT interval ''1 microsecond''';
CREATE FUNCTION dedup_retention_cutoff(latest timestamp, retention interval) RETURNS timestamptz
	LANGUAGE sql AS 'SELECT ''infinity''::timestamptz';
CREATE FUNCTION dedup_retention_is_valid(retention text) RETURNS boolean
	LANGUAGE sql AS 'SELECT true';

-- 1.1 as it was: dedup_retire_consumer, which runs as the extension's owner,
-- calls the planted function
CREATE EXTENSION dedup VERSION '1.1';
SELECT * FROM foreign_uses ORDER BY 1, 2;
SELECT dedup_retire_consumer('gone') AS planted_answer_in_1_1;
-- and PUBLIC could use its enum type
SELECT * FROM public_privileges ORDER BY 1, 2;

-- the update binds it again, to the extension's own function
ALTER EXTENSION dedup UPDATE TO '1.2';
SELECT * FROM foreign_uses ORDER BY 1, 2;
SELECT * FROM public_privileges ORDER BY 1, 2;
SELECT dedup_claim('gone', 'evt-1'), dedup_retire_consumer('gone') AS records_retired;
DROP EXTENSION dedup;

-- The guard at the top of each upgrade script names every object that the
-- script creates in the extension's schema: the relations, types and
-- functions that became members of the extension in an update (but a
-- table's row type and an array type, members on 17 and later), less what
-- the guard of its script names, are none; and everything it names exists
-- afterwards.  (An event trigger is in no schema, and only a superuser can
-- create one.)
CREATE TEMP TABLE members_then (classid oid, objid oid);
CREATE FUNCTION pg_temp.unguarded(script text) RETURNS SETOF text
LANGUAGE sql AS $$
WITH e AS (
	SELECT x.oid, x.extnamespace::regnamespace::text AS nsp
	  FROM pg_extension x WHERE x.extname = 'dedup'),
listed AS (
	SELECT m[1] || ' ' || m[2] AS object,
		   CASE m[1] WHEN 'function' THEN 'pg_proc'::regclass
					 WHEN 'type' THEN 'pg_type'::regclass
					 ELSE 'pg_class'::regclass END AS classid,
		   CASE m[1] WHEN 'function' THEN to_regprocedure(e.nsp || '.' || m[2])::oid
					 WHEN 'type' THEN to_regtype(e.nsp || '.' || m[2])::oid
					 ELSE to_regclass(e.nsp || '.' || m[2])::oid END AS objid
	  FROM e, regexp_matches(
				pg_read_file((SELECT setting FROM pg_config WHERE name = 'SHAREDIR')
							 || '/extension/dedup--' || script || '.sql'),
				'''(table|view|index|sequence|type|function) ([^'' ]+)''', 'g') AS m)
SELECT 'not in the guard: ' || pg_describe_object(d.classid, d.objid, 0)
  FROM pg_depend d
  JOIN e ON d.refobjid = e.oid
  LEFT JOIN pg_type t ON d.classid = 'pg_type'::regclass AND t.oid = d.objid
 WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
   AND d.classid IN ('pg_class'::regclass, 'pg_type'::regclass, 'pg_proc'::regclass)
   AND (t.oid IS NULL OR (t.typrelid = 0 AND t.typcategory <> 'A'))
   AND (d.classid, d.objid) NOT IN (SELECT classid, objid FROM members_then)
   AND (d.classid, d.objid) NOT IN (SELECT classid, objid FROM listed WHERE objid IS NOT NULL)
UNION ALL
SELECT 'in the guard, not created: ' || object FROM listed WHERE objid IS NULL
$$;
CREATE TEMP VIEW member_oids AS
SELECT d.classid, d.objid
  FROM pg_depend d
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'dedup'
 WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e';

-- every other path to 1.4: from 1.0, from 1.2, from 1.3, and a fresh install
CREATE EXTENSION dedup VERSION '1.0';
INSERT INTO members_then SELECT * FROM member_oids;
ALTER EXTENSION dedup UPDATE TO '1.1';
SELECT * FROM pg_temp.unguarded('1.0--1.1');
TRUNCATE members_then;
INSERT INTO members_then SELECT * FROM member_oids;
ALTER EXTENSION dedup UPDATE TO '1.2';
SELECT * FROM pg_temp.unguarded('1.1--1.2');
TRUNCATE members_then;
INSERT INTO members_then SELECT * FROM member_oids;
ALTER EXTENSION dedup UPDATE TO '1.3';
SELECT * FROM pg_temp.unguarded('1.2--1.3');
TRUNCATE members_then;
INSERT INTO members_then SELECT * FROM member_oids;
ALTER EXTENSION dedup UPDATE TO '1.4';
SELECT * FROM pg_temp.unguarded('1.3--1.4');
SELECT * FROM foreign_uses ORDER BY 1, 2;
SELECT * FROM public_privileges ORDER BY 1, 2;
DROP EXTENSION dedup;

CREATE EXTENSION dedup VERSION '1.2';
ALTER EXTENSION dedup UPDATE TO '1.3';
SELECT * FROM foreign_uses ORDER BY 1, 2;
SELECT * FROM public_privileges ORDER BY 1, 2;
DROP EXTENSION dedup;

CREATE EXTENSION dedup VERSION '1.3';
ALTER EXTENSION dedup UPDATE TO '1.4';
SELECT * FROM foreign_uses ORDER BY 1, 2;
SELECT * FROM public_privileges ORDER BY 1, 2;
DROP EXTENSION dedup;

CREATE EXTENSION dedup;
SELECT extversion FROM pg_extension WHERE extname = 'dedup';
SELECT * FROM foreign_uses ORDER BY 1, 2;
SELECT * FROM public_privileges ORDER BY 1, 2;
SELECT dedup_claim('gone', 'evt-1'), dedup_retire_consumer('gone') AS records_retired;
DROP EXTENSION dedup;

-- Objects planted under the names that an update creates, by a role that
-- may create in the schema (on 15 the database owner owns public): each
-- update fails before it changes anything, naming the object and its
-- owner, and the extension stays as it was; once the object is gone, the
-- update goes through.
CREATE ROLE regress_dedup_planter;
CREATE TEMP VIEW members AS
SELECT pg_describe_object(d.classid, d.objid, 0) AS object
  FROM pg_depend d
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'dedup'
 WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e';
CREATE TEMP TABLE members_before (object text);
\set SHOW_CONTEXT never

CREATE EXTENSION dedup VERSION '1.0';
CREATE TYPE dedup_claim_status AS ENUM ('planted');
ALTER TYPE dedup_claim_status OWNER TO regress_dedup_planter;
ALTER EXTENSION dedup UPDATE TO '1.1';
\echo :LAST_ERROR_SQLSTATE
SELECT extversion FROM pg_extension WHERE extname = 'dedup';
DROP TYPE dedup_claim_status;
ALTER EXTENSION dedup UPDATE TO '1.1';

-- the issue's table, then a function with the arguments of one that 1.2 creates
INSERT INTO members_before SELECT * FROM members;
CREATE TABLE stream_positions (x int);
ALTER TABLE stream_positions OWNER TO regress_dedup_planter;
ALTER EXTENSION dedup UPDATE TO '1.2';
\echo :LAST_ERROR_SQLSTATE
SELECT extversion FROM pg_extension WHERE extname = 'dedup';
(SELECT * FROM members EXCEPT ALL SELECT * FROM members_before)
UNION ALL (SELECT * FROM members_before EXCEPT ALL SELECT * FROM members);
DROP TABLE stream_positions;
CREATE FUNCTION dedup_claim_offsets(consumer text, stream text, partition integer,
									message_offsets bigint[]) RETURNS boolean[]
	LANGUAGE sql AS 'SELECT ARRAY[true]';
ALTER FUNCTION dedup_claim_offsets(text, text, integer, bigint[]) OWNER TO regress_dedup_planter;
ALTER EXTENSION dedup UPDATE TO '1.2';
\echo :LAST_ERROR_SQLSTATE
SELECT extversion FROM pg_extension WHERE extname = 'dedup';
(SELECT * FROM members EXCEPT ALL SELECT * FROM members_before)
UNION ALL (SELECT * FROM members_before EXCEPT ALL SELECT * FROM members);
DROP FUNCTION dedup_claim_offsets(text, text, integer, bigint[]);
ALTER EXTENSION dedup UPDATE TO '1.2';
SELECT extversion FROM pg_extension WHERE extname = 'dedup';
SELECT * FROM foreign_uses ORDER BY 1, 2;

-- 1.4's outbox table, then its publish function and its identity sequence
ALTER EXTENSION dedup UPDATE TO '1.3';
TRUNCATE members_before;
INSERT INTO members_before SELECT * FROM members;
CREATE TABLE dedup_outbox (x int);
ALTER TABLE dedup_outbox OWNER TO regress_dedup_planter;
ALTER EXTENSION dedup UPDATE TO '1.4';
\echo :LAST_ERROR_SQLSTATE
SELECT extversion FROM pg_extension WHERE extname = 'dedup';
DROP TABLE dedup_outbox;
CREATE FUNCTION dedup_publish(destination text, payload text, key text, headers jsonb)
	RETURNS text LANGUAGE sql AS 'SELECT ''planted''::text';
ALTER FUNCTION dedup_publish(text, text, text, jsonb) OWNER TO regress_dedup_planter;
ALTER EXTENSION dedup UPDATE TO '1.4';
\echo :LAST_ERROR_SQLSTATE
SELECT extversion FROM pg_extension WHERE extname = 'dedup';
(SELECT * FROM members EXCEPT ALL SELECT * FROM members_before)
UNION ALL (SELECT * FROM members_before EXCEPT ALL SELECT * FROM members);
DROP FUNCTION dedup_publish(text, text, text, jsonb);
CREATE SEQUENCE dedup_outbox_seq_seq;
ALTER SEQUENCE dedup_outbox_seq_seq OWNER TO regress_dedup_planter;
ALTER EXTENSION dedup UPDATE TO '1.4';
\echo :LAST_ERROR_SQLSTATE
DROP SEQUENCE dedup_outbox_seq_seq;
ALTER EXTENSION dedup UPDATE TO '1.4';
SELECT extversion FROM pg_extension WHERE extname = 'dedup';
SELECT * FROM foreign_uses ORDER BY 1, 2;
DROP EXTENSION dedup;
\set SHOW_CONTEXT errors
DROP ROLE regress_dedup_planter;

DROP FUNCTION dedup_forget_since(text, text), dedup_valid_consumer(text, varchar),
	dedup_valid_consumer(varchar, name), dedup_valid_retention(text),
	dedup_retention_cutoff(timestamp, interval), dedup_retention_is_valid(text);
