#
# 060_citus.pl: dedup on a Citus cluster is right or refuses, never silently
# wrong (the cases of dedup issue 15, each reproduced against 1.1).
#
# The cluster of test/perl/DedupCitus.pm (a coordinator and two workers;
# skipped, saying so, where the citus extension is not installed); the
# business table loyalty is distributed by customer_id.  What is checked:
#
#  1. the supported layout: processed_messages local on the coordinator, the
#     claim there in the transaction that updates the distributed table.
#     Citus commits that update on the worker with two-phase commit (its
#     remote commands: PREPARE TRANSACTION, COMMIT PREPARED), so a crash or a
#     failed commit of the coordinator cannot keep the update and lose the
#     claim (a serialization failure at the coordinator's commit rolls both
#     back); without a claim it still uses one-phase commit; claims by
#     offset (stream_positions, local too) commit with two-phase commit
#     the same way;
#  2. on a worker every function that reads or writes the worker's own
#     table, which no distributed query reads, is refused: the claims,
#     try/many, seen, forget, offsets, the sweep and the views;
#  3. processed_messages made a reference table, then a distributed table:
#     refused on the coordinator (with an error saying so, not the tamper
#     check's that Citus's truncate trigger trips) and on the workers;
#  4. dedup_claim distributed with create_distributed_function: the call
#     pushed down to a worker is refused, not claimed in the worker's table.
#
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupCitus;
use DedupNode;
use PostgreSQL::Test::Utils;
use Test::More;

my ($coordinator, @workers) = DedupCitus::cluster();

# worker1 sweeps (every second), and has found no dedup in postgres yet
$workers[0]->safe_psql('postgres', "ALTER SYSTEM SET $_")
  for (
	'dedup.sweep_enabled = on',
	'dedup.sweep_interval = 1',
	'log_min_messages = debug1');
$workers[0]->reload;
ok( $workers[0]
	  ->wait_log_count(0, qr/dedup sweep: extension not installed/, 1),
	'worker1: its sweeper probed postgres and found no dedup');

# propagated to the workers, in a prepared transaction
$coordinator->safe_psql('postgres', 'CREATE EXTENSION dedup');
is( $workers[0]->safe_psql(
		'postgres',
		"SELECT extversion FROM pg_extension WHERE extname = 'dedup'"),
	$coordinator->safe_psql(
		'postgres',
		"SELECT extversion FROM pg_extension WHERE extname = 'dedup'"),
	'CREATE EXTENSION dedup reached the workers');
ok( $workers[0]->poll_query_until(
		'postgres', q{SELECT last_sweep_outcome = 'done' FROM dedup_sweeper}),
	'worker1: the sweeping starts after the prepared CREATE EXTENSION commits, unwoken'
);
$workers[0]->safe_psql('postgres', "ALTER SYSTEM RESET $_")
  for ('dedup.sweep_enabled', 'dedup.sweep_interval', 'log_min_messages');
$workers[0]->reload;
$coordinator->safe_psql(
	'postgres', q{
CREATE TABLE loyalty (customer_id text PRIMARY KEY, points int NOT NULL);
SELECT create_distributed_table('loyalty', 'customer_id');
INSERT INTO loyalty SELECT 'CUS-' || i, 0 FROM generate_series(1, 20) i;
});

# a consumer's transaction on the coordinator, with Citus's remote commands
sub consume
{
	my ($message, $customer, $claim) = @_;
	my $claim_sql =
	  $claim ? "SELECT dedup_claim('loyalty-service', '$message');" : '';
	return $coordinator->psql(
		'postgres', qq{
SET citus.log_remote_commands = on;
SET client_min_messages = log;
BEGIN;
$claim_sql
UPDATE loyalty SET points = points + 1 WHERE customer_id = '$customer';
COMMIT;
});
}

###############################################################################
note('1. the supported layout: claims on the coordinator, two-phase commit');

my ($ret, $out, $err) = consume('evt-0', 'CUS-1', 0);
is($ret, 0, 'an update of one customer without a claim commits');
like(
	$err,
	qr/issuing COMMIT\b(?! PREPARED)/,
	'without a claim Citus commits the worker with one-phase commit');

($ret, $out, $err) = consume('evt-1', 'CUS-1', 1);
is($ret . $out, '0t', 'claim and update commit; the claim says first time');
like(
	$err,
	qr/issuing PREPARE TRANSACTION/,
	'with a claim Citus prepares the worker before the coordinator commits');
