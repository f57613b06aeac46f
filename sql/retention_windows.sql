--
-- retention is never too early: validated windows, future-dated claims, and
-- a bad window left by 1.0 that stops nothing else
--
CREATE EXTENSION dedup;

-- windows that would put the cutoff after the latest claim, or overflow
SELECT dedup_set_retention('w', '1 mon -29 days');
\echo :SQLSTATE
SELECT dedup_set_retention('w', '-1 mon 40 days');
\echo :SQLSTATE
SELECT dedup_set_retention('w', '1 day -1 second');
\echo :SQLSTATE
SELECT dedup_set_retention('w', '10000 years');
\echo :SQLSTATE
SELECT dedup_set_retention('w', '100 years 1 day');
\echo :SQLSTATE
SELECT dedup_set_retention('w', '100 years') IS NULL AS longest_accepted;
SELECT dedup_set_retention('w', '1 microsecond') IS NULL AS shortest_accepted;
-- a DBA writing the table directly meets the same check
INSERT INTO dedup_retention VALUES ('x', '1 mon -29 days');
\echo :SQLSTATE
SELECT consumer_name, retention FROM dedup_retention ORDER BY 1;

-- the rule, for the views and the sweep: NULL means nothing expires
SELECT dedup_retention_cutoff('2026-03-01 00:00+00', '1 day') AS one_day,
       dedup_retention_cutoff('2026-03-01 00:00+00', NULL) AS forever,
       dedup_retention_cutoff('2026-03-01 00:00+00', '1 mon -29 days') AS invalid,
       dedup_retention_cutoff('-infinity', '1 day') AS no_latest,
       dedup_retention_cutoff('infinity', '1 day') < now() AS future_counts_from_now;

-- one claim dated in the future (a clock that was ahead) must not expire the
-- consumer's window: it is counted back from now, not from next year
SELECT dedup_set_retention('skewed', '1 hour');
INSERT INTO processed_messages (consumer_name, message_id, processed_at)
SELECT 'skewed', 'evt-' || m, now() - m * interval '1 minute'
  FROM generate_series(0, 119) AS m;
INSERT INTO processed_messages VALUES ('skewed', 'from-the-future', now() + interval '1 year');
SELECT expired_backlog, future_records FROM dedup_stats WHERE consumer = 'skewed';
SELECT future_records FROM dedup_storage;
SELECT dedup_sweep('skewed') AS swept;
SELECT count(*) AS kept, min(processed_at) > now() - interval '1 hour' - interval '1 second' AS within_hour
  FROM processed_messages WHERE consumer_name = 'skewed';

DROP EXTENSION dedup;

-- 1.0 accepted windows 1.1 refuses; after the upgrade such a consumer is kept
-- (with a WARNING from the sweep), and everyone else is swept and shown
CREATE EXTENSION dedup VERSION '1.0';
SELECT dedup_set_retention('bad-months', '1 mon -29 days');
SELECT dedup_set_retention('bad-huge', '10000 years');
SELECT dedup_set_retention('good', '1 hour');
INSERT INTO processed_messages (consumer_name, message_id, processed_at)
SELECT c, c || '-' || h, now() - h * interval '1 hour'
  FROM unnest(ARRAY['bad-months', 'bad-huge', 'good']) AS c,
       generate_series(0, 47) AS h;
ALTER EXTENSION dedup UPDATE TO '1.1';
SELECT consumer, retention, expired_backlog FROM dedup_stats
 WHERE consumer IN ('bad-huge', 'bad-months', 'good') ORDER BY 1;
SELECT expired_backlog FROM dedup_storage;
SELECT dedup_sweep() AS swept;
SELECT consumer_name, count(*) FROM processed_messages GROUP BY 1 ORDER BY 1;
-- and the DBA can fix the bad rows with the 1.1 functions
SELECT dedup_set_retention('bad-huge', '1 day');
SELECT dedup_keep_forever('bad-months');
SELECT consumer, retention FROM dedup_stats
 WHERE consumer IN ('bad-huge', 'bad-months', 'good') ORDER BY 1;

DROP EXTENSION dedup;
