#
# 028_sweeper_vacuum.pl: the sweeper vacuums what it swept.
#
# One node with autovacuum off (so that every VACUUM of processed_messages
# is the sweeper's), sweeps on request and the sweeper's DEBUG1 lines in the
# log.  Old claims are back-dated rows inserted straight into
# processed_messages (as superuser).  What is checked:
#
#  1. a sweep that deletes most of the table vacuums it: vacuum_count in
#     pg_stat_user_tables goes up by one, n_dead_tup drops to 0, and the log
#     says so;
#  2. with dedup.sweep_vacuum_threshold = 0 a sweep deletes as before but
#     does not vacuum: the dead rows stay;
#  3. while another session holds SHARE UPDATE EXCLUSIVE on the table (as
#     a VACUUM does), a sweep completes, deletes, and neither waits nor
#     vacuums; once the lock is gone, the next sweep vacuums;
#  4. a sweep that leaves few dead rows (below the threshold) does not
#     vacuum;
#  5. the VACUUM goes at autovacuum's pace (autovacuum_vacuum_cost_delay
#     and autovacuum_vacuum_cost_limit), and pg_stat_activity shows it;
#     (5b) so does the dedup_sweeper view: last_sweep_outcome 'vacuuming',
#     with the sweep's deletes counted, then 'done';
#  6. a DROP DATABASE (without FORCE) issued while the sweeper vacuums
#     succeeds: the launcher cancels the VACUUM (which would otherwise run
#     for longer than the 5 s DROP DATABASE waits for sessions to leave),
#     and the sweep ends partial, with nothing logged as an error.
#  7. after the retention worker's outbox step deletes sent messages,
#     dedup_outbox is vacuumed the same way (issue 32: its steady-state
#     storage).
#
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupNode;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = DedupNode->create(
	'vacuum',
	sweeps => 'on request',
	conf   => { autovacuum => 'off', log_min_messages => 'debug1' });
$node->safe_psql('postgres', 'CREATE DATABASE db1');
$node->safe_psql('db1',      'CREATE EXTENSION dedup');

my $L = DedupNode::LATEST_CLAIM;

# vacuum_count and n_dead_tup of processed_messages, as "count|dead"
my $vacuum_stats_sql = q{
SELECT vacuum_count || '|' || n_dead_tup FROM pg_stat_user_tables
 WHERE relid = 'processed_messages'::regclass};
sub vacuum_stats { return $node->safe_psql('db1', $vacuum_stats_sql); }

# 1000 claims in the window of consumer 'keep'; 2000 expired ones of $consumer
# (and its latest claim): expired_sql, add_expired
$node->safe_psql(
	'db1', qq{
INSERT INTO processed_messages
SELECT 'keep', 'k' || i, $L FROM generate_series(1, 1000) i});

sub expired_sql
{
	my ($consumer) = @_;
	return qq{
INSERT INTO processed_messages
SELECT '$consumer', 'm' || i, $L - interval '2 hours' - i * interval '1 second'
  FROM generate_series(1, 2000) i
UNION ALL VALUES ('$consumer', 'latest', $L)};
}

sub add_expired
{
	my ($consumer) = @_;
	$node->safe_psql('db1', expired_sql($consumer));
	return;
}

###############################################################################
note('1. a sweep that deletes most rows vacuums');

ok($node->sweep_until('db1', 'done'),
	'db1: a first sweep completed (settle)');
add_expired('a');
my ($count0) = split /\|/, vacuum_stats();
my $offset   = -s $node->logfile;
is($node->sweep('db1'), 'done',
	'db1: the sweep of 2000 expired rows is done');
is($node->count_of('db1', 'a'), '1', 'the 2000 expired rows are deleted');
is( vacuum_stats(),
	($count0 + 1) . '|0',
	'the sweep vacuumed processed_messages: vacuum_count + 1, no dead rows left'
);
ok( $node->log_count($offset,
		qr/dedup sweep: vacuuming processed_messages: 2\d\d\d dead rows, 10\d\d live/
	) == 1,
	'the log says why (DEBUG1): the dead and live rows');

###############################################################################
note('2. dedup.sweep_vacuum_threshold = 0: no VACUUM');

$node->set_config('dedup.sweep_vacuum_threshold', '0', '0');
ok($node->sweep_until('db1', 'done'),
	'db1: a sweep completed (settle: new setting)');