like(
	$err,
	qr/issuing COMMIT PREPARED/,
	'and commits the prepared transaction afterwards');
unlike(
	$err,
	qr/issuing COMMIT\b(?! PREPARED)/,
	'no one-phase commit of the worker');

($ret, $out, $err) = consume('evt-1', 'CUS-1', 1);
is($out, 'f', 'the redelivery is a duplicate');
is( $coordinator->safe_psql(
		'postgres',
		"SELECT count(*) FROM processed_messages WHERE message_id = 'evt-1'"),
	'1',
	'one record, on the coordinator');
is( $workers[0]
	  ->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts')
	  . $workers[1]
	  ->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts'),
	'00',
	'no prepared transaction is left on the workers');

# claims by offset: stream_positions stays local too (a partition's position
# spans messages of many keys, on many shards), so the same two-phase commit
for my $claim (
	q{SELECT dedup_claim_offset('loyalty-service', 'orders', 0, 1)},
	q{SELECT dedup_claim_offsets('loyalty-service', 'orders', 0, ARRAY[2, 3])}
  )
{
	($ret, $out, $err) = $coordinator->psql(
		'postgres', qq{
SET citus.log_remote_commands = on;
SET client_min_messages = log;
BEGIN;
$claim;
UPDATE loyalty SET points = points + 1 WHERE customer_id = 'CUS-3';
COMMIT;
});
	like($ret . $out, qr/^0(?:t|\{t,t\})$/, "$claim and an update commit");
	like(
		$err,
		qr/issuing PREPARE TRANSACTION.*issuing COMMIT PREPARED/s,
		"$claim: two-phase commit of the worker");
	unlike(
		$err,
		qr/issuing COMMIT\b(?! PREPARED)/,
		"$claim: no one-phase commit");
}
is( $coordinator->safe_psql(
		'postgres',
		q{SELECT committed_offset FROM stream_positions WHERE consumer_name = 'loyalty-service' AND stream = 'orders'}
	),
	'3',
	'the position is on the coordinator');

# the claim made before any distributed statement, in a transaction that
# then writes to both workers: still two-phase
($ret, $out, $err) = $coordinator->psql(
	'postgres', q{
SET citus.log_remote_commands = on;
SET client_min_messages = log;
BEGIN;
SELECT dedup_try_claim('loyalty-service', 'evt-2');
UPDATE loyalty SET points = points + 1;
COMMIT;
});
like(
	$err,
	qr/issuing PREPARE TRANSACTION/,
	'try_claim and a multi-shard update: two-phase commit');

# the window two-phase commit closes: the coordinator's own commit fails
# (here SERIALIZABLE's check at commit, after Citus has committed or
# prepared the worker); the worker's update must go with the claim
$coordinator->safe_psql('postgres', 'CREATE TABLE skew (k int PRIMARY KEY)');
my $s1 = $coordinator->background_psql('postgres', on_error_stop => 0);
my $s2 = $coordinator->background_psql('postgres');
$s1->query_safe('BEGIN ISOLATION LEVEL SERIALIZABLE');
$s1->query_safe("SELECT dedup_claim('loyalty-service', 'evt-ser')");
$s1->query_safe(
	"UPDATE loyalty SET points = points + 1 WHERE customer_id = 'CUS-2'");
$s1->query_safe('SELECT count(*) FROM skew WHERE k = 1');
$s1->query_safe('INSERT INTO skew VALUES (2)');
$s2->query_safe('BEGIN ISOLATION LEVEL SERIALIZABLE');
$s2->query_safe('SELECT count(*) FROM skew WHERE k = 2');
$s2->query_safe('INSERT INTO skew VALUES (1)');
$s2->query_safe('COMMIT');
$s1->query('COMMIT');
like(
	$s1->{stderr},
	qr/could not serialize access/,
	'the coordinator fails its commit: a serialization failure');
$s1->quit;
$s2->quit;
is( $coordinator->safe_psql(
		'postgres',
		"SELECT count(*) FROM processed_messages WHERE message_id = 'evt-ser'"
	),
	'0',
	'the claim is rolled back');
is( $coordinator->safe_psql(
		'postgres', "SELECT points FROM loyalty WHERE customer_id = 'CUS-2'"),
	'1',
	'and the update on the worker with it (only the multi-shard update above counts)'
);
ok( $coordinator->poll_query_until(
		'postgres',
		q{SELECT count(*) = 0 FROM run_command_on_workers('SELECT count(*) FROM pg_prepared_xacts') WHERE result <> '0'}
	),
	'no prepared transaction is left on the workers');

