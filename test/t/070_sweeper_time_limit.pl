#
# 070_sweeper_time_limit.pl: dedup.sweep_max_duration, the time limit of one
# sweep.
#
# One node, sweeps on request only, with dedup.sweep_max_duration = 1s,
# dedup.sweep_batch_delay = 1s (its largest value) and batches of 100 rows;
# no VACUUM by the sweeper (dedup.sweep_vacuum_threshold = 0), no claims
# (nothing to yield to).  A backlog of 150 expired claims and 2 in the
# window: a sweep deletes its first batch, pauses the batch delay, which
# alone takes the whole time limit, and stops there, 'partial', with the 100
# oldest claims deleted and nothing else; the next sweep deletes the 50
# left in one batch, which needs no pause, and ends 'done'; the 2 claims in
# the window stay throughout.  Without the time limit the first sweep would
# delete all 150 and end 'done'.
#
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupNode;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = DedupNode->create(
	'time_limit',
	sweeps => 'on request',
	conf   => {
		'dedup.sweep_max_duration'     => '1s',
		'dedup.sweep_batch_delay'      => '1s',
		'dedup.sweep_batch_size'       => 100,
		'dedup.sweep_vacuum_threshold' => 0,

		# each batch in the log, with its time (if something fails)
		log_min_messages => 'debug1',
	});
$node->safe_psql('postgres', 'CREATE DATABASE db1');
$node->safe_psql('db1',      'CREATE EXTENSION dedup');
ok($node->sweep_until('db1', 'done'), 'db1: a sweep of nothing ends done');

# the latest claim; a fixed date keeps the window exact
my $L = DedupNode::LATEST_CLAIM;

# m1 is the newest expired claim, m150 the oldest
$node->safe_psql(
	'db1', qq{
INSERT INTO processed_messages
SELECT 'backlog', 'm' || i, $L - interval '2 hours' - i * interval '1 second'
  FROM generate_series(1, 150) i
UNION ALL VALUES ('backlog', 'latest', $L), ('backlog', 'recent', $L - interval '30 minutes')}
);

is($node->sweep('db1'), 'partial',
	'a sweep of 150 expired claims stops at the time limit: partial');
is( $node->safe_psql(
		'db1', q{
SELECT last_sweep_rows, last_error IS NULL,
       last_sweep_end - last_sweep_start >= interval '1 s'
  FROM dedup_sweeper}),
	'100|t|t',
	'... after its first batch of 100 and the pause after it, which took the whole limit, with no error'
);
is( $node->safe_psql(
		'db1', q{
SELECT count(*), min(substr(message_id, 2)::int), max(substr(message_id, 2)::int)
  FROM processed_messages
 WHERE consumer_name = 'backlog' AND message_id LIKE 'm%'}),
	'50|1|50',
	'... deleting the 100 oldest expired claims and keeping the 50 newer ones for later'
);
is( $node->count_of('db1', 'backlog', q{message_id IN ('latest', 'recent')}),
	'2',
	'... and the 2 in the window');

is($node->sweep('db1'), 'done',
	'the next sweep deletes the rest within the limit: done');
is( $node->safe_psql(
		'db1',
		'SELECT last_sweep_rows, total_rows_deleted FROM dedup_sweeper'),
	'50|150',
	'... 50 rows, 150 in all');
is($node->consumer_counts('db1'),
	'backlog=2', 'only the 2 claims in the window are left');

$node->stop;
done_testing();
