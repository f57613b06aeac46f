#
# 061_citus_colocated.pl: claims kept in a distributed table colocated with
# the business rows (dedup issue 15, items 2 and 3), on the cluster of
# test/perl/DedupCitus.pm (skipped, saying so, where the citus extension is
# not installed).  The business table loyalty is distributed by customer_id
# (bigint); the records table loyalty_claims is created by
# dedup_create_colocated_records(), colocated with it.  What is checked:
#
#  1. creation: the table's shape and colocation, and what is refused
#     (a table that is not hash-distributed, a missing one, hostile names
#     taken as names); a registered table altered is refused;
#     a registered table whose primary key is dropped is refused too;
#  2. claim and update commit on one worker in one transaction with
#     one-phase commit (Citus's remote commands: COMMIT, no PREPARE); a
#     duplicate is false; a rollback keeps neither; a batch answers as
#     dedup_claim_many does on one node; dedup_seen_routed;
#     dedup_forget_routed (true, then false; the id is claimed again);
#  3. two sessions claiming one id: the second waits for the first, and
#     exactly one gets true; under REPEATABLE READ and SERIALIZABLE the
#     answers of test/isolation/specs/claim-repeatable-read.spec and
#     claim-serializable.spec on one node (40001 after a wait for a claim
#     that commits, or for one committed after the snapshot; true after a
#     rollback; false for one committed before the snapshot);
#  4. after citus_move_shard_placement of the shard holding a claimed id,
#     and after a rebalance: still a duplicate, and claims keep working;
#  5. counters: dedup_stats counts the routed claims and duplicates;
#  6. retention: the coordinator's sweeper deletes the expired rows on
#     every shard with dedup_retention's windows and counts them in
#     dedup_sweeper; unexpired rows are kept; dedup_colocated_storage;
#  7. security: an application role, a role without privileges on the
#     table, a connect-only role, a monitoring role, the claimant mapping,
#     and a table that is not registered; dedup_forget_routed runs as its
#     caller; neither it nor registering is PUBLIC's;
#  8. refused on a worker; DROP EXTENSION leaves the records table and
#     takes its registration; dedup_register_colocated_records() registers
#     it again (earlier claims are duplicates again), and a table made by
#     hand of exactly the shape; what it refuses (not the owner, a local or
#     reference table, distributed by another column, columns, primary
#     key, indexes, the default of processed_at);
#  9. a worker down before the commit: the commit fails, nothing is kept
#     once it is back, and the redelivery is claimed and applied once; a
#     worker down at the claim: the claim fails (never false or NULL);
# 10. (issue 29, item 7) a routed claim and a write to a local table commit
#     with two-phase commit: a SERIALIZABLE coordinator whose commit fails
#     (40001) after Citus's pre-commit keeps neither the claim nor the update;
# 11. (issue 29, items 1 and 8) a tenant's registered table: a rule added
#     later never runs with the sweep role's rights (the table is skipped,
#     reported, and the tables registered after it are swept, by the
#     sweeper, dedup_sweep_colocated() and dedup_colocated_storage()); a
#     trigger on its shards runs as the tenant; its owner's privilege
#     revoked fails that table alone, and so does a statement_timeout it
#     sets for itself on the workers (a worker's cancel is not the sweep's);
#     an operator who may not read one table sweeps the others; a dropped
#     table leaves the registry.
#
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupCitus;
use DedupNode;
use PostgreSQL::Test::Utils;
use Test::More;

my ($coordinator, @workers) = DedupCitus::cluster(
	coordinator => {
		sweeps => 'on request',
		conf   => { 'dedup.sweep_enabled' => 'on' }
	});

$coordinator->safe_psql(
	'postgres', q{
CREATE EXTENSION dedup;
CREATE TABLE loyalty (customer_id bigint PRIMARY KEY, points int NOT NULL);
SELECT create_distributed_table('loyalty', 'customer_id');
INSERT INTO loyalty SELECT i, 0 FROM generate_series(1, 20) i;
CREATE TABLE ref (k int PRIMARY KEY);
SELECT create_reference_table('ref');
});

sub query { return $coordinator->safe_psql('postgres', shift) }

###############################################################################
note('1. creation');

is( query(
		q{SELECT dedup_create_colocated_records('loyalty_claims', 'loyalty')}
	),
	'loyalty_claims',
	'created and registered');
is( query(
		q{
SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod), ', ' ORDER BY attnum)
  FROM pg_attribute WHERE attrelid = 'loyalty_claims'::regclass AND attnum > 0}
	),
	'route bigint, consumer text, message_id text, processed_at timestamp with time zone',
	'route has the type of the distribution column');
is( query(
		q{
SELECT count(DISTINCT colocationid) FROM pg_dist_partition
 WHERE logicalrelid IN ('loyalty'::regclass, 'loyalty_claims'::regclass)}),
	'1',
	'colocated with the business table');
is(query(q{SELECT records FROM dedup_colocated_tables}),
	'loyalty_claims', 'in the registry');

$coordinator->psql_fails_like(
	'postgres',
	q{SELECT dedup_create_colocated_records('ref_claims', 'ref')},
	qr/ERROR:  22023: table "ref" is not a hash-distributed table/,
	'a reference table is refused');
$coordinator->psql_fails_like(
	'postgres',
	q{SELECT dedup_create_colocated_records('x', 'no_such_table')},
	qr/ERROR:  42P01/,
	'a missing table is refused');

# hostile names are names: quotes and dots in a schema and a table name
query(q{CREATE SCHEMA "we""ird.s"});
is( query(
		q{SELECT dedup_create_colocated_records('"we""ird.s"."odd ""claims"".x"', 'loyalty')}
	),
	q{"we""ird.s"."odd ""claims"".x"},
	'a quoted, dotted name is created as such');
is( query(
		q{SELECT dedup_claim_routed('"we""ird.s"."odd ""claims"".x"', '3', 'svc', 'm-1')}
	),
	't',
	'and claimed into');

# a registered table altered behind dedup's back: refused, not guessed at
query(
	q{ALTER TABLE "we""ird.s"."odd ""claims"".x" RENAME COLUMN consumer TO consumer_name}
);
$coordinator->psql_fails_like(
	'postgres',
	q{SELECT dedup_claim_routed('"we""ird.s"."odd ""claims"".x"', '3', 'svc', 'm-2')},
	qr/ERROR:  42809: table "odd "claims".x" is not usable as colocated records/,
	'a renamed column is refused');
query(
	q{ALTER TABLE "we""ird.s"."odd ""claims"".x" RENAME COLUMN consumer_name TO consumer}
);
is( query(
		q{SELECT dedup_claim_routed('"we""ird.s"."odd ""claims"".x"', '3', 'svc', 'm-2')}
	),
	't',
	'and claimed into again once it is undone');

