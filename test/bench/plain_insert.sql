-- baseline: what dedup_claim replaces, written by hand
\set id random(1, 1000000000)
INSERT INTO plain_messages (consumer_name, message_id)
VALUES ('bench', :id::text) ON CONFLICT DO NOTHING;
