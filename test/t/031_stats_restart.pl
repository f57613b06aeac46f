#
# 031_stats_restart.pl: the claim counters across restarts, and the
# observability views without shared_preload_libraries.
#
#   - a clean restart keeps the counters (written to pg_stat/dedup.stat at
#     shutdown, read back at startup), times and failed claims included;
#   - a file in the format of another version of dedup is removed unread,
#     with a LOG line that says so; one of the previous format (version 3,
#     dedup 1.1) is read, so that the counters survive the upgrade (the
#     total of claims not counted that it holds is dropped);
#   - after an immediate shutdown (pg_ctl -m immediate), and after a crash
#     restart (a backend killed with SIGKILL), both followed by crash
#     recovery, they start from zero, as PostgreSQL's own statistics do:
#     counters that may have missed updates are not presented as complete;
#     the log says so then (pg_stat/dedup.live marks the counters as living
#     in shared memory until a clean shutdown saves them), and not after a
#     clean restart;
#   - a file left by an immediate shutdown (as older versions wrote one) is
#     removed unread;
#   - without preloading, dedup_stats still answers what the table holds and
#     says why there are no counters, and dedup_stats_reset() refuses with a
#     clear error.
#
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupNode;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = DedupNode->create(
	'stats',
	sweeps => 'off',
	conf   => { restart_after_crash => 'on' });

$node->safe_psql(
	'postgres', q{
CREATE EXTENSION dedup;
SELECT dedup_claim('orders', 'o-' || g) FROM generate_series(1, 4) g;
SELECT dedup_claim('orders', 'o-1');
SELECT dedup_claim('billing', 'b-1');
});

# a claim that waits for another session's claim of the same key until its
# lock_timeout: a lock wait, its time, a failed claim
my $holder = $node->background_psql('postgres');
$holder->query_safe(q{BEGIN; SELECT dedup_claim('waits', 'w-1')});
my ($ret, $out, $err) = $node->psql('postgres',
	q{SET lock_timeout = '10ms'; SELECT dedup_claim('waits', 'w-1')});
like(
	$err,
	qr/canceling statement due to lock timeout/,
	'a claim times out waiting');
$holder->query_safe('ROLLBACK');
$holder->quit;
my $times =
  q{SELECT string_agg(concat_ws(':', consumer, total_claim_time, max_claim_time,
                  total_lock_wait_time, lock_waits, serialization_failures, deadlocks,
                  lock_timeouts, cancels, other_errors), ',' ORDER BY consumer)
  FROM dedup_stats WHERE claims IS NOT NULL};
my $times_before = $node->safe_psql('postgres', $times);
like(
	$times_before,
	qr/waits:[0-9.e-]+:[0-9.e-]+:[0-9.e-]+:1:0:0:1:0:0/,
	'the lock timeout is counted, with its wait');

my $counters =
  q{SELECT string_agg(consumer || ':' || claims || '/' || duplicates, ',' ORDER BY consumer)
  FROM dedup_stats WHERE claims IS NOT NULL};
is( $node->safe_psql('postgres', $counters),
	'billing:1/0,orders:4/1,waits:1/0',
	'counters before the restart');
my $since = $node->safe_psql('postgres',
	q{SELECT counters_since FROM dedup_stats WHERE consumer = 'orders'});

# --- clean restart -----------------------------------------------------------------

my $lost_re =
  qr/LOG:  dedup claim counters start from zero after crash recovery/;
ok(-f $node->data_dir . '/pg_stat/dedup.live',
	'pg_stat/dedup.live marks the counters as living in shared memory');
$node->stop('fast');
ok(-f $node->data_dir . '/pg_stat/dedup.stat',
	'a clean shutdown writes the counters to pg_stat/dedup.stat');
ok(!-f $node->data_dir . '/pg_stat/dedup.live', '... and removes the marker');
my $offset = -s $node->logfile;
$node->start;
is($node->log_count($offset, $lost_re),
	0, 'a clean restart does not say that counters were lost');