# without its primary key a claim would insert duplicates: refused
query(
	q{ALTER TABLE "we""ird.s"."odd ""claims"".x" DROP CONSTRAINT "odd ""claims"".x_pkey"}
);
$coordinator->psql_fails_like(
	'postgres',
	q{SELECT dedup_claim_routed('"we""ird.s"."odd ""claims"".x"', '3', 'svc', 'm-2')},
	qr/ERROR:  42809: table "odd "claims".x" is not usable as colocated records\nDETAIL:  Its primary key must be \(route, consumer, message_id\)/,
	'a dropped primary key is refused');
query(
	q{ALTER TABLE "we""ird.s"."odd ""claims"".x" ADD PRIMARY KEY (route, consumer, message_id)}
);
is( query(
		q{SELECT dedup_claim_routed('"we""ird.s"."odd ""claims"".x"', '3', 'svc', 'm-2')}
	),
	'f',
	'and a duplicate once it is back');
$coordinator->psql_fails_like(
	'postgres',
	q{SELECT dedup_create_colocated_records('a; DROP TABLE loyalty; --', 'loyalty')},
	qr/ERROR:  42601|ERROR:  .*syntax|invalid name syntax/,
	'a name that is not one is refused');
is(query(q{SELECT count(*) FROM loyalty}), '20', 'loyalty is still there');

###############################################################################
note('2. claim and update: one worker, one-phase commit');

sub consume
{
	my ($customer, $message, $end) = @_;
	$end //= 'COMMIT';
	return $coordinator->psql(
		'postgres', qq{
SET citus.log_remote_commands = on;
SET client_min_messages = log;
BEGIN;
SELECT dedup_claim_routed('loyalty_claims', '$customer', 'loyalty-service', '$message');
UPDATE loyalty SET points = points + 1 WHERE customer_id = $customer;
$end;
});
}

# the consumer's transaction, for another consumer: the work only when
# claimed; prints the claim's answer
sub consume_as
{
	my ($customer, $consumer, $message) = @_;
	return $coordinator->psql(
		'postgres', qq{
BEGIN;
SELECT dedup_claim_routed('loyalty_claims', '$customer', '$consumer', '$message') AS claimed \\gset
\\if :claimed
UPDATE loyalty SET points = points + 1 WHERE customer_id = $customer;
\\endif
COMMIT;
\\echo :claimed
});
}

my ($ret, $out, $err) = consume(1, 'evt-1');
is($ret . $out, '0t', 'claim and update commit; the claim says first time');
like(
	$err,
	qr/issuing COMMIT\b(?! PREPARED)/,
	'Citus commits the worker with one-phase commit');
unlike($err, qr/PREPARE TRANSACTION/, 'no two-phase commit');
my @servers = $err =~ /on server (\S+)/g;
my %servers = map { $_ => 1 } @servers;
is(scalar(keys %servers),
	1, 'one worker, one connection: ' . join(', ', keys %servers));

($ret, $out, $err) = consume(1, 'evt-1');
is($out, 'f', 'the redelivery is a duplicate');
is(query(q{SELECT points FROM loyalty WHERE customer_id = 1}),
	'2', '(the test applies both: the consumer skips the work on false)');

($ret, $out, $err) = consume(2, 'evt-rb', 'ROLLBACK');
is($out, 't', 'claimed in a transaction that rolls back');
is( query(
		q{SELECT dedup_seen_routed('loyalty_claims', '2', 'loyalty-service', 'evt-rb')}
	),
	'f',
	'the rollback keeps no claim');
is(query(q{SELECT points FROM loyalty WHERE customer_id = 2}),
	'0', 'and no update');
is( query(
		q{SELECT dedup_seen_routed('loyalty_claims', '1', 'loyalty-service', 'evt-1')}
	),
	't',
	'dedup_seen_routed sees a recorded claim');

# a replay on purpose: dedup_forget_routed, in the server log as dedup_forget
query(
	q{SELECT dedup_claim_routed('loyalty_claims', '3', 'forget-svc', 'f-1')});
my $log_offset = -s $coordinator->logfile;
is( query(
		q{SELECT dedup_forget_routed('loyalty_claims', '3', 'forget-svc', 'f-1')}
	),
	't',
	'dedup_forget_routed deletes the record');
is( query(
		q{SELECT dedup_forget_routed('loyalty_claims', '3', 'forget-svc', 'f-1')}
	),
	'f',
	'and finds none the second time');
is( query(
		q{SELECT dedup_seen_routed('loyalty_claims', '3', 'forget-svc', 'f-1')}
	),
	'f',
	'it is not seen');
is( query(
		q{SELECT dedup_claim_routed('loyalty_claims', '3', 'forget-svc', 'f-1')}
	),
	't',
	'and the redelivery is claimed again');
is( $coordinator->log_count(
		$log_offset,
		qr/dedup audit: role \S+ \(session user \S+\) deleted the record of message id 'f-1' of consumer 'forget-svc'/
	),
	1,
	'the forget is in the server log');
($ret, $out, $err) = $coordinator->psql(
	'postgres', q{
BEGIN;
SELECT dedup_forget_routed('loyalty_claims', '3', 'forget-svc', 'f-1');
ROLLBACK;
SELECT dedup_seen_routed('loyalty_claims', '3', 'forget-svc', 'f-1');});
is($out, "t\nt", 'a forget rolled back keeps the record');

# a batch answers as dedup_claim_many does on one node
my $batch = q{ARRAY['b-2', 'b-1', 'b-2', 'b-3', 'b-1']};
query(qq{SELECT dedup_claim_routed('loyalty_claims', '4', 'batch', 'b-3')});
query(qq{SELECT dedup_claim('batch', 'b-3')});
my $local = query(qq{SELECT dedup_claim_many('batch', $batch)});
($ret, $out, $err) = $coordinator->psql(
	'postgres', qq{
SET citus.log_remote_commands = on;
SET client_min_messages = log;
SELECT dedup_claim_routed_many('loyalty_claims', '4', 'batch', $batch);
});
is($out, $local, "a batch: $out, as dedup_claim_many: $local");
is(scalar(() = $err =~ /issuing INSERT/g),
	1, 'one routed statement for the batch');
is( query(
		qq{SELECT dedup_claim_routed_many('loyalty_claims', '4', 'batch', $batch)}
	),
	'{f,f,f,f,f}',
	'all duplicates the second time');
is( query(
		q{SELECT dedup_claim_routed_many('loyalty_claims', '4', 'batch', '{}')}
	),
	'{}',
	'an empty batch');

###############################################################################
note('3. two sessions, one id');

my $s1 = $coordinator->background_psql('postgres');
my $s2 = $coordinator->background_psql('postgres');
$s1->query_safe('BEGIN');
is( $s1->query_safe(
		q{SELECT dedup_claim_routed('loyalty_claims', '5', 'race', 'r-1')}),
	't',
	'the first session claims');
