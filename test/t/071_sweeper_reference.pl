#
# 071_sweeper_reference.pl: parts of the sweeper's reference that the other
# tests reach only indirectly, if at all; one check each.
#
# One node with dedup preloaded, sweeps on request only, databases db1 (with
# dedup) and noext (without).
#
#   1. dedup_default_retention() is dedup.retention as an interval of exact
#      time (7d: 168:00:00), NULL for -1 (forever).
#   2. dedup_sweeper_status(), called as a pg_monitor member rather than
#      through the dedup_sweeper view: after two sweeps that deleted 2 and 3
#      rows, the state, the outcome, the last sweep's rows and the total.
#   3. While claims run (pgbench), a sweep's pauses that yield to them are
#      in pg_stat_activity as the wait DedupSweepYield (PostgreSQL 17 and
#      later; the generic "Extension" on 15, where dedup.sweep_batch_delay
#      = 0 leaves the sweeper no other wait of that type).  Claims
#      certainly run during the batches of the sweep's outbox step (each
#      is held until one has: DedupNode's hold_outbox_batches), which goes
#      on until the watcher has returned.
#   4. A database listed in dedup.databases without the extension: the
#      WARNING naming it, logged once per change of the setting, also for a
#      database that was found without dedup before it was listed (a
#      reload, not a probe); a listed name that matches no database gets a
#      WARNING of its own.
#   5. No free background worker slot (max_worker_processes = 1, taken by
#      the launcher; no logical replication launcher): the WARNING, once
#      however often the launcher tries again.
#
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupNode;
use DedupProcess qw(wait_until);
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = DedupNode->create(
	'reference',
	sweeps => 'on request',
	conf   => { max_connections => 30 });
$node->safe_psql('postgres', 'CREATE DATABASE db1');
$node->safe_psql('db1',      'CREATE EXTENSION dedup');
$node->safe_psql('postgres', 'CREATE ROLE watcher LOGIN IN ROLE pg_monitor');
ok($node->sweep_until('db1', 'done'), 'db1: a sweep of nothing ends done');

# the latest claim of the consumers below; a fixed date keeps it exact
my $L = DedupNode::LATEST_CLAIM;

###############################################################################
note('1. dedup_default_retention()');

$node->set_config('dedup.retention', '7d', '7d');
is( $node->safe_psql(
		'db1',
		'SELECT dedup_default_retention()',
		extra_params => [ '-U', 'watcher' ]),
	'168:00:00',
	'dedup.retention = 7d: dedup_default_retention() is 168 hours (exact time, not 7 days)'
);
$node->set_config('dedup.retention', '-1', '-1');
is($node->safe_psql('db1', 'SELECT dedup_default_retention() IS NULL'),
	't', 'dedup.retention = -1: dedup_default_retention() is NULL (forever)');
$node->set_config('dedup.retention', undef, '1h');

###############################################################################
note('2. dedup_sweeper_status()');

$node->add_expired('db1', 'first', 4);
is($node->sweep('db1'), 'done', 'a sweep of 2 expired claims');
$node->add_expired('db1', 'second', 5);
is($node->sweep('db1'), 'done', 'a sweep of 3 expired claims');
is( $node->safe_psql(
		'db1', q{
SELECT sweeper_running, sweep_enabled, database_state, sweeper_pid IS NULL,
       last_sweep_outcome, last_sweep_rows, total_rows_deleted,
       last_error IS NULL AND last_error_at IS NULL,
       last_sweep_end >= last_sweep_start, next_sweep > last_sweep_start
  FROM dedup_sweeper_status()},
		extra_params => [ '-U', 'watcher' ]),
	't|t|active|t|done|3|5|t|t|t',
	'dedup_sweeper_status() for a pg_monitor member: launcher running, db1 active, no sweep running, the last one done with 3 rows, 5 in all, no error, the next one scheduled'
);

###############################################################################
note('3. the wait DedupSweepYield');

my $tmpdir = PostgreSQL::Test::Utils::tempdir;
my $script = "$tmpdir/claim.sql";
append_to_file(
	$script, q{\set k random(1, 1000000000)
SELECT dedup_claim('yield-claims', 'k' || :k);
});
my ($out, $err) = ('', '');
my $pgbench = IPC::Run::start(
	[
		'pgbench', '-n', '-h', $node->host, '-p', $node->port,
		'-c', 2, '-j', 2, '-T', 300, '-f', $script, 'db1'
	],
	'>',
	\$out,
	'2>',
	\$err);
ok(wait_until(sub { $node->count_of('db1', 'yield-claims') > 10 }),
	'claims are running (pgbench)');
$node->set_config('dedup.sweep_batch_size', '500', '500');

# a pause long enough to be seen by a watcher that a loaded machine wakes
# late (about 49 times the batch before it)
$node->set_config('dedup.sweep_busy_share', '2', '2');

