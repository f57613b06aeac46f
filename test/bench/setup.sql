-- test/bench/setup.sql: objects the benchmark scripts use
CREATE EXTENSION dedup;
-- the plain-SQL baseline: the same table, the same indexes
CREATE TABLE plain_messages (LIKE processed_messages INCLUDING ALL);
CREATE TABLE loyalty (customer_id int PRIMARY KEY, points bigint NOT NULL);
INSERT INTO loyalty SELECT g, 0 FROM generate_series(1, 10000) g;