$s2->query_until(
	qr/started/, q{
\echo started
BEGIN;
SELECT dedup_claim_routed('loyalty_claims', '5', 'race', 'r-1');
});
ok( $coordinator->poll_query_until(
		'postgres', q{
SELECT sum(result::int) > 0 FROM run_command_on_workers(
  $$SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'$$)}),
	'the second waits for it, on the worker');
$s1->query_safe('COMMIT');
my $second = $s2->query_safe('COMMIT');
like($second, qr/^f$/m, 'and then gets false: exactly one true');
$s1->quit;
$s2->quit;

# Under REPEATABLE READ and SERIALIZABLE, the permutations of
# claim-repeatable-read.spec and claim-serializable.spec that involve a
# claim only.  A step's result is its output and the SQLSTATE of its error.
sub step
{
	my ($session, $sql) = @_;
	$session->{stderr} = '';
	my $out   = $session->query($sql);
	my @codes = $session->{stderr} =~ /ERROR:  ([0-9A-Z]{5}):/g;
	return join(' ', grep { $_ ne '' } $out, map { "ERROR $_" } @codes);
}

# Start a step that waits for a lock on a worker; step($session, '') later
# gives its result.
sub step_waits
{
	my ($session, $sql) = @_;
	$session->{stderr} = '';
	$session->query_until(qr/started/, "\\echo started\n$sql;\n");
	return $coordinator->poll_query_until(
		'postgres', q{
SELECT sum(result::int) > 0 FROM run_command_on_workers(
  $$SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'$$)});
}
for my $level ('REPEATABLE READ', 'SERIALIZABLE')
{
	my ($l) = $level =~ /^(\w)/;
	my $n = 0;
	my ($claim, $snap);
	my $next = sub {
		$n++;
		$claim =
		  "SELECT dedup_claim_routed('loyalty_claims', '6', 'iso', '$l-$n')";
		$snap =
		  "SELECT count(*) FROM loyalty_claims WHERE route = 6 AND message_id = '$l-$n'";
	};
	my ($i1, $i2) = map {
		my $s = $coordinator->background_psql('postgres', on_error_stop => 0);
		$s->query_safe('\set VERBOSITY verbose');
		$s
	} (1, 2);
	my $begin = "BEGIN ISOLATION LEVEL $level";

	# s2's snapshot predates s1's claim; s2 waits for it; s1 commits: 40001
	$next->();
	step($_, $begin) for ($i1, $i2);
	is(step($i1, $claim), 't', "$level: s1 claims");
	is(step($i2, $snap),  '0', "$level: s2 takes its snapshot on the worker");
	ok(step_waits($i2, $claim), "$level: s2's claim waits for s1's");
	step($i1, 'COMMIT');
	is(step($i2, ''),
		'ERROR 40001',
		"$level: s1 commits: s2 gets a serialization failure (40001)");
	step($i2, 'ROLLBACK');

	# the same wait ending in s1's rollback: s2 gets the claim
	$next->();
	step($_,  $begin) for ($i1, $i2);
	step($i1, $claim);
	step($i2, $snap);
	ok(step_waits($i2, $claim), "$level: s2 waits again");
	step($i1, 'ROLLBACK');
	is(step($i2, ''), 't', "$level: s1 rolls back: s2 claims (true)");
	step($i2, 'COMMIT');
	is( query(
			qq{SELECT dedup_seen_routed('loyalty_claims', '6', 'iso', '$l-$n')}
		),
		't',
		"$level: s2's claim is kept");

	# s1's claim commits after s2's snapshot, before s2 claims: no wait, 40001
	$next->();
	step($_,  $begin) for ($i1, $i2);
	step($i1, $claim);
	step($i2, $snap);
	step($i1, 'COMMIT');
	is(step($i2, $claim),
		'ERROR 40001',
		"$level: committed after s2's snapshot: 40001 without a wait");
	step($i2, 'ROLLBACK');

	# a claim committed before s2's snapshot: a plain duplicate
	$next->();
	step($i1, $begin);
	step($i1, $claim);
	step($i1, 'COMMIT');
	step($i2, $begin);
	is(step($i2, $snap), '1', "$level: s2's snapshot sees s1's claim");
	is(step($i2, $claim),
		'f', "$level: committed before s2's snapshot: false");
	step($i2, 'COMMIT');

	# BEGIN alone takes no snapshot (here, on no worker): a plain duplicate
	$next->();
	step($i2, $begin);
	step($i1, $begin);
	step($i1, $claim);
	step($i1, 'COMMIT');
	is(step($i2, $claim),
		'f',
		"$level: s2's first statement, after s1 committed, is a duplicate");
	step($i2, 'COMMIT');
	$_->quit for ($i1, $i2);
}

###############################################################################
note('4. shard moves and rebalances');

my ($shard, $host, $port) = split /\|/, query(
	q{
SELECT s.shardid, p.nodename, p.nodeport
  FROM pg_dist_shard s JOIN pg_dist_placement pl USING (shardid)
  JOIN pg_dist_node p USING (groupid)
 WHERE s.shardid = get_shard_id_for_distribution_column('loyalty_claims', 1)}
);
my ($to) = grep { $_->port != $port } @workers;
query(  qq{SELECT citus_move_shard_placement($shard, '$host', $port, '}
	  . $to->host . q{', }
	  . $to->port
	  . q{, shard_transfer_mode => 'block_writes')});
is( query(
		qq{SELECT nodeport FROM pg_dist_placement JOIN pg_dist_node USING (groupid) WHERE shardid = $shard}
	),
	$to->port,
	'the shard holding evt-1 moved to the other worker');
($ret, $out, $err) = consume(1, 'evt-1');
is($out, 'f', 'after the move: still a duplicate');
($ret, $out, $err) = consume(1, 'evt-2');
is($out, 't', 'new claims work');
unlike($err, qr/PREPARE TRANSACTION/, 'in one-phase commit');
is(query(q{SELECT points FROM loyalty WHERE customer_id = 1}),
	'4', 'the business row moved with it');

query(
	q{SELECT rebalance_table_shards(shard_transfer_mode => 'block_writes')});
note(
	'placements after the rebalance: '
	  . query(
		q{SELECT string_agg(shardid || '@' || nodeport, ' ' ORDER BY shardid) FROM pg_dist_placement JOIN pg_dist_node USING (groupid) JOIN pg_dist_shard USING (shardid) WHERE logicalrelid = 'loyalty_claims'::regclass}
	  ));
is( query(
		q{
SELECT string_agg(dedup_claim_routed('loyalty_claims', c::text, 'loyalty-service', 'evt-1')::text, '' ORDER BY c)
  FROM generate_series(1, 3) c}),
	'falsetruetrue',
	'after the rebalance: customer 1 still a duplicate, others claim');
is( query(
		q{SELECT dedup_claim_routed_many('loyalty_claims', '4', 'batch', ARRAY['b-1', 'b-9'])}
	),
	'{f,t}',
	'batches too');

###############################################################################
note('5. counters');

is( query(
		q{SELECT claims || '/' || duplicates FROM dedup_stats WHERE consumer = 'race'}
	),
	'1/1',
	'dedup_stats counts routed claims (true) and duplicates on the coordinator'
);
is( query(
		q{SELECT claims || '/' || duplicates FROM dedup_stats WHERE consumer = 'loyalty-service'}
	),
	'5/3',
	'for every routed claim');

###############################################################################
note('6. retention across nodes');

# 20 expired rows (one per customer, so on every shard) and a fresh one for
# old-svc (the window counts back from it: 1 hour, dedup.retention); the
# same for keep-svc, whose own window is 30 days
query(
	q{
SELECT dedup_set_retention('keep-svc', '30 days');
INSERT INTO loyalty_claims (route, consumer, message_id, processed_at)
SELECT i, c, 'old-' || i, now() - interval '2 hours'
  FROM generate_series(1, 20) i, (VALUES ('old-svc'), ('keep-svc')) v(c);
INSERT INTO loyalty_claims (route, consumer, message_id) VALUES (7, 'old-svc', 'fresh'), (7, 'keep-svc', 'fresh');
});
is( query(
		q{SELECT count(*) FROM run_command_on_shards('loyalty_claims',
	$$SELECT count(*) FROM %s WHERE consumer = 'old-svc' AND message_id LIKE 'old-%%'$$) WHERE result::int > 0}
	),
	'4',
	'expired rows on every shard');
is( query(
		q{SELECT expires_before IS NOT NULL FROM dedup_colocated_storage() WHERE consumer = 'old-svc'}
	),
	't',
	'dedup_colocated_storage shows the cutoff');
is($coordinator->sweep('postgres'),
	'done', 'the coordinator\'s sweeper sweeps');
is(query(q{SELECT last_sweep_rows FROM dedup_sweeper}),
	'20', 'and counts the colocated rows it deleted');
is( query(
		q{SELECT consumer || '=' || records_count FROM dedup_colocated_storage() WHERE records = 'loyalty_claims'::regclass AND consumer IN ('old-svc', 'keep-svc') ORDER BY consumer}
	),
	"keep-svc=21\nold-svc=1",
	'expired rows gone from every shard, the fresh one and the longer window kept'
);
is( query(
		q{SELECT sum(result::int) FROM run_command_on_shards('loyalty_claims',
	$$SELECT count(*) FROM %s WHERE consumer = 'old-svc'$$)}),
	'1',
	'on the workers\' shards too');
is(query(q{SELECT dedup_sweep_colocated()}),
	'0', 'nothing left for dedup_sweep_colocated');
is(query(q{SELECT table_bytes > 0 FROM dedup_colocated_storage() LIMIT 1}),
	't', 'table sizes on all nodes');

###############################################################################
note('7. security');

query(
	q{
CREATE ROLE app LOGIN;
CREATE ROLE noprivs LOGIN;
CREATE ROLE connectonly LOGIN;
CREATE ROLE monitor LOGIN IN ROLE pg_monitor;
GRANT EXECUTE ON FUNCTION dedup_claim_routed(regclass, text, text, text),
	dedup_claim_routed_many(regclass, text, text, text[]),
	dedup_seen_routed(regclass, text, text, text),
	dedup_create_colocated_records(text, regclass) TO app, noprivs;
GRANT SELECT, INSERT ON loyalty_claims TO app;
GRANT SELECT, UPDATE ON loyalty TO app;
GRANT EXECUTE ON FUNCTION dedup_forget_routed(regclass, text, text, text) TO app;
SELECT dedup_allow_claimant('mapped-svc', 'monitor');
});

sub as
{
	my ($role, $sql) = @_;
	return $coordinator->psql('postgres', "SET ROLE $role; $sql");
}
($ret, $out, $err) = as(
	'app', q{
BEGIN;
SELECT dedup_claim_routed('loyalty_claims', '9', 'app-svc', 'a-1');
UPDATE loyalty SET points = points + 1 WHERE customer_id = 9;
COMMIT;});
is( $ret . $out,
	'0t',
	'an application role with INSERT and SELECT claims (as itself, on the worker too)'
);
$coordinator->psql_fails_like(
	'postgres',
	q{SET ROLE app; SELECT dedup_claim_routed('loyalty', '9', 'app-svc', 'a-1')},
	qr/ERROR:  22023: table "loyalty" is not a colocated records table of dedup/,
	'a table that is not registered is refused, privileges or not');
$coordinator->psql_fails_like(
	'postgres',
	q{SET ROLE noprivs; SELECT dedup_claim_routed('loyalty_claims', '9', 'app-svc', 'a-2')},
	qr/ERROR:  42501: permission denied for table loyalty_claims/,
	'EXECUTE without INSERT on the table: refused by the table\'s privileges'
);
$coordinator->psql_fails_like(
	'postgres',
	q{SET ROLE noprivs; SELECT dedup_create_colocated_records('mine', 'loyalty')},
	qr/ERROR:  42501: must be owner of table loyalty/,
	'colocating with someone else\'s table is refused');
$coordinator->psql_fails_like(
	'postgres',
	q{SET ROLE connectonly; SELECT dedup_claim_routed('loyalty_claims', '9', 'app-svc', 'a-3')},
	qr/ERROR:  42501: permission denied for function dedup_claim_routed/,
	'a connect-only role may not claim');
$coordinator->psql_fails_like(
	'postgres',
	q{SET ROLE app; SELECT dedup_forget_routed('loyalty_claims', '9', 'app-svc', 'a-1')},
	qr/ERROR:  42501: permission denied for table loyalty_claims/,
	'a forget runs as its caller: EXECUTE without DELETE on the table is refused'
);
$coordinator->psql_fails_like(
	'postgres',
	q{SET ROLE connectonly; SELECT dedup_forget_routed('loyalty_claims', '9', 'app-svc', 'a-1')},
	qr/ERROR:  42501: permission denied for function dedup_forget_routed/,
	'a connect-only role may not forget');
$coordinator->psql_fails_like(
	'postgres',
	q{SET ROLE connectonly; SELECT dedup_register_colocated_records('loyalty_claims')},
	qr/ERROR:  42501: permission denied for function dedup_register_colocated_records/,
	'nor register');
$coordinator->psql_fails_like(
	'postgres',
	q{SET ROLE connectonly; SELECT dedup_create_colocated_records('mine', 'loyalty')},
	qr/ERROR:  42501: permission denied for function dedup_create_colocated_records/,
	'nor create');
$coordinator->psql_fails_like(
	'postgres',
	q{SET ROLE app; SELECT dedup_claim_routed('loyalty_claims', '9', 'mapped-svc', 'a-4')},
	qr/ERROR:  42501: role "app" may not use dedup_claim_routed\(\) for consumer "mapped-svc"/,
	'the claimant mapping applies');
$coordinator->psql_fails_like(
	'postgres',
	q{SET ROLE app; SELECT * FROM dedup_colocated_storage()},
	qr/ERROR:  42501: permission denied for function dedup_colocated_storage/,
	'the storage figures are for monitoring roles');
($ret, $out, $err) = as('monitor',
	q{SELECT count(*) > 0 FROM dedup_colocated_storage(); SELECT count(*) FROM dedup_colocated_tables}
);
is($ret . $out, "0t\n2", 'a monitoring role reads them and the registry');
$coordinator->psql_fails_like(
	'postgres',
	q{SET ROLE monitor; SELECT dedup_claim_routed('loyalty_claims', '9', 'mapped-svc', 'a-5')},
	qr/ERROR:  42501: permission denied for function dedup_claim_routed/,
	'but may not claim');
$coordinator->psql_fails_like(
	'postgres',
	q{SET ROLE app; INSERT INTO dedup_colocated_tables VALUES ('loyalty')},
	qr/ERROR:  42501: permission denied for table dedup_colocated_tables/,
	'nobody but superusers registers a table by hand');

###############################################################################
note('8. on a worker; DROP EXTENSION');

for my $call (
	q{SELECT dedup_claim_routed('loyalty_claims', '1', 'svc', 'w-1')},
	q{SELECT dedup_claim_routed_many('loyalty_claims', '1', 'svc', ARRAY['w-1'])},
	q{SELECT dedup_create_colocated_records('w_claims', 'loyalty')},
	q{SELECT dedup_register_colocated_records('loyalty_claims')},
	q{SELECT dedup_forget_routed('loyalty_claims', '1', 'svc', 'w-1')},
	q{SELECT dedup_sweep_colocated()})
{
	$workers[0]->psql_fails_like(
		'postgres', $call,
		qr/ERROR:  0A000: .* must be called on the Citus coordinator/,
		"worker: $call");
}

query(q{DROP EXTENSION dedup});
is(query(q{SELECT count(*) > 0 FROM loyalty_claims}),
	't', 'DROP EXTENSION leaves the records table and its rows');
query(q{CREATE EXTENSION dedup});
$coordinator->psql_fails_like(
	'postgres',
	q{SELECT dedup_claim_routed('loyalty_claims', '1', 'svc', 'x')},
	qr/ERROR:  22023: table "loyalty_claims" is not a colocated records table of dedup/,
	'and its registration went with the extension');

is(query(q{SELECT dedup_register_colocated_records('loyalty_claims')}),
	'loyalty_claims', 'dedup_register_colocated_records registers it again');
is( query(
		q{SELECT dedup_claim_routed('loyalty_claims', '1', 'loyalty-service', 'evt-1')}
	),
	'f',
	'claims made before DROP EXTENSION are duplicates again');
is( query(
		q{SELECT dedup_claim_routed('loyalty_claims', '1', 'loyalty-service', 'evt-after')}
	),
	't',
	'and new ones are claimed');
($ret, $out, $err) = $coordinator->psql_verbose('postgres',
	q{SELECT dedup_register_colocated_records('loyalty_claims')});
is($ret . $out, '0loyalty_claims', 'registering it again is a no-op');
like(
	$err,
	qr/NOTICE:  42710: table "loyalty_claims" is already registered as colocated records, skipping/,
	'with a notice');
is(query(q{SELECT count(*) FROM dedup_colocated_tables}),
	'1', 'registered once');

# a table made by hand, of exactly the shape: registered, claimed into
query(
	q{
CREATE TABLE hand_claims (route bigint NOT NULL, consumer text NOT NULL,
	message_id text NOT NULL, processed_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (route, consumer, message_id));
CREATE INDEX hand_claims_sweep ON hand_claims (consumer, processed_at);
SELECT create_distributed_table('hand_claims', 'route', colocate_with => 'loyalty');
});
is(query(q{SELECT dedup_register_colocated_records('hand_claims')}),
	'hand_claims', 'a table made by hand is registered');
is( query(
		q{SELECT dedup_claim_routed('hand_claims', '1', 'svc', 'h-1') || '/' || dedup_claim_routed('hand_claims', '1', 'svc', 'h-1')}
	),
	'true/false',
	'and claimed into');

# what is refused: the shape a claim, its answer and its commit rely on
my %bad = (
	'a local table'     => [ '', 'It is not a distributed table' ],
	'a reference table' => [
		q{SELECT create_reference_table('bad')},
		'It is not a distributed table|It must be hash-distributed'
	],
	'a table distributed by consumer' => [
		q{SELECT create_distributed_table('bad', 'consumer')},
		'It must be hash-distributed by its route column'
	],
	'an extra column' => [
		q{ALTER TABLE bad ADD COLUMN note text},
		'Its columns must be route, consumer text, message_id text and processed_at timestamptz, in this order, and no others'
	],
	'columns in another order' => [
		q{ALTER TABLE bad RENAME consumer TO c; ALTER TABLE bad RENAME message_id TO consumer; ALTER TABLE bad RENAME c TO message_id},
		'Its columns must be route, consumer text, message_id text and processed_at timestamptz, in this order'
	],
	'a nullable processed_at' => [
		q{ALTER TABLE bad ALTER processed_at DROP NOT NULL},
		'Its columns must all be NOT NULL'
	],
	'no default for processed_at' => [
		q{ALTER TABLE bad ALTER processed_at DROP DEFAULT},
		'Its column processed_at must default to now\(\)'
	],
	'another default for processed_at' => [
		q{ALTER TABLE bad ALTER processed_at SET DEFAULT '-infinity'},
		'Its column processed_at must default to now\(\)'
	],
	'a primary key in another order' => [
		q{ALTER TABLE bad DROP CONSTRAINT bad_pkey; ALTER TABLE bad ADD PRIMARY KEY (consumer, route, message_id)},
		'Its primary key must be \(route, consumer, message_id\)'
	],
	'another unique index' => [
		q{CREATE UNIQUE INDEX bad_by_id ON bad (route, message_id)},
		'It has the unique index or exclusion constraint "bad_by_id" besides its primary key'
	],
	'no index for the sweep' => [
		q{DROP INDEX bad_sweep},
		'It lacks a btree index on \(consumer, processed_at\)'
	],
	'a partial index for the sweep' => [
		q{DROP INDEX bad_sweep; CREATE INDEX bad_sweep ON bad (consumer, processed_at) WHERE consumer <> ''},
		'It lacks a btree index on \(consumer, processed_at\)'
	],

	# code of the table's owner that the sweep would run (issue 29, item 1)
	'a trigger' => [
		q{SET citus.enable_unsafe_triggers = on; CREATE TRIGGER bad_delete BEFORE DELETE ON bad FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger()},
		'It has trigger "bad_delete", whose code the sweep and the claims would run'
	],
	'a rule' => [
		q{CREATE RULE bad_rule AS ON DELETE TO bad DO ALSO NOTIFY bad},
		'It has a rule, which would rewrite'
	],
	'row security' => [
		q{ALTER TABLE bad ENABLE ROW LEVEL SECURITY},
		'Row security is enabled on it'
	],);
for my $case (sort keys %bad)
{
	my ($change, $detail) = @{ $bad{$case} };
	my $distribute =
		$change =~ /create_(reference|distributed)_table/ ? ''
	  : $case eq 'a local table'                          ? ''
	  :   q{SELECT create_distributed_table('bad', 'route', colocate_with => 'loyalty');};
	query(
		qq{
DROP TABLE IF EXISTS bad;
CREATE TABLE bad (route bigint NOT NULL, consumer text NOT NULL,
	message_id text NOT NULL, processed_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (route, consumer, message_id));
CREATE INDEX bad_sweep ON bad (consumer, processed_at);
$distribute
$change;
});
	$coordinator->psql_fails_like(
		'postgres',
		q{SELECT dedup_register_colocated_records('bad')},
		qr/ERROR:  42809: table "bad" is not usable as colocated records\nDETAIL:  (?:$detail)/,
		"register: $case is refused");
}
is( query(
		q{SELECT string_agg(records::text, ',' ORDER BY records::text) FROM dedup_colocated_tables}
	),
	'hand_claims,loyalty_claims',
	'none of them was registered');

# only the owner registers a table
query(
	q{GRANT EXECUTE ON FUNCTION dedup_register_colocated_records(regclass) TO noprivs}
);
query(
	q{DELETE FROM dedup_colocated_tables WHERE records = 'hand_claims'::regclass}
);
$coordinator->psql_fails_like(
	'postgres',
	q{SET ROLE noprivs; SELECT dedup_register_colocated_records('hand_claims')},
	qr/ERROR:  42501: must be owner of table hand_claims/,
	'registering a table of another role is refused');
query(q{ALTER TABLE hand_claims OWNER TO noprivs});
($ret, $out) = $coordinator->psql('postgres',
	q{SET ROLE noprivs; SELECT dedup_register_colocated_records('hand_claims')}
);
is($ret . $out,
	'0hand_claims',
	'its owner registers it, with EXECUTE and no privilege on the registry');

###############################################################################
note('9. a worker down');

# a customer whose shard is on worker1
my $worker   = $workers[0];
my $customer = query(
	qq{
SELECT c FROM generate_series(10, 20) c
  JOIN pg_dist_placement pl ON pl.shardid = get_shard_id_for_distribution_column('loyalty_claims', c)
  JOIN pg_dist_node n USING (groupid)
 WHERE n.nodeport = } . $worker->port . q{ ORDER BY c LIMIT 1});
isnt($customer, '', "customer $customer has its shard on worker1");
my $points =
  query(qq{SELECT points FROM loyalty WHERE customer_id = $customer});

my $down = $coordinator->background_psql('postgres', on_error_stop => 0);
$down->query_safe('\set VERBOSITY verbose');
step($down, 'BEGIN');
is( step(
		$down,
		qq{SELECT dedup_claim_routed('loyalty_claims', '$customer', 'down-svc', 'd-1')}
	),
	't',
	'claimed');
step($down,
	qq{UPDATE loyalty SET points = points + 1 WHERE customer_id = $customer});
$worker->stop('immediate');
like(step($down, 'COMMIT'),
	qr/ERROR/, 'worker1 stopped before the COMMIT: the commit fails');
note("the commit's error: $down->{stderr}");
$down->quit;

$coordinator->psql_fails_like(
	'postgres',
	qq{SELECT dedup_claim_routed('loyalty_claims', '$customer', 'down-svc', 'd-1')},
	qr/ERROR:  /,
	'worker1 down at the claim: the claim fails');

$worker->start;
is( query(
		qq{SELECT dedup_seen_routed('loyalty_claims', '$customer', 'down-svc', 'd-1')}
	),
	'f',
	'worker1 back: the claim was not kept');
is(query(qq{SELECT points FROM loyalty WHERE customer_id = $customer}),
	$points, 'nor the update');
($ret, $out, $err) = consume_as($customer, 'down-svc', 'd-1');
is($ret . $out, '0t', 'the redelivery is claimed');
($ret, $out, $err) = consume_as($customer, 'down-svc', 'd-1');
is($out, 'f', 'once');
is( query(qq{SELECT points FROM loyalty WHERE customer_id = $customer}),
	$points + 1,
	'and applied once');

###############################################################################
note('10. a claim and a local write commit together (issue 29, item 7)');

# outbox is local on the coordinator.  Two SERIALIZABLE transactions that
# each read it and write it: the second to commit is doomed as a pivot when
# the first commits, and fails at its own COMMIT, after Citus's pre-commit.
query(q{CREATE TABLE outbox (id bigserial PRIMARY KEY, note text)});
$points = query(q{SELECT points FROM loyalty WHERE customer_id = 6});
my $consumer = $coordinator->background_psql('postgres', on_error_stop => 0);
my $writer   = $coordinator->background_psql('postgres', on_error_stop => 0);
$consumer->query_safe('\set VERBOSITY verbose');
$consumer->query_safe('SET citus.log_remote_commands = on');
$consumer->query_safe('SET client_min_messages = log');
step($consumer, 'BEGIN ISOLATION LEVEL SERIALIZABLE');
step($consumer, 'SELECT count(*) FROM outbox');
step($writer,   'BEGIN ISOLATION LEVEL SERIALIZABLE');
step($writer,   'SELECT count(*) FROM outbox');
is( step(
		$consumer,
		q{SELECT dedup_claim_routed('loyalty_claims', '6', 'outbox-svc', 'ser-1')}
	),
	't',
	'the consumer claims');
step($consumer,
	q{UPDATE loyalty SET points = points + 1 WHERE customer_id = 6});
step($consumer, q{INSERT INTO outbox (note) VALUES ('ser-1 applied')});
step($writer,   q{INSERT INTO outbox (note) VALUES ('another')});
is(step($writer, 'COMMIT'), '', 'the concurrent writer commits');
like(
	step($consumer, 'COMMIT'),
	qr/ERROR 40001/,
	'the consumer\'s COMMIT fails on the coordinator (40001)');

# with two-phase commit Citus logs the transaction (pg_dist_transaction)
# before it prepares, and the doomed transaction fails there
unlike(
	$consumer->{stderr},
	qr/issuing COMMIT/,
	'the worker was not committed before the coordinator (two-phase commit: a local write)'
);
like($consumer->{stderr}, qr/issuing ROLLBACK/, 'it was rolled back');
$consumer->quit;
$writer->quit;
is( query(
		q{SELECT dedup_seen_routed('loyalty_claims', '6', 'outbox-svc', 'ser-1')}
	),
	'f',
	'the claim was rolled back with the local write');
is(query(q{SELECT points FROM loyalty WHERE customer_id = 6}),
	$points, 'and the update');
is(query(q{SELECT count(*) FROM outbox WHERE note = 'ser-1 applied'}),
	'0', '(the outbox row is lost)');
is( query(
		q{SELECT dedup_claim_routed('loyalty_claims', '6', 'outbox-svc', 'ser-1')}
	),
	't',
	'the redelivery is claimed, and applied once');

# the local write first, then the claim: two-phase commit too
($ret, $out, $err) = $coordinator->psql(
	'postgres', q{
SET citus.log_remote_commands = on;
SET client_min_messages = log;
BEGIN;
INSERT INTO outbox (note) VALUES ('first');
SELECT dedup_claim_routed('loyalty_claims', '6', 'outbox-svc', 'ser-2');
COMMIT;});
like(
	$err,
	qr/PREPARE TRANSACTION/,
	'a local write before the claim: two-phase commit');
($ret, $out, $err) = consume(6, 'ser-3');
unlike(
	$err,
	qr/PREPARE TRANSACTION/,
	'a claim and a distributed update alone: still one-phase');

###############################################################################
note(
	'11. the code of a records table\'s owner and the sweep (issue 29, items 1 and 8)'
);

# a tenant, who registers a records table of its own; a superuser as
# dedup.sweep_role (the sweep of processed_messages runs as it)
query(
	q{
CREATE ROLE tenant LOGIN;
CREATE ROLE sweep_super SUPERUSER LOGIN;
GRANT EXECUTE ON FUNCTION dedup_register_colocated_records(regclass) TO tenant;
CREATE TABLE stolen (who text, super boolean);
GRANT INSERT ON stolen TO PUBLIC;
});
$_->safe_psql('postgres',
	q{CREATE TABLE stolen (who text, super boolean); GRANT INSERT ON stolen TO PUBLIC}
) for @workers;

sub records_table
{
	my ($name, $owner) = @_;
	query(
		qq{
CREATE TABLE $name (route bigint NOT NULL, consumer text NOT NULL,
	message_id text NOT NULL, processed_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (route, consumer, message_id));
CREATE INDEX ON $name (consumer, processed_at);
SELECT create_distributed_table('$name', 'route', colocate_with => 'loyalty');
ALTER TABLE $name OWNER TO $owner;
});
}

# 20 expired rows of consumer (one per customer: on every shard), a fresh one
sub expired
{
	my ($name, $consumer) = @_;
	query(
		qq{
INSERT INTO $name (route, consumer, message_id, processed_at)
SELECT i, '$consumer', 'old-' || i, now() - interval '2 hours' FROM generate_series(1, 20) i
	ON CONFLICT DO NOTHING;
INSERT INTO $name (route, consumer, message_id) VALUES (1, '$consumer', 'fresh')
	ON CONFLICT (route, consumer, message_id) DO UPDATE SET processed_at = EXCLUDED.processed_at;
});
}
sub rows_of { return query(qq{SELECT count(*) FROM $_[0]}) }

records_table('tenant_claims', 'tenant');
($ret, $out, $err) = $coordinator->psql('postgres',
	q{SET ROLE tenant; SELECT dedup_register_colocated_records('tenant_claims')}
);
is($ret . $out, '0tenant_claims', 'the tenant registers its table');
records_table('late_claims', query('SELECT current_user'));
query(q{SELECT dedup_register_colocated_records('late_claims')});
is( query(
		q{SELECT string_agg(records::text, ',' ORDER BY registered_at) FROM dedup_colocated_tables}
	),
	'loyalty_claims,hand_claims,tenant_claims,late_claims',
	'registered after the tenant\'s: late_claims');
expired('tenant_claims', 'tenant-svc');
expired('late_claims',   'late-svc');

# a rule, added after the registration: its actions would run on the
# coordinator as whoever sweeps (a superuser here), in the sweep's DELETE
query(
	q{
SELECT dedup_claim('keeper', 'kept-forever');
CREATE FUNCTION tenant_escalate() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO stolen VALUES (current_user, current_setting('is_superuser')::boolean);
	BEGIN
		DELETE FROM processed_messages WHERE consumer_name = 'keeper';
		EXECUTE 'ALTER ROLE tenant SUPERUSER';
	EXCEPTION WHEN insufficient_privilege THEN
		NULL;
	END;
	RETURN true;
END $$;
ALTER FUNCTION tenant_escalate() OWNER TO tenant;
});
($ret, $out, $err) = $coordinator->psql(
	'postgres', q{
SET ROLE tenant;
CREATE RULE tenant_rule AS ON DELETE TO tenant_claims DO ALSO SELECT tenant_escalate();}
);
is($ret, 0, 'the tenant adds a rule on DELETE to its registered table')
  or diag($err);
$coordinator->safe_psql(
	'postgres', q{
ALTER SYSTEM SET dedup.sweep_role = 'sweep_super';
SELECT pg_reload_conf();});
$log_offset = -s $coordinator->logfile;
is($coordinator->sweep('postgres'), 'partial', 'the sweep: partial');
is(query(q{SELECT rolsuper FROM pg_roles WHERE rolname = 'tenant'}), 'f',
	'the tenant\'s code did not run as the sweep role (no ALTER ROLE tenant SUPERUSER)'
);
is( query(
		q{SELECT count(*) FROM processed_messages WHERE consumer_name = 'keeper'}
	),
	'1',
	'nor deleted another consumer\'s records');
is(query(q{SELECT count(*) FROM stolen}), '0', 'it did not run at all');
is(rows_of('tenant_claims'), '21', 'the tenant\'s table is not swept');
is(rows_of('late_claims'),   '1',  'the table registered after it is');
like(
	query(q{SELECT last_error FROM dedup_sweeper}),
	qr/^colocated records table public.tenant_claims: table "tenant_claims" is not usable as colocated records$/,
	'dedup_sweeper shows which table failed, and why');
is( $coordinator->log_count(
		$log_offset,
		qr/LOG:  dedup sweep of colocated records table public.tenant_claims failed: table "tenant_claims" is not usable as colocated records\n.*DETAIL:  The other registered tables are swept all the same/
	),
	1,
	'and the log');

# the same for an operator's dedup_sweep_colocated() and the storage figures
expired('late_claims', 'late-svc');
($ret, $out, $err) =
  $coordinator->psql_verbose('postgres', q{SELECT dedup_sweep_colocated()});
is($ret . $out, '020', 'dedup_sweep_colocated() sweeps the other tables');
like(
	$err,
	qr/WARNING:  42809: dedup could not sweep colocated records table "tenant_claims": table "tenant_claims" is not usable as colocated records/,
	'and names the refused one in a WARNING');
($ret, $out, $err) = $coordinator->psql_verbose('postgres',
	q{SELECT string_agg(DISTINCT records::text, ',') FROM dedup_colocated_storage()}
);
is( $out,
	'hand_claims,late_claims,loyalty_claims',
	'dedup_colocated_storage() leaves it out');
like(
	$err,
	qr/WARNING:  42809: dedup could not count colocated records table "tenant_claims"/,
	'with a WARNING');
is( query(q{SELECT rolsuper FROM pg_roles WHERE rolname = 'tenant'})
	  . query(q{SELECT count(*) FROM stolen}),
	'f0',
	'the tenant\'s code ran for neither');

# the tenant drops its rule and puts a trigger on its shards on a worker,
# where the coordinator cannot see it: the DELETE runs there as the table's
# owner, never as the sweep role
query(q{DROP RULE tenant_rule ON tenant_claims});
query(
	q{
CREATE FUNCTION tenant_worker_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO stolen VALUES (current_user, current_setting('is_superuser')::boolean);
	RETURN OLD;
END $$;
});
is( $workers[0]->safe_psql(
		'postgres', q{
SET citus.enable_manual_changes_to_shards = on;
SET citus.override_table_visibility = off;
SET ROLE tenant;
DO $$
DECLARE
	shard regclass;
BEGIN
	FOR shard IN SELECT oid FROM pg_class WHERE relname ~ '^tenant_claims_[0-9]+$' AND relkind = 'r' LOOP
		EXECUTE format('CREATE TRIGGER tenant_shard BEFORE DELETE ON %s FOR EACH ROW EXECUTE FUNCTION tenant_worker_trigger()', shard);
	END LOOP;
END $$;
SELECT count(*) > 0 FROM pg_trigger WHERE tgname = 'tenant_shard';
}),
	't',
	'the tenant puts a trigger on its shards on worker1');
is($coordinator->sweep('postgres'),
	'done', 'the sweep without the rule: done');
is(rows_of('tenant_claims'), '1', 'the tenant\'s table is swept');
is( $workers[0]->safe_psql(
		'postgres', q{SELECT DISTINCT who || '/' || super FROM stolen}),
	'tenant/false',
	'the trigger on the worker ran as the tenant, not as the sweep role');

# a tenant that takes the DELETE privilege from itself (its table's owner,
# whom the sweep runs as): that table fails, the others are swept
query(q{REVOKE DELETE ON tenant_claims FROM tenant});
expired('tenant_claims', 'tenant-svc');
expired('late_claims',   'late-svc');
$coordinator->safe_psql('postgres',
	q{ALTER SYSTEM RESET dedup.sweep_role; SELECT pg_reload_conf();});
$log_offset = -s $coordinator->logfile;
is($coordinator->sweep('postgres'),
	'partial', 'a table the sweep may not delete from: partial');
is(rows_of('late_claims'),   '1', 'the tables registered after it are swept');
is(rows_of('tenant_claims'), '21', 'it is not');
like(
	query(q{SELECT last_error FROM dedup_sweeper}),
	qr/^colocated records table public.tenant_claims: permission denied for table tenant_claims$/,
	'dedup_sweeper says which and why');

# an operator who may not read it: dedup_sweep_colocated() sweeps the others
query(
	q{
CREATE ROLE sweep_operator;
GRANT EXECUTE ON FUNCTION dedup_sweep_colocated(regclass) TO sweep_operator;
GRANT SELECT, DELETE ON late_claims, loyalty_claims TO sweep_operator;
GRANT SELECT, DELETE ON hand_claims TO sweep_operator;
});
expired('late_claims', 'late-svc');
($ret, $out, $err) = $coordinator->psql_verbose('postgres',
	q{SET ROLE sweep_operator; SELECT dedup_sweep_colocated()});
is( $ret . $out,
	'020',
	'dedup_sweep_colocated() by an operator who cannot read one table sweeps the others'
);
like(
	$err,
	qr/WARNING:  42501: dedup could not sweep colocated records table "tenant_claims": permission denied for table tenant_claims/,
	'and names it');
$coordinator->psql_fails_like(
	'postgres',
	q{SET ROLE sweep_operator; SELECT dedup_sweep_colocated('tenant_claims')},
	qr/ERROR:  42501: permission denied for table tenant_claims/,
	'that table by name is refused');

query(q{GRANT DELETE ON tenant_claims TO tenant});

# a trigger on the shards that never ends: the sweep stops at
# dedup.sweep_max_duration, partial, and the next one can start
query(
	q{
CREATE OR REPLACE FUNCTION tenant_worker_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_sleep(3600);
	RETURN OLD;
END $$;
});

# a statement_timeout that the owner sets for itself, which the workers
# apply to Citus's connections as the owner: the worker's cancel fails that
# table alone (not the sweep), and the tables after it are swept
query(q{ALTER ROLE tenant SET statement_timeout = '200ms'});
expired('tenant_claims', 'tenant-svc');
expired('late_claims',   'late-svc');
is($coordinator->sweep('postgres'),
	'partial', "the owner's statement_timeout on the workers: partial");
is(rows_of('late_claims'), '1',
	'... the tables registered after it are swept');
like(
	query(q{SELECT last_error FROM dedup_sweeper}),
	qr/^colocated records table public\.tenant_claims: .*statement timeout/,
	'... and dedup_sweeper says which and why');
query(q{ALTER ROLE tenant RESET statement_timeout});

expired('tenant_claims', 'tenant-svc');
$coordinator->safe_psql('postgres',
	q{ALTER SYSTEM SET dedup.sweep_max_duration = 2; SELECT pg_reload_conf();}
);
is($coordinator->sweep('postgres'), 'partial',
	'a trigger that sleeps on a worker: the sweep stops at dedup.sweep_max_duration, partial'
);
$workers[0]->safe_psql('postgres',
	q{SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE wait_event = 'PgSleep'}
);
query(
	q{
CREATE OR REPLACE FUNCTION tenant_worker_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	RETURN OLD;
END $$;
});
$coordinator->safe_psql('postgres',
	q{ALTER SYSTEM RESET dedup.sweep_max_duration; SELECT pg_reload_conf();});
ok($coordinator->sweep_until('postgres', 'done'),
	'and the next sweep sweeps it');
is(rows_of('tenant_claims'), '1', '(all of it)');

# a worker down: every table fails, each reported, the sweep partial (not
# failed: no back-off), and the next one sweeps once it is back
$workers[1]->stop('immediate');
is($coordinator->sweep('postgres'),
	'partial', 'worker2 down: the sweep is partial');
like(
	query(q{SELECT last_error FROM dedup_sweeper}),
	qr/^colocated records table public\.\S+: connection to the remote node/,
	'dedup_sweeper names a table and the connection error');
($ret, $out, $err) =
  $coordinator->psql_verbose('postgres', q{SELECT dedup_sweep_colocated()});
is($ret . $out,
	'00', 'dedup_sweep_colocated() with worker2 down: 0, no error');
like(
	$err,
	qr/WARNING:  .*: dedup could not sweep colocated records table "loyalty_claims": connection to the remote node/,
	'a WARNING per table');
$workers[1]->start;
ok( $coordinator->sweep_until('postgres', 'done'),
	'worker2 back: the next sweep is done');

# a dropped table leaves the registry; a new table that is given its OID
# would otherwise be taken for it
my $oid = query(q{SELECT 'late_claims'::regclass::oid});
query(q{DROP TABLE late_claims});
is( query(
		qq{SELECT count(*) FROM dedup_colocated_tables WHERE records::oid = $oid}
	),
	'0',
	'DROP TABLE takes the registry row with it');
is(query(q{SELECT dedup_sweep_colocated()}),
	'0', 'and the sweep goes on without it');

done_testing();