# Each batch of the outbox step is held until a claim has run during it,
# and so followed by a pause that yields; each puts back what it deletes
# until the watcher (from inside the server) has returned, so the sweep
# goes on until then (or until dedup.sweep_max_duration, if no pause is
# ever seen).  Before them, 20 batches of expired claims.
$node->safe_psql('db1',
	'CREATE TABLE watching (); INSERT INTO watching DEFAULT VALUES');
$node->hold_outbox_batches('db1', 'yield-claims',
	'EXISTS (SELECT FROM public.watching)');
my ($since, $yield_seen) = $node->watch_sweeper_wait(
	'db1', 'DedupSweepYield', qq{
INSERT INTO processed_messages
SELECT 'yield', 'm' || i, $L - interval '2 hours' - i * interval '1 second'
  FROM generate_series(1, 10000) i
UNION ALL VALUES ('yield', 'latest', $L);
INSERT INTO dedup_outbox (message_id, destination, payload, sent_at)
SELECT 'yield ' || i, 'yield', '', now() - interval '1 day'
  FROM generate_series(1, 500) i});
$node->safe_psql('db1', 'DELETE FROM watching');
is($yield_seen, 't',
	"while claims run, the sweeper's pause yielding to them is the wait DedupSweepYield in pg_stat_activity ('Extension' on 15)"
);
is($node->wait_sweep_after('db1', $since),
	'done', 'the yielding sweep ends done');
$node->release_outbox_batches('db1');
$node->safe_psql('db1', 'DROP TABLE watching');
$pgbench->kill_kill;
unlike($err, qr/error|abort/i, 'pgbench: no claim failed') or diag($err);
is($node->count_of('db1', 'yield'),
	'1', 'the yielding sweep deletes the 10000 expired claims all the same');
is($node->safe_psql('db1', 'SELECT count(*) FROM dedup_outbox'),
	'0', '... and the sent messages');
$node->set_config('dedup.sweep_batch_size', undef, '1000');
$node->set_config('dedup.sweep_busy_share', undef, '10');

###############################################################################
note('4. a database in dedup.databases without the extension');

my $not_installed =
  qr/WARNING:  database "noext" is listed in dedup.databases, but extension "dedup" is not installed there/;
my $no_such =
  qr/WARNING:  database "nosuchdb" is listed in dedup.databases, but does not exist/;

# found without dedup while every database is swept: nothing to say
$node->safe_psql('postgres', 'CREATE DATABASE noext');
my $offset = -s $node->logfile;
ok(defined $node->sweep('db1') && defined $node->sweep('db1'),
	'two passes of the launcher: noext probed');
is($node->log_count($offset, qr/noext/),
	0, '... quietly, as it is not listed');

# then listed: a reload, which probes nothing again
$node->set_config(
	'dedup.databases',
	'db1, noext, nosuchdb',
	'db1, noext, nosuchdb');
ok( $node->wait_log_count($offset, $not_installed, 1),
	'listing noext in dedup.databases logs a WARNING naming it');
ok($node->wait_log_count($offset, $no_such, 1),
	'... and a listed name that matches no database gets one too');
ok(defined $node->sweep('db1') && defined $node->sweep('db1'),
	'two more passes of the launcher');
is( $node->log_count($offset, $not_installed) . '|'
	  . $node->log_count($offset, $no_such),
	'1|1',
	'... which say nothing more: once per change');

# another change names them again
$node->set_config(
	'dedup.databases',
	'noext, nosuchdb, db1',
	'noext, nosuchdb, db1');
ok( $node->wait_log_count($offset, $not_installed, 2)
	  && $node->wait_log_count($offset, $no_such, 2),
	'a change of dedup.databases names both again');
$node->set_config('dedup.databases', undef, '');

###############################################################################
note('5. no free background worker slot');

# the launcher takes the only slot: no sweeper can start
$node->append_conf('postgresql.conf',
	"max_worker_processes = 1\nmax_logical_replication_workers = 0\n");
$offset = -s $node->logfile;
$node->restart;
my $no_slot =
  qr/WARNING:  dedup sweeper could not start: no free background worker slot/;
ok( $node->wait_log_count($offset, $no_slot, 1),
	'max_worker_processes = 1: the launcher cannot start a sweeper and says so in a WARNING'
);
like(
	$node->log_since($offset),
	qr/HINT:  Raise max_worker_processes/,
	'... with the setting to raise');

# each wake-up makes the launcher try again, and reschedule after it failed
for my $i (1 .. 3)
{
	my $since = $node->safe_psql('db1', 'SELECT clock_timestamp()');
	$node->safe_psql('db1', 'SELECT dedup_sweeper_wake()');
	ok( $node->poll_query_until(
			'db1',
			"SELECT next_sweep >= '$since'::timestamptz + interval '1 hour' FROM dedup_sweeper"
		),
		"wake-up $i: the launcher tried again");
}
is($node->log_count($offset, $no_slot),
	1, '... and the WARNING was logged once');

$node->stop;
done_testing();