add_expired('b');
($count0) = split /\|/, vacuum_stats();
is($node->sweep('db1'),         'done', 'db1: the sweep is done');
is($node->count_of('db1', 'b'), '1',    'the 2000 expired rows are deleted');

# without a VACUUM to come, the sweeper reports its deletes to the
# statistics only as it exits, maybe after the view says "done"
ok($node->poll_query_until('db1', $vacuum_stats_sql, "$count0|2000"),
	'no VACUUM: the 2000 dead rows stay');

###############################################################################
note('3. a lock held by another session: no wait, no VACUUM');

$node->set_config('dedup.sweep_vacuum_threshold', undef, '0.2');
ok( $node->sweep_until('db1', 'done'),
	'db1: a sweep completed (settle: default setting; it vacuums the rows of section 2)'
);
($count0) = split /\|/, vacuum_stats();
my $holder = $node->background_psql('db1');
$holder->query_safe(
	q{
BEGIN;
LOCK TABLE processed_messages IN SHARE UPDATE EXCLUSIVE MODE});
add_expired('c');
$offset = -s $node->logfile;
is($node->sweep('db1'), 'done',
	'db1: the sweep is done while the lock is held');
is($node->count_of('db1', 'c'), '1', 'the 2000 expired rows are deleted');
is(vacuum_stats(), "$count0|2000",   'no VACUUM: the 2000 dead rows stay');
ok( $node->log_count($offset,
		qr/dedup sweep: not vacuuming processed_messages \(2\d\d\d dead rows, 10\d\d live\): another session holds its lock/
	) == 1,
	'the log says why (DEBUG1)');
is( $node->safe_psql(
		'db1', q{
SELECT count(*) FROM pg_locks WHERE NOT granted}),
	'0',
	'nobody waits for a lock');
$holder->query_safe('COMMIT');
$holder->quit;
is($node->sweep('db1'), 'done',          'db1: the next sweep is done');
is(vacuum_stats(), ($count0 + 1) . '|0', 'with the lock gone, it vacuumed');

###############################################################################
note('4. few dead rows: no VACUUM');

($count0) = split /\|/, vacuum_stats();
$node->safe_psql(
	'db1', qq{
INSERT INTO processed_messages
SELECT 'd', 'm' || i, $L - interval '2 hours' - i * interval '1 second'
  FROM generate_series(1, 100) i
UNION ALL VALUES ('d', 'latest', $L)});
is($node->sweep('db1'), 'done', 'db1: the sweep of 100 expired rows is done');
is($node->count_of('db1', 'd'), '1', 'the 100 expired rows are deleted');
is(vacuum_stats(), "$count0|100",
	'no VACUUM: 100 dead rows are below 50 + 0.2 x 1000 live');

###############################################################################
note("5. autovacuum's pace, in pg_stat_activity");

# one page per 10 ms: a VACUUM of a few seconds, watched from inside the
# server
$node->set_config('autovacuum_vacuum_cost_limit', '1',    '1');
$node->set_config('autovacuum_vacuum_cost_delay', '10ms', '10ms');
($count0) = split /\|/, vacuum_stats();
my ($since, $seen) = $node->watch_sweep(
	'db1', q{
SELECT wait_event FROM pg_stat_activity
 WHERE backend_type = 'dedup sweeper' AND datname = 'db1'
   AND query = 'dedup sweep: vacuuming processed_messages'
   AND wait_event = 'VacuumDelay'}, expired_sql('e'));
is($seen, 'VacuumDelay',
	'pg_stat_activity shows the sweeper vacuuming, in its cost delay');
is($node->wait_sweep_after('db1', $since), 'done', 'db1: that sweep is done');

# (not all of the dead rows: the watching transaction held them back)
is((split /\|/, vacuum_stats())[0], $count0 + 1, 'it vacuumed');

###############################################################################
note('5b. the dedup_sweeper view while the sweeper vacuums');

# the same slow VACUUM, watched through the view alone (one source, so that
# the VACUUM cannot end between two readings)
($since, $seen) = $node->watch_sweep(
	'db1', q{
SELECT last_sweep_outcome || '|' || last_sweep_rows FROM dedup_sweeper
 WHERE last_sweep_outcome = 'vacuuming' AND sweeper_pid IS NOT NULL},
	expired_sql('e2'));
