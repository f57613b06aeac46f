-- baseline, redeliveries: nearly every key already exists
\set id random(1, 1000)
INSERT INTO plain_messages (consumer_name, message_id)
VALUES ('dup', :id::text) ON CONFLICT DO NOTHING;
