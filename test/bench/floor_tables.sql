-- test/bench/floor_tables.sql: the leaner layouts of benchmark row 13 and of instructions.sh (one statement per line: postgres --single reads them so)
SET client_min_messages = warning;
DROP TABLE IF EXISTS floor_seeds, floor_text_key, floor_c_key, floor_digest, floor_heap;
CREATE TABLE floor_seeds (consumer_name text NOT NULL, message_id text NOT NULL, processed_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (consumer_name, message_id));
CREATE INDEX ON floor_seeds (processed_at);
CREATE TABLE floor_text_key (LIKE floor_seeds INCLUDING DEFAULTS, PRIMARY KEY (consumer_name, message_id));
CREATE TABLE floor_c_key (consumer_name text COLLATE "C" NOT NULL, message_id text COLLATE "C" NOT NULL, processed_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (consumer_name, message_id));
CREATE TABLE floor_digest (key uuid PRIMARY KEY, LIKE floor_seeds INCLUDING DEFAULTS);
CREATE TABLE floor_heap (LIKE floor_seeds INCLUDING DEFAULTS);
