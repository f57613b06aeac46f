--
-- dedup_seen, dedup_forget, dedup_forget_since, dedup_retire_consumer
--
CREATE EXTENSION dedup;
SELECT dedup_claim('svc', 'evt-1'), dedup_claim('svc', 'evt-2');
INSERT INTO processed_messages (consumer_name, message_id, processed_at)
VALUES ('svc', 'old-1', '2026-01-01 10:00+00'), ('svc', 'old-2', '2026-01-02 10:00+00'),
       ('svc', 'old-3', '2026-01-03 10:00+00'), ('other', 'old-1', '2026-01-01 10:00+00');

-- look without claiming
SELECT seen, processed_at = (SELECT m.processed_at FROM processed_messages m
                              WHERE m.consumer_name = 'svc' AND m.message_id = 'evt-1') AS its_claim_time
  FROM dedup_seen('svc', 'evt-1');
SELECT * FROM dedup_seen('svc', 'old-2');
SELECT * FROM dedup_seen('svc', 'never');
SELECT count(*) AS nothing_claimed FROM processed_messages WHERE message_id = 'never';
BEGIN READ ONLY;
SELECT seen FROM dedup_seen('svc', 'old-1') AS read_only_works;
ROLLBACK;
SELECT dedup_seen(NULL, 'x');
\echo :SQLSTATE

-- forget one record: its redelivery is processed again
SELECT dedup_forget('svc', 'evt-1') AS forgotten, dedup_forget('svc', 'evt-1') AS again;
SELECT dedup_claim('svc', 'evt-1') AS reclaimed;
-- in the caller's transaction
BEGIN;
SELECT dedup_forget('svc', 'evt-2');
ROLLBACK;
SELECT seen FROM dedup_seen('svc', 'evt-2') AS still_there;

-- forget a range: everything claimed since a time
SELECT dedup_forget_since('svc', '2026-01-02 10:00+00') AS forgotten;
SELECT consumer_name, message_id FROM processed_messages ORDER BY 1, 2;
SELECT dedup_forget_since('svc', NULL);
\echo :SQLSTATE
SELECT dedup_forget_since(NULL, '-infinity');
\echo :SQLSTATE

-- retire a consumer: records, window and claimants
SELECT dedup_set_retention('other', '3 days');
SELECT dedup_allow_claimant('other', current_user::regrole);
SELECT dedup_retire_consumer('other') AS retired_records;
SELECT (SELECT count(*) FROM processed_messages WHERE consumer_name = 'other') AS records,
       (SELECT count(*) FROM dedup_retention WHERE consumer_name = 'other') AS windows,
       (SELECT count(*) FROM dedup_consumer_roles WHERE consumer_name = 'other') AS claimants;
SELECT dedup_retire_consumer(NULL);
\echo :SQLSTATE

-- not for applications: no EXECUTE for PUBLIC on any of them
CREATE ROLE regress_records LOGIN;
SELECT p::regprocedure AS function, has_function_privilege('regress_records', p, 'EXECUTE') AS app_may
  FROM unnest(ARRAY['dedup_seen(text,text)', 'dedup_forget(text,text)',
                    'dedup_forget_since(text,timestamptz)', 'dedup_retire_consumer(text)']::regprocedure[]) p;
-- monitoring may be granted dedup_seen
GRANT EXECUTE ON FUNCTION dedup_seen(text, text) TO pg_monitor;
GRANT pg_monitor TO regress_records;
SET ROLE regress_records;
SELECT seen FROM dedup_seen('svc', 'old-1') AS monitor_sees;
SELECT dedup_forget('svc', 'evt-1');
\echo :SQLSTATE
RESET ROLE;

DROP EXTENSION dedup;
DROP ROLE regress_records;