is($seen, 'vacuuming|2000',
	'dedup_sweeper: "vacuuming" while the sweeper vacuums, its deletes counted'
);
is($node->wait_sweep_after('db1', $since),
	'done', 'dedup_sweeper: then "done"');

###############################################################################
note('6. DROP DATABASE while the sweeper vacuums');

# one page per 100 ms: a VACUUM of about 10000 rows' heap and index pages
# takes longer than DROP DATABASE waits (5 s)
$node->set_config('autovacuum_vacuum_cost_delay', '100ms', '100ms');
$node->safe_psql('postgres', 'CREATE DATABASE dropme');
$node->safe_psql('dropme',   'CREATE EXTENSION dedup');
$node->poll_query_until('dropme',
	q{SELECT sweeper_pid IS NULL AND last_sweep_end IS NOT NULL FROM dedup_sweeper}
) or die 'the first sweep of dropme did not end';
$node->add_expired('dropme', 'v', 10000);
{
	my $offset   = -s $node->logfile;
	my $launcher = $node->launcher_pid;
	$node->safe_psql('dropme', 'SELECT dedup_sweeper_wake()');
	ok( $node->poll_query_until(
			'postgres', q{
SELECT count(*) = 1 FROM pg_stat_activity
 WHERE backend_type = 'dedup sweeper' AND datname = 'dropme'
   AND query = 'dedup sweep: vacuuming processed_messages'}),
		'dropme: the sweeper is vacuuming');
	my $t0 = time;
	my ($ret, $out, $err) = $node->psql_verbose(
		'postgres', q{
DROP DATABASE dropme;
SELECT count(*) FROM pg_database WHERE datname = 'dropme';
SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'dedup sweeper';
});
	my $elapsed = time - $t0;
	is($ret, 0, 'DROP DATABASE while the sweeper vacuums succeeds')
	  or diag $err;
	is($out, "0\n0", 'DROP DATABASE: the database and its sweeper are gone');
	note sprintf('DROP DATABASE took %.2f s', $elapsed);
	is($node->launcher_pid, $launcher,
		'DROP DATABASE: the launcher lives on');
	ok( $node->log_entries(
			$offset,
			qr/dedup sweep: stopped: canceling statement due to user request/
		),
		'the sweeper says its VACUUM was cancelled');
	my @lines = (
		$node->log_problems($offset),
		$node->log_entries(
			$offset, qr/terminated by signal|exited with exit code [1-9]/));
	is(scalar @lines, 0, 'DROP DATABASE: no error logged')
	  or diag join("\n", @lines);
}
$node->set_config('autovacuum_vacuum_cost_limit', undef, '-1');
$node->set_config('autovacuum_vacuum_cost_delay', undef, '2ms');

###############################################################################
note(
	'7. dedup_outbox: vacuumed after the retention step deletes its sent messages'
);

# 2000 messages sent two hours ago (past dedup.outbox_retention, 1 h) and 100
# unsent ones, written straight into the table as superuser
$node->safe_psql(
	'db1', q{
SELECT dedup_add_destination('q');
INSERT INTO dedup_outbox (message_id, destination, payload, sent_at)
SELECT 's' || i, 'q', 'x', now() - interval '2 hours' FROM generate_series(1, 2000) i
UNION ALL
SELECT 'u' || i, 'q', 'x', NULL FROM generate_series(1, 100) i});
ok($node->sweep_until('db1', 'done'), 'db1: a sweep completed (settle)');
my $outbox_stats_sql = q{
SELECT vacuum_count || '|' || n_dead_tup || '|' || n_live_tup FROM pg_stat_user_tables
 WHERE relid = 'dedup_outbox'::regclass};
is( $node->safe_psql('db1', q{SELECT count(*) FROM dedup_outbox}),
	'100',
	'the retention step deleted the 2000 sent messages, not the unsent ones');
ok( $node->poll_query_until('db1', $outbox_stats_sql, '1|0|100'),
	'and the sweeper vacuumed dedup_outbox: vacuum_count 1, no dead rows left'
);
ok( $node->log_count(0,
		qr/dedup sweep: vacuuming dedup_outbox: 2\d\d\d dead rows, \d+ live/)
	  == 1,
	'the log says so (DEBUG1): once, with the dead and live rows');

my @problems = $node->log_problems(0);
is(join("\n", @problems), '', 'no warning or error in the log');

done_testing();
