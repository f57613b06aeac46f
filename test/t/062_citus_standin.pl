#
# 062_citus_standin.pl: dedup's Citus code against stand-ins of Citus's
# catalogs, on one node without Citus, so that CI runs it.
#
# dedup finds Citus through its catalog tables, looked up by name in
# pg_catalog (src/citus/citus.c): pg_dist_partition (what Citus manages,
# and how a table is distributed), pg_dist_local_group (this node's group)
# and pg_dist_node (the workers).  Here they are ordinary tables made in
# pg_catalog (allow_system_table_mods), with Citus's columns, written by
# the test; a distribution column is kept, as Citus keeps it, as the text
# of a Var node, taken from the default of a generated column of this
# server's version.  create_distributed_table is a stand-in that lists the
# table as hash-distributed, citus_total_relation_size one that sizes the
# local table.  What it checks:
#
#  1. a coordinator without workers: claims work, no two-phase commit is
#     asked for;
#  2. the Citus guard of every lookup of dedup's tables: processed_messages
#     or stream_positions listed in pg_dist_partition refuses the claims
#     with 0A000, before the checks of the tables' shape (the TRUNCATE
#     trigger Citus puts on a distributed table would trip them); listed no
#     more, claims work again;
#  3. a worker node (group 2): the claims, the sweep and the routed claims
#     refused with 0A000, each with its own words;
#  4. a coordinator with a worker: a claim asks Citus's library for
#     two-phase commit, and fails without it (never commits one-phase);
#  5. colocated records: dedup_create_colocated_records (the CREATE TABLE
#     and CREATE INDEX it builds, its stand-in distribution, the
#     registration), dedup_register_colocated_records (a second call a
#     no-op), and the shapes it refuses (not distributed, a reference table,
#     distributed by another column, other columns);
#  6. the SQL built for routed claims, run on the local stand-in table:
#     dedup_claim_routed, dedup_claim_routed_many (duplicates in the batch,
#     the input's lower bound kept), dedup_seen_routed, dedup_forget_routed;
#     a transaction that wrote records on this node asks for two-phase
#     commit at its commit (routed_pre_commit), which fails without Citus;
#  7. dedup_sweep_colocated and dedup_colocated_storage on rows inserted
#     with old times: the expired ones deleted, the others counted.
#
# What needs a real cluster (shards on workers, Citus's commit, shard
# moves) is 060 and 061, run by hand where Citus is built (test/README.md).
#
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupNode;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = DedupNode->create('standin', sweeps => 'off');
$node->safe_psql(
	'postgres', q{
CREATE EXTENSION dedup;
SET allow_system_table_mods = on;
CREATE TABLE pg_catalog.pg_dist_partition (
	logicalrelid regclass NOT NULL,
	partmethod "char" NOT NULL,
	partkey text,
	colocationid integer NOT NULL DEFAULT 0,
	repmodel "char" NOT NULL DEFAULT 's');
CREATE INDEX pg_dist_partition_logical_relid_index
	ON pg_catalog.pg_dist_partition (logicalrelid);
CREATE TABLE pg_catalog.pg_dist_local_group (groupid integer NOT NULL);
CREATE TABLE pg_catalog.pg_dist_node (nodeid integer NOT NULL,
	groupid integer NOT NULL);
INSERT INTO pg_catalog.pg_dist_local_group VALUES (0);
INSERT INTO pg_catalog.pg_dist_node VALUES (1, 0);

-- a distribution column as Citus keeps it: a Var node's text, attno 1 or 2
CREATE TABLE standin_by_first (route text,
	g text GENERATED ALWAYS AS (route) STORED);
CREATE TABLE standin_by_second (other text, route text,
	g text GENERATED ALWAYS AS (route) STORED);
CREATE FUNCTION standin_var(by_column integer) RETURNS text
	LANGUAGE sql STABLE
	RETURN (SELECT adbin::text FROM pg_attrdef
	  WHERE adrelid = CASE by_column WHEN 1 THEN 'standin_by_first'::regclass
	                  ELSE 'standin_by_second'::regclass END);
CREATE FUNCTION standin_distribute(t regclass, by_column integer DEFAULT 1)
	RETURNS void LANGUAGE sql
	BEGIN ATOMIC
	INSERT INTO pg_catalog.pg_dist_partition (logicalrelid, partmethod, partkey)
	  VALUES (t, 'h', standin_var(by_column));
	END;
CREATE FUNCTION pg_catalog.create_distributed_table(table_name regclass,
	distribution_column text, colocate_with text DEFAULT 'default')
	RETURNS void LANGUAGE sql
	BEGIN ATOMIC
	SELECT standin_distribute(table_name);
	END;
CREATE FUNCTION pg_catalog.citus_total_relation_size(logicalrelid regclass)
	RETURNS bigint LANGUAGE sql STABLE
	RETURN pg_catalog.pg_total_relation_size(logicalrelid);
});

# the verbose error of $sql, which must fail
sub refused
{
	my ($sql, $re, $name) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	return $node->psql_fails_like('postgres', $sql, $re, $name);
}