ok(!-f $node->data_dir . '/pg_stat/dedup.stat',
	'the file is removed once read, so a later crash cannot bring it back');
is( $node->safe_psql('postgres', $counters),
	'billing:1/0,orders:4/1,waits:1/0',
	'a clean restart keeps the counters');
is($node->safe_psql('postgres', $times),
	$times_before, '... their times and failed claims');
is( $node->safe_psql(
		'postgres',
		q{SELECT counters_since FROM dedup_stats WHERE consumer = 'orders'}),
	$since,
	'... and when they started');
$node->safe_psql('postgres', q{SELECT dedup_claim('orders', 'o-1')});
is( $node->safe_psql('postgres', $counters),
	'billing:1/0,orders:4/2,waits:1/0',
	'counting goes on from the restored values');

# a file of an older format (version 2: what 1.1 before claim times wrote,
# with shorter entries) is not misread
$node->stop('fast');
my $file = $node->data_dir . '/pg_stat/dedup.stat';
my $v2   = pack('LLQq', 0x64656475, 2, 0, 1) . ("\1" x 400);
open(my $fh, '>:raw', $file) or die "could not write $file: $!";
print $fh $v2;
close($fh);
$offset = -s $node->logfile;
$node->start;
ok(!-f $file, 'a file of another format is removed at startup');
is($node->safe_psql('postgres', $counters), '', '... unread');
like(
	slurp_file($node->logfile, $offset),
	qr/LOG:  dedup claim counters start from zero: file "pg_stat\/dedup.stat" is in another format\n.*DETAIL:  Its format version is 2; this version of dedup reads versions 3 to 6\./,
	'... and the log says why');

# a file of version 3, as dedup 1.1 wrote it: where version 4 has the number
# of evicted entries, a total of claims not counted (5 here); entries
# without their last activity.  An entry: the key (database OID, the
# consumer name NUL-padded to 257 bytes, 3 bytes of padding), then 8
# counters, 3 times in ms and 3 timestamps (microseconds since 2000-01-01).
my $dboid = $node->safe_psql('postgres',
	q{SELECT oid FROM pg_database WHERE datname = 'postgres'});
my $day = 86400 * 1000000;
my $v3 =
	pack('LLQq', 0x64656475, 3, 5, 1)
  . pack('La257x3', $dboid, 'upgraded')
  . pack('q8d3q3',
	7, 3, 1, 0, 1, 0, 0, 0, 12.5, 4.5, 2.0, 2 * $day, 3 * $day, $day);
$node->stop('fast');
open($fh, '>:raw', $file) or die "could not write $file: $!";
print $fh $v3;
close($fh);
$node->start;
ok(!-f $file, 'a file of version 3 is removed at startup');
my $upgraded = q{SET TimeZone = 'UTC';
  SELECT concat_ws('|', claims, duplicates, lock_waits, deadlocks, total_claim_time,
                   max_claim_time, total_lock_wait_time, last_claim_at, last_duplicate_at,
                   counters_since)
  FROM dedup_stats WHERE consumer = 'upgraded'};
is( $node->safe_psql('postgres', $upgraded),
	'7|3|1|1|12.5|4.5|2|2000-01-03 00:00:00+00|2000-01-04 00:00:00+00|2000-01-02 00:00:00+00',
	'... after it is read: its counters survive the upgrade');
is($node->safe_psql('postgres', q{SELECT dedup_counters_status()}),
	'on', '... and its total of claims not counted is dropped');

# (rolled back: the records the tests below count stay as they are)
$node->safe_psql('postgres',
	q{BEGIN; SELECT dedup_claim('upgraded', 'u-1'); ROLLBACK});
is( $node->safe_psql(
		'postgres',
		q{SELECT claims FROM dedup_stats WHERE consumer = 'upgraded'}),
	'8',
	'... and counting goes on from them');

# --- immediate shutdown ------------------------------------------------------

$node->stop('immediate');
ok( !-f $node->data_dir . '/pg_stat/dedup.stat',
	'an immediate shutdown writes no counters');