###############################################################################
note('2. on a worker: refused');

my $worker_error =
  qr/ERROR:  0A000: dedup cannot be used on a Citus worker node/;
for my $call (
	"SELECT dedup_claim('loyalty-service', 'w-1')",
	"SELECT dedup_claim('loyalty-service', 'w-1', '\\x01')",
	"SELECT dedup_try_claim('loyalty-service', 'w-1')",
	"SELECT dedup_claim_many('loyalty-service', ARRAY['w-1', 'w-2'])",
	"SELECT dedup_seen('loyalty-service', 'evt-1')",
	"SELECT dedup_forget('loyalty-service', 'evt-1')",
	"SELECT dedup_claim_offset('loyalty-service', 'orders', 0, 1)",
	'SELECT dedup_sweep()',
	'SELECT * FROM dedup_storage',
	'SELECT * FROM dedup_consumer_storage()',
	"SELECT * FROM dedup_stream_positions('loyalty-service')")
{
	$workers[0]
	  ->psql_fails_like('postgres', $call, $worker_error, "worker: $call");
}
is( $workers[0]
	  ->safe_psql('postgres', 'SELECT count(*) FROM processed_messages'),
	'0',
	'nothing was claimed in the worker\'s table');

###############################################################################
note('3. processed_messages managed by Citus: refused');

my $managed_error =
  qr/ERROR:  0A000: table "processed_messages" of extension "dedup" is managed by Citus.*HINT:  Keep the extension's tables local on the coordinator/s;
for my $kind ('create_reference_table', 'create_distributed_table')
{
	my $args =
	  $kind eq 'create_reference_table'
	  ? q{'processed_messages'}
	  : q{'processed_messages', 'consumer_name'};
	($ret, $out, $err) =
	  $coordinator->psql('postgres', "SELECT $kind($args)");
  SKIP:
	{
		skip("Citus refuses $kind of processed_messages: $err", 1) if $ret;
		for my $call (
			"SELECT dedup_claim('loyalty-service', 'r-1')",
			"SELECT dedup_try_claim('loyalty-service', 'r-1')",
			"SELECT dedup_seen('loyalty-service', 'evt-1')",
			"SELECT dedup_forget('loyalty-service', 'evt-1')",
			'SELECT dedup_sweep()',
			'SELECT * FROM dedup_storage')
		{
			$coordinator->psql_fails_like('postgres', $call, $managed_error,
				"$kind, coordinator: $call");
		}
		$workers[0]->psql_fails_like(
			'postgres',
			"SELECT dedup_claim('loyalty-service', 'r-1')",
			qr/ERROR:  0A000: (?:table "processed_messages" of extension "dedup" is managed by Citus|dedup cannot be used on a Citus worker node)/,
			"$kind, worker: dedup_claim");

		# undistribute_table refuses a table of an extension
		$coordinator->safe_psql('postgres',
			'DROP EXTENSION dedup CASCADE; CREATE EXTENSION dedup');
		note(
			"$kind, after DROP EXTENSION dedup CASCADE: tables left on worker1: "
			  . $workers[0]->safe_psql(
				'postgres',
				"SELECT string_agg(relname, ', ' ORDER BY relname) FROM pg_class WHERE relname LIKE 'processed_messages%' AND relkind = 'r'"
			  ));
		($ret, $out) = $coordinator->psql('postgres',
			"SELECT dedup_claim('loyalty-service', 'after-$kind')");
		is( $ret . $out,
			'0t',
			"$kind undone by creating the extension again: claims work again"
		);
	}
}

###############################################################################
note('4. dedup_claim distributed with create_distributed_function');

($ret, $out, $err) = $coordinator->psql('postgres',
	q{SELECT create_distributed_function('dedup_claim(text,text)', '$1', colocate_with := 'loyalty')}
);
SKIP:
{
	skip("Citus refuses create_distributed_function: $err", 4) if $ret;
	$coordinator->psql_fails_like(
		'postgres',
		"SELECT dedup_claim('loyalty-service', 'push-1')",
		qr/dedup cannot be used on a Citus worker node/,
		'a claim pushed down to a worker');
	is( $workers[0]
		  ->safe_psql('postgres', 'SELECT count(*) FROM processed_messages')
		  . $workers[1]
		  ->safe_psql('postgres', 'SELECT count(*) FROM processed_messages'),
		'00',
		'nothing was claimed in the workers\' tables');
}

done_testing();