sub query { return $node->safe_psql('postgres', shift); }

###############################################################################
note('1. a coordinator without workers');

is(query(q{SELECT dedup_claim('svc', 'c-1')}),
	't', 'a coordinator without workers claims');
is(query(q{SELECT dedup_claim_offsets('svc', 's', 0, ARRAY[1, 2])}),
	'{t,t}', 'and claims by offset');

###############################################################################
note('2. the guard: dedup\'s tables managed by Citus');

query(
	q{
CREATE FUNCTION standin_truncate() RETURNS trigger LANGUAGE plpgsql
	AS $$BEGIN RETURN NULL; END$$;
CREATE TRIGGER truncate_trigger AFTER TRUNCATE ON processed_messages
	FOR EACH STATEMENT EXECUTE FUNCTION standin_truncate();
INSERT INTO pg_catalog.pg_dist_partition (logicalrelid, partmethod)
	VALUES ('processed_messages', 'n');
});
refused(
	q{SELECT dedup_claim('svc', 'c-2')},
	qr/ERROR:  0A000: table "processed_messages" of extension "dedup" is managed by Citus/,
	'processed_messages a reference table (with its truncate trigger): refused as managed by Citus, not as tampered with'
);
query(
	q{
DELETE FROM pg_catalog.pg_dist_partition;
DROP TRIGGER truncate_trigger ON processed_messages;
INSERT INTO pg_catalog.pg_dist_partition (logicalrelid, partmethod)
	VALUES ('stream_positions', 'n');
});
refused(
	q{SELECT dedup_claim_offset('svc', 's', 0, 3)},
	qr/ERROR:  0A000: table "stream_positions" of extension "dedup" is managed by Citus/,
	'stream_positions a reference table: refused');
query(q{DELETE FROM pg_catalog.pg_dist_partition});
is( query(
		q{SELECT dedup_claim('svc', 'c-2'), dedup_claim_offset('svc', 's', 0, 3)}
	),
	't|t',
	'listed no more: claims work again');

###############################################################################
note('3. a worker node');

query(q{UPDATE pg_catalog.pg_dist_local_group SET groupid = 2});
for my $call (
	q{SELECT dedup_claim('svc', 'w-1')},
	q{SELECT dedup_claim_many('svc', ARRAY['w-1'])},
	q{SELECT dedup_claim_offset('svc', 's', 0, 9)},
	q{SELECT dedup_sweep()})
{
	refused(
		$call,
		qr/ERROR:  0A000: dedup cannot be used on a Citus worker node/,
		"worker: $call");
}
for my $call (
	q{SELECT dedup_claim_routed('standin_by_first', '1', 'svc', 'w-1')},
	q{SELECT dedup_claim_routed_many('standin_by_first', '1', 'svc', ARRAY['w-1'])},
	q{SELECT dedup_seen_routed('standin_by_first', '1', 'svc', 'w-1')},
	q{SELECT dedup_sweep_colocated()})
{
	refused(
		$call,
		qr/ERROR:  0A000: .* must be called on the Citus coordinator/,
		"worker: $call");
}
query(q{UPDATE pg_catalog.pg_dist_local_group SET groupid = 0});

###############################################################################
note('4. a coordinator with a worker');

query(q{INSERT INTO pg_catalog.pg_dist_node VALUES (2, 1)});
refused(
	q{SELECT dedup_claim('svc', 'c-3')},
	qr/ERROR:  .*(could not access file "\$libdir\/citus"|Citus can only be loaded)/,
	'a claim asks Citus\'s library for two-phase commit, and fails without it'
);
is( query(
		q{SELECT count(*) FROM processed_messages WHERE message_id = 'c-3'}),
	'0',
	'nothing claimed');
query(q{DELETE FROM pg_catalog.pg_dist_node WHERE groupid = 1});

###############################################################################
note('5. colocated records tables: made, registered, refused');

query(
	q{
CREATE TABLE loyalty (customer_id text PRIMARY KEY, points integer);
SELECT standin_distribute('loyalty');
});
is( query(
		q{SELECT dedup_create_colocated_records('loyalty_claims', 'loyalty')}
	),
	'loyalty_claims',
	'dedup_create_colocated_records');
is( query(
		q{
SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod)
	|| CASE WHEN attnotnull THEN ' not null' ELSE '' END, ', ' ORDER BY attnum)
  FROM pg_attribute WHERE attrelid = 'loyalty_claims'::regclass AND attnum > 0}
	),
	'route text not null, consumer text not null, message_id text not null, processed_at timestamp with time zone not null',
	'its columns');
is( query(
		q{
SELECT string_agg(pg_get_indexdef(indexrelid), '; ' ORDER BY indisprimary DESC)
  FROM pg_index WHERE indrelid = 'loyalty_claims'::regclass}),
	'CREATE UNIQUE INDEX loyalty_claims_pkey ON public.loyalty_claims USING btree (route, consumer, message_id); '
	  . 'CREATE INDEX loyalty_claims_consumer_processed_at_idx ON public.loyalty_claims USING btree (consumer, processed_at)',
	'its key and its index');