$offset = -s $node->logfile;
$node->start;
is($node->safe_psql('postgres', $counters),
	'', 'after an immediate shutdown the counters start from zero');
is($node->log_count($offset, $lost_re), 1, '... and the log says so, once');
$node->safe_psql('postgres', q{SELECT dedup_claim('orders', 'o-1')});
is($node->safe_psql('postgres', $counters),
	'orders:0/1', 'and counting starts again');

# a file that an immediate shutdown left (older versions wrote it then)
$node->stop('fast');
my $saved = slurp_file($node->data_dir . '/pg_stat/dedup.stat');
$node->start;
$node->stop('immediate');
append_to_file($node->data_dir . '/pg_stat/dedup.stat', $saved);
$offset = -s $node->logfile;
$node->start;
ok(!-f $node->data_dir . '/pg_stat/dedup.stat', 'is removed at startup');
is($node->safe_psql('postgres', $counters), '', '... unread');
is($node->log_count($offset, $lost_re),     1,  '... and the log says why');

# --- crash restart ------------------------------------------------------------

$node->safe_psql('postgres', q{SELECT dedup_claim('billing', 'b-1')});
is($node->safe_psql('postgres', $counters),
	'billing:0/1', 'counters before the crash');

# a backend dies by SIGKILL: the postmaster kills every other process and
# reinitializes shared memory, as after any crash
my $launcher = $node->launcher_pid;
like($launcher, qr/^\d+$/, 'the launcher runs');
my $victim = $node->background_psql('postgres');
my $pid    = $victim->query_safe('SELECT pg_backend_pid()');
$offset = -s $node->logfile;
kill 'KILL', $pid;

# the launcher too is killed and started again
$node->wait_launcher($launcher)
  or die 'the server did not come back after the crash';
like(
	slurp_file($node->logfile, $offset),
	qr/all server processes terminated; reinitializing/,
	'the server went through crash recovery');
ok( $node->wait_log_count($offset, $lost_re, 1),
	'the log says that the counters start from zero');
eval { $victim->quit };
is($node->safe_psql('postgres', $counters),
	'', 'after a crash restart the counters start from zero');
is( $node->safe_psql('postgres', q{SELECT count(*) FROM processed_messages}),
	'5',
	'the claims themselves survive the crash');
$node->safe_psql('postgres', q{SELECT dedup_claim('orders', 'o-1')});
is($node->safe_psql('postgres', $counters),
	'orders:0/1', 'and counting starts again');

# --- and a clean restart keeps them again -----------------------------------------

$offset = -s $node->logfile;
$node->restart;
is($node->safe_psql('postgres', $counters),
	'orders:0/1',
	'after crash recovery, the next clean restart keeps the counters');
is($node->log_count($offset, $lost_re), 0, '... and says nothing of a loss');

# --- not preloaded ---------------------------------------------------------------

$node->stop('fast');
$node->append_conf('postgresql.conf', qq{shared_preload_libraries = ''});
$node->start;
$node->safe_psql('postgres', q{SELECT dedup_claim('orders', 'o-new')});
is( $node->safe_psql(
		'postgres',
		q{SELECT consumer, claims IS NULL, counters FROM dedup_stats ORDER BY 1}
	),
	"billing|t|unavailable: dedup is not in shared_preload_libraries\n"
	  . "orders|t|unavailable: dedup is not in shared_preload_libraries",
	'without preloading, the view lists the consumers and says why there are no counters'
);
is( $node->safe_psql(
		'postgres', q{SELECT consumers, sweeper_running FROM dedup_storage}),
	'2|f',
	'dedup_storage answers from the table, and shows no sweeper');
($ret, $out, $err) =
  $node->psql_verbose('postgres', 'SELECT dedup_stats_reset()');
like(
	$err,
	qr/ERROR:  55000: dedup claim counters are not available/,
	'dedup_stats_reset() refuses clearly without preloading');

$node->stop;
done_testing();
