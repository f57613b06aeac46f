--
-- consumer_storage: dedup_consumer_storage(), behind dedup_stats and
-- dedup_storage, is C in 1.2 (on the sweep's consumer walk) and gives
-- exactly what its 1.1 SQL definition gave: compared row by row on a varied
-- data set (consumers with rows or only a window; default, own, forever and
-- invalid windows; expired rows, beyond the count limit too; claims dated in
-- the future, or too early to count a window back from), before the table
-- has statistics, with a row estimate only, and after ANALYZE with few and
-- with many distinct consumers.
--
-- 1.0 accepted windows that 1.1 refuses: the only way to invalid ones
CREATE EXTENSION dedup VERSION '1.0';
SELECT dedup_set_retention('bad-months', '1 mon -29 days');
SELECT dedup_set_retention('bad-huge-idle', '10000 years');
ALTER EXTENSION dedup UPDATE TO '1.1';
-- the statistics change only when this test says so
ALTER TABLE processed_messages SET (autovacuum_enabled = off);

-- the 1.1 definition, kept as regress_v11.consumer_storage(): its body
-- deparsed with every name schema-qualified
CREATE SCHEMA regress_v11;
SET search_path = pg_catalog;
DO $$
BEGIN
	EXECUTE replace(pg_get_functiondef('public.dedup_consumer_storage'::regproc),
					'FUNCTION public.dedup_consumer_storage(',
					'FUNCTION regress_v11.consumer_storage(');
END
$$;
RESET search_path;

ALTER EXTENSION dedup UPDATE TO '1.2';
SELECT l.lanname, p.prosecdef, p.provolatile, p.proparallel,
       ARRAY(SELECT a.grantee::regrole FROM aclexplode(p.proacl) a
              WHERE a.grantee <> p.proowner) AS granted_to
  FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
 WHERE p.oid = 'dedup_consumer_storage'::regproc;

-- the rows where the two differ (each whole row compared as text), and how
-- many rows there are
CREATE VIEW regress_v11.differences AS
SELECT count(*) FILTER (WHERE o.consumer IS NULL OR n.consumer IS NULL
                           OR o::text <> n::text) AS differences,
       count(*) AS consumers,
       count(*) FILTER (WHERE n.expired_backlog > 0) AS with_backlog,
       count(*) FILTER (WHERE n.future_records > 0) AS with_future,
       count(*) FILTER (WHERE n.records_estimate IS NOT NULL) AS estimated
  FROM regress_v11.consumer_storage() o
  FULL JOIN dedup_consumer_storage() n ON n.consumer = o.consumer;
CREATE VIEW regress_v11.different_rows AS
SELECT o::text AS sql_1_1, n::text AS c_1_2
  FROM regress_v11.consumer_storage() o
  FULL JOIN dedup_consumer_storage() n ON n.consumer = o.consumer
 WHERE o.consumer IS NULL OR n.consumer IS NULL OR o::text <> n::text;

-- nothing at all
SELECT * FROM regress_v11.differences;

-- 40 consumers with 1 to 40 rows an hour apart, each ending between a day
-- ago and 3 days ahead; their windows: the default (7 days), their own of
-- every shape, or forever
INSERT INTO processed_messages (consumer_name, message_id, processed_at)
SELECT 'c-' || lpad(c::text, 2, '0'), 'm-' || h,
       now() + (c % 5 - 1) * interval '18 hours' - h * interval '1 hour'
  FROM generate_series(1, 40) c, generate_series(1, c) h;
SELECT dedup_set_retention('c-' || lpad(c::text, 2, '0'),
                           (ARRAY['1 hour', '5 hours 30 minutes', '1 day',
                                  '2 days 12:00', '1 mon', '1 year 2 mons 3 days 04:05:06',
                                  '100 years', '1 microsecond'])[c % 8 + 1]::interval)
  FROM generate_series(1, 40, 3) c;
SELECT dedup_keep_forever('c-' || lpad(c::text, 2, '0'))
  FROM generate_series(2, 40, 7) c;
-- rows far apart: beyond the default window, the oldest in 2000 BC
INSERT INTO processed_messages (consumer_name, message_id, processed_at)
SELECT 'spread', 'm-' || y, make_timestamptz(y, 6, 1, 12, 0, 0, 'UTC')
  FROM generate_series(1, 2020, 101) y;
INSERT INTO processed_messages VALUES ('spread', 'bc', '2000-01-01 BC');
-- latest claims too early to count a window back from: nothing expires
INSERT INTO processed_messages (consumer_name, message_id, processed_at)
SELECT 'ancient', 'm-' || d, '4700-01-01 BC'::timestamptz + d * interval '1 day'
  FROM generate_series(1, 20) d;
SELECT dedup_set_retention('ancient', '1 day');
-- invalid windows with rows: kept, no backlog
INSERT INTO processed_messages (consumer_name, message_id, processed_at)
SELECT 'bad-months', 'm-' || h, now() - h * interval '1 day'
  FROM generate_series(1, 90) h;
-- only a window, valid, forever and invalid (bad-huge-idle)
SELECT dedup_set_retention('idle', '3 days');
SELECT dedup_keep_forever('idle-forever');
-- future-dated claims, one consumer with nothing else
INSERT INTO processed_messages (consumer_name, message_id, processed_at)
SELECT 'ahead', 'm-' || h, now() + h * interval '1 minute'
  FROM generate_series(1, 30) h;
-- a consumer name that is not plain ASCII, and a forgotten window
INSERT INTO processed_messages VALUES ('façade ✓', 'm-1', now() - interval '8 days'),
                                      ('façade ✓', 'm-2', now());
SELECT dedup_set_retention('gone', '1 day');
SELECT dedup_reset_retention('gone');

-- before any ANALYZE: no estimates
SELECT * FROM regress_v11.differences;
SELECT * FROM regress_v11.different_rows;
-- a row count, but no statistics of consumer_name: no estimates
VACUUM processed_messages;
SELECT * FROM regress_v11.differences;
SELECT * FROM regress_v11.different_rows;
-- more expired and more future rows than are counted (100000)
INSERT INTO processed_messages (consumer_name, message_id, processed_at)
SELECT 'bulk', 'old-' || g, now() - interval '30 days' - g * interval '1 second'
  FROM generate_series(1, 100005) g;
INSERT INTO processed_messages (consumer_name, message_id, processed_at)
SELECT 'bulk', 'new-' || g, now() + interval '1 day' + g * interval '1 second'
  FROM generate_series(1, 100005) g;
-- statistics, with most common values
ANALYZE processed_messages;
SELECT count(*) > 0 AS has_common_values
  FROM pg_stats WHERE tablename = 'processed_messages'
   AND attname = 'consumer_name' AND most_common_vals IS NOT NULL;
SELECT * FROM regress_v11.differences;
SELECT * FROM regress_v11.different_rows;
SELECT expired_backlog, future_records FROM dedup_consumer_storage()
 WHERE consumer = 'bulk';

-- many distinct consumers (a negative n_distinct: a share of the rows)
DELETE FROM processed_messages WHERE consumer_name = 'bulk';
INSERT INTO processed_messages (consumer_name, message_id, processed_at)
SELECT 'single-' || c, 'm-1', now() - c * interval '1 hour'
  FROM generate_series(1, 1000) c;
ANALYZE processed_messages;
SELECT n_distinct < 0 AS distinct_is_a_share
  FROM pg_stats WHERE tablename = 'processed_messages' AND attname = 'consumer_name';
SELECT * FROM regress_v11.differences;
SELECT * FROM regress_v11.different_rows;

-- in one transaction, rows it added and removed count, as in the views
BEGIN;
DELETE FROM processed_messages WHERE consumer_name LIKE 'c-1%';
INSERT INTO processed_messages VALUES ('ahead', 'later', now() + interval '1 day');
SELECT * FROM regress_v11.differences;
ROLLBACK;

-- the views answer from it
SELECT consumers, expired_backlog, future_records FROM dedup_storage;
SELECT consumer, retention, expired_backlog, future_records
  FROM dedup_stats WHERE consumer IN ('ancient', 'bad-huge-idle', 'bad-months', 'idle', 'idle-forever', 'spread')
 ORDER BY consumer;

-- who may read it is unchanged: a monitoring role (pg_monitor) may, and
-- sees what a superuser sees, whatever is planted on its search_path; an
-- application that claims may not, nor a role that can only connect
CREATE ROLE regress_storage_monitor IN ROLE pg_monitor;
CREATE ROLE regress_storage_app;
GRANT EXECUTE ON FUNCTION dedup_claim(text, text) TO regress_storage_app;
CREATE ROLE regress_storage_connect;
GRANT USAGE ON SCHEMA regress_v11 TO regress_storage_monitor;
GRANT SELECT ON regress_v11.differences TO regress_storage_monitor;
CREATE SCHEMA regress_planted;
-- (look-alikes that would change the figures: every name equal, no row
-- in the future)
CREATE FUNCTION regress_planted.now() RETURNS timestamptz
	LANGUAGE sql AS 'SELECT ''infinity''::timestamptz';
CREATE FUNCTION regress_planted.equal(text, text) RETURNS boolean
	LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR regress_planted.= (FUNCTION = regress_planted.equal,
	LEFTARG = text, RIGHTARG = text);
GRANT USAGE ON SCHEMA regress_planted TO PUBLIC;
SET search_path = regress_planted, public, pg_catalog;
SET ROLE regress_storage_monitor;
SELECT * FROM regress_v11.differences;
SELECT consumers, expired_backlog, future_records FROM dedup_storage;
SELECT count(*) AS consumers FROM dedup_stats WHERE retention IS NOT NULL;
SET ROLE regress_storage_app;
SELECT count(*) FROM dedup_consumer_storage();
SELECT count(*) FROM dedup_stats;
SET ROLE regress_storage_connect;
SELECT count(*) FROM dedup_consumer_storage();
SELECT count(*) FROM dedup_storage;
RESET ROLE;
RESET search_path;
DROP SCHEMA regress_planted CASCADE;
DROP SCHEMA regress_v11 CASCADE;
DROP EXTENSION dedup;
DROP ROLE regress_storage_monitor, regress_storage_app, regress_storage_connect;