is(query(q{SELECT records FROM dedup_colocated_tables}),
	'loyalty_claims', 'registered');
my ($ret, $out, $err) = $node->psql('postgres',
	q{SELECT dedup_register_colocated_records('loyalty_claims')});
like(
	$err,
	qr/already registered as colocated records, skipping/,
	'registered again: a notice, nothing done');

query(
	q{
CREATE TABLE by_hand (route text NOT NULL, consumer text NOT NULL,
	message_id text NOT NULL,
	processed_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (route, consumer, message_id));
CREATE INDEX ON by_hand (consumer, processed_at);
CREATE TABLE by_hand_other (LIKE by_hand INCLUDING ALL, extra integer);
});
refused(
	q{SELECT dedup_register_colocated_records('by_hand')},
	qr/ERROR:  42809: .*\n.*It is not a distributed table/,
	'a local table: refused');
query(
	q{INSERT INTO pg_catalog.pg_dist_partition (logicalrelid, partmethod)
	VALUES ('by_hand', 'n')});
refused(
	q{SELECT dedup_register_colocated_records('by_hand')},
	qr/ERROR:  42809: .*\n.*must be hash-distributed by its route column/,
	'a reference table: refused');
query(
	q{
DELETE FROM pg_catalog.pg_dist_partition WHERE logicalrelid = 'by_hand'::regclass;
SELECT standin_distribute('by_hand', 2);
});
refused(
	q{SELECT dedup_register_colocated_records('by_hand')},
	qr/ERROR:  42809: .*\n.*must be hash-distributed by its route column/,
	'distributed by another column: refused');
query(q{SELECT standin_distribute('by_hand_other')});
refused(
	q{SELECT dedup_register_colocated_records('by_hand_other')},
	qr/ERROR:  42809: .*\n.*Its columns must be route, consumer text, message_id text and processed_at timestamptz/,
	'another column: refused');
is(query(q{SELECT count(*) FROM dedup_colocated_tables}),
	'1', 'none of them registered');

###############################################################################
note('6. the routed statements');

my $routed = $node->safe_psql(
	'postgres', q{
BEGIN;
SELECT dedup_claim_routed('loyalty_claims', 'CUS-1', 'svc', 'm-1');
SELECT dedup_claim_routed('loyalty_claims', 'CUS-1', 'svc', 'm-1');
SELECT dedup_claim_routed_many('loyalty_claims', 'CUS-1', 'svc',
	'[0:3]={m-1,m-2,m-3,m-2}');
SELECT dedup_seen_routed('loyalty_claims', 'CUS-1', 'svc', 'm-3');
SELECT dedup_seen_routed('loyalty_claims', 'CUS-2', 'svc', 'm-3');
SELECT dedup_forget_routed('loyalty_claims', 'CUS-1', 'svc', 'm-3');
SELECT dedup_forget_routed('loyalty_claims', 'CUS-1', 'svc', 'm-3');
SELECT string_agg(route || '/' || consumer || '/' || message_id, ' '
	ORDER BY message_id) FROM loyalty_claims;
ROLLBACK;
});
is( $routed,
	join("\n",
		't', 'f', '[0:3]={f,t,t,f}', 't', 'f', 't', 'f',
		'CUS-1/svc/m-1 CUS-1/svc/m-2'),
	'claim, again, a batch, seen, seen in another route, forget, again: the rows in the table'
);
refused(
	q{SELECT dedup_claim_routed('loyalty_claims', 'CUS-1', 'svc', 'm-9')},
	qr/ERROR:  .*(could not access file "\$libdir\/citus"|Citus can only be loaded)/,
	'a routed claim that wrote on this node asks for two-phase commit at its commit'
);
is(query(q{SELECT count(*) FROM loyalty_claims}), '0', 'and kept nothing');

###############################################################################
note('7. the colocated sweep and storage figures');

query(
	q{
INSERT INTO loyalty_claims
SELECT 'CUS-' || i, 'svc', 'old-' || i, now() - interval '10 days' - i * interval '1 hour'
  FROM generate_series(1, 3) i;
INSERT INTO loyalty_claims VALUES ('CUS-1', 'svc', 'new-1', now());
INSERT INTO dedup_retention VALUES ('svc', '1 day');
});
is( query(
		q{
SELECT records, consumer, records_count,
	expires_before = latest_record_at - interval '1 day',
	table_bytes = pg_total_relation_size('loyalty_claims')
  FROM dedup_colocated_storage()}),
	'loyalty_claims|svc|4|t|t',
	'dedup_colocated_storage: 4 rows, expiring a day before the latest');
is(query(q{SELECT dedup_sweep_colocated()}),
	'3', 'dedup_sweep_colocated: 3 deleted');
is(query(q{SELECT message_id FROM loyalty_claims}),
	'new-1', 'the one in the window kept');

$node->stop;
done_testing();
