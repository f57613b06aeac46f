#
# 020_sweeper_retention.pl: the retention sweeper deletes exactly the claims
# out of their consumer's window.
#
# One node with shared_preload_libraries = 'dedup' and a sweep every second.
# Old claims are simulated by inserting back-dated rows straight into
# processed_messages (as superuser); sweeps are triggered with
# dedup_sweeper_wake() or left to the schedule, and waited for by polling the
# dedup_sweeper view (a sweep counts once it started after the data was
# committed and has finished).  What is checked:
#
#  1. expiry: with dedup.retention = 1h exactly the rows older than
#     (latest claim - 1h) are deleted, the boundary row stays; the view counts
#     the deleted rows and says done / active, and never 'failed' while
#     every sweep succeeds;
#  2. per-consumer windows: dedup_set_retention (shorter and longer than the
#     default), dedup_keep_forever (centuries-old rows stay),
#     dedup_reset_retention (back to the default); dedup.retention = -1 keeps
#     everything of consumers without their own window;
#  3. the outage rule: the window counts back from the consumer's latest
#     claim, not from the wall clock: an idle consumer (latest claim 30 days
#     ago) keeps its last hour, and after a restart that follows a long
#     silence nothing within the window disappears;
#  4. reload: dedup.retention and dedup.sweep_enabled changed with ALTER
#     SYSTEM + pg_reload_conf() apply to the next sweep; with sweeping off no
#     sweep starts at all, even on a wake-up.
#
# 024 covers how a sweep deletes (batches, pauses, locked rows, beside
# claims), 025 which databases are swept and as which role.
#
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupNode;
use DedupProcess qw(wait_until);
use PostgreSQL::Test::Utils;
use Test::More;

my $node = DedupNode->create('sweeper', sweeps => 'every second');
$node->safe_psql('postgres', 'CREATE DATABASE db1');
$node->safe_psql('db1',      'CREATE EXTENSION dedup');

# the latest claim of most consumers below; a fixed date keeps it exact
my $L = DedupNode::LATEST_CLAIM;

is($node->safe_psql('db1', 'SELECT sweeper_running FROM dedup_sweeper'),
	't', 'the launcher runs');

###############################################################################
note('1. expiry with dedup.retention = 1h');

# 181 rows a minute apart, the latest at $L, and two rows a microsecond on
# either side of $L - 1h.  Expired: minutes 61..180 and edge-out = 121 rows.
# (counted before the commit: a scheduled sweep may come right after it)
is( $node->safe_psql(
		'db1', qq{
BEGIN;
INSERT INTO processed_messages
SELECT 'a', 'm' || i, $L - i * interval '1 minute' FROM generate_series(0, 180) i;
INSERT INTO processed_messages VALUES
	('a', 'edge-in',  $L - interval '1 hour' + interval '1 microsecond'),
	('a', 'edge-out', $L - interval '1 hour' - interval '1 microsecond');
SELECT count(*) FROM processed_messages WHERE consumer_name = 'a';
COMMIT;
}),
	'183',
	'consumer a: 183 claims over 3 hours');
ok( $node->sweep_until('db1', 'done'),
	'db1: a sweep completed (expiry with 1h)');

is($node->count_of('db1', 'a'),
	'62', 'consumer a: 62 claims remain (121 deleted)');
is( $node->safe_psql(
		'db1', qq{
SELECT count(*) FROM generate_series(0, 60) i
 WHERE NOT EXISTS (SELECT FROM processed_messages
					WHERE consumer_name = 'a' AND message_id = 'm' || i)}),
	'0',
	'every claim within the hour before the latest one is still there');
is( $node->safe_psql(
		'db1', qq{
SELECT count(*) FROM processed_messages
 WHERE consumer_name = 'a' AND processed_at < $L - interval '1 hour'}),
	'0',
	'no claim older than latest - 1h is left');
is( $node->safe_psql(
		'db1', q{
SELECT string_agg(message_id, ',' ORDER BY message_id) FROM processed_messages
 WHERE consumer_name = 'a' AND message_id IN ('m60', 'm61', 'edge-in', 'edge-out')}
	),
	'edge-in,m60',
	'boundary: a claim exactly 1h before the latest stays, 1 microsecond older goes'
);
ok( $node->poll_query_until(
		'db1', q{
SELECT database, default_retention, sweeper_running, sweep_enabled,
	   database_state, last_sweep_outcome, total_rows_deleted,
	   last_error IS NULL, next_sweep > last_sweep_start
  FROM dedup_sweeper},
		'db1|01:00:00|t|t|active|done|121|t|t'),
	'view: active, done, 121 rows deleted in all, no error, next sweep scheduled'
);

# A healthy database must never look failed, not even while a sweep starts.
# Sample the view as fast as one backend can, for 3 s and until a sweep was
# seen running (a sweep every second, each 'running' while it lasts).
my $timeout = $PostgreSQL::Test::Utils::timeout_default;
my $samples = $node->safe_psql(
	'db1', qq{
CREATE FUNCTION pg_temp.sample() RETURNS text LANGUAGE plpgsql AS \$\$
DECLARE
	n int := 0;
	failed int := 0;
	running int := 0;
	outcome text;
	enough timestamptz := clock_timestamp() + interval '3 s';
	deadline timestamptz := clock_timestamp() + interval '$timeout s';
BEGIN
	WHILE (clock_timestamp() < enough OR running = 0)
		  AND clock_timestamp() < deadline LOOP
		SELECT last_sweep_outcome INTO outcome FROM dedup_sweeper;
		IF outcome = 'failed' THEN failed := failed + 1; END IF;
		IF outcome = 'running' THEN running := running + 1; END IF;
		n := n + 1;
	END LOOP;
	RETURN failed || '|' || running || '|' || n;
END \$\$;
SELECT pg_temp.sample();});
my ($failed_samples, $running_samples, $all_samples) = split /\|/, $samples;
note(
	"$all_samples samples of the view: $failed_samples 'failed', $running_samples 'running'"
);
ok($running_samples > 0, 'sweeps ran while the view was sampled');
is($failed_samples, 0,
	"the view never says 'failed' for a database whose sweeps all succeed");

###############################################################################
note('2. per-consumer windows, forever, reset, dedup.retention = -1');

$node->safe_psql(
	'db1', qq{
BEGIN;
SELECT dedup_set_retention('c', '10 minutes');
SELECT dedup_set_retention('long', '1 day');
SELECT dedup_keep_forever('f');
SELECT dedup_keep_forever('r');
INSERT INTO processed_messages
SELECT 'c', 'm' || i, $L - i * interval '1 minute' FROM generate_series(0, 30) i
UNION ALL
SELECT 'long', 'm' || i, $L - i * interval '1 hour' FROM generate_series(0, 30) i
UNION ALL
SELECT 'f', 'm' || i, $L - i * interval '100 years' FROM generate_series(0, 20) i
UNION ALL
SELECT 'r', 'm' || i, $L - i * interval '1 hour' FROM generate_series(0, 48) i;
COMMIT;
});
ok($node->sweep_until('db1', 'done'),
	'db1: a sweep completed (per-consumer windows)');
is($node->consumer_counts('db1'), 'a=62,c=11,f=21,long=25,r=49',
	'c keeps 10 minutes (11 of 31), long keeps 1 day (25 of 31), f and r (forever) keep all, a unchanged'
);
is( $node->safe_psql(
		'db1', qq{
SELECT min(processed_at) = $L - interval '10 minutes' FROM processed_messages
 WHERE consumer_name = 'c'}),
	't',
	'c: its oldest claim left is the one exactly 10 minutes before its latest'
);
is( $node->safe_psql('db1', q{SELECT total_rows_deleted FROM dedup_sweeper}),
	'147',
	'view: 121 + 20 + 6 rows deleted in all');
is( $node->safe_psql(
		'db1',
		q{SELECT string_agg(consumer_name || ':' || coalesce(retention::text, 'forever'), ',' ORDER BY consumer_name) FROM dedup_retention}
	),
	'c:00:10:00,f:forever,long:1 day,r:forever',
	'dedup_retention holds the windows');

is($node->safe_psql('db1', q{SELECT dedup_reset_retention('r')}),
	't', 'dedup_reset_retention(r) returns true: r had its own window');
is($node->safe_psql('db1', q{SELECT dedup_reset_retention('r')}),
	'f', 'a second dedup_reset_retention(r) returns false');
ok($node->sweep_until('db1', 'done'),
	'db1: a sweep completed (r back to the default)');
is( $node->count_of('db1', 'r'),
	'2',
	'r is back on dedup.retention = 1h: 2 of its 49 claims remain (latest and latest - 1h)'
);
is($node->consumer_counts('db1'),
	'a=62,c=11,f=21,long=25,r=2', 'nobody else lost a claim');

# dedup.retention = -1: forever for consumers without their own window
$node->set_config('dedup.retention', '-1', '-1');
ok( $node->sweep_until('db1', 'done'),
	'db1: a sweep completed (settle: sweepers from now on have dedup.retention = -1)'
);
$node->safe_psql(
	'db1', qq{
BEGIN;
SELECT dedup_set_retention('c2', '10 minutes');
INSERT INTO processed_messages
SELECT 'd', 'm' || i, $L - i * interval '1 day' FROM generate_series(0, 10) i
UNION ALL
SELECT 'c2', 'm' || i, $L - i * interval '1 minute' FROM generate_series(0, 30) i;
COMMIT;
});
ok($node->sweep_until('db1', 'done'),
	'db1: a sweep completed (dedup.retention = -1)');
is( $node->count_of('db1', 'd'),
	'11',
	'dedup.retention = -1: d (no window of its own) keeps claims 10 days old'
);
is($node->count_of('db1', 'c2'),
	'11',
	'dedup.retention = -1: c2 (own window of 10 minutes) is still swept');
is($node->safe_psql('db1', 'SELECT default_retention FROM dedup_sweeper'),
	'forever', 'view: default_retention forever');

###############################################################################
note('4a. reload: a new dedup.retention applies to the next sweep');

$node->set_config('dedup.retention', undef, '1h');

# no wake-up: the scheduled sweep picks it up
ok( $node->poll_query_until(
		'db1',
		"SELECT count(*) FROM processed_messages WHERE consumer_name = 'd'",
		'1'),
	'after the reload to 1h, the next scheduled sweep deletes d\'s old claims'
);
is( $node->consumer_counts('db1'),
	'a=62,c=11,c2=11,d=1,f=21,long=25,r=2',
	'd keeps only its latest claim; no one else is affected');

###############################################################################
note('4b. dedup.sweep_enabled = off stops sweeping, on resumes it');

$node->set_config('dedup.sweep_enabled', 'off', 'off');
$node->wait_sweeping_stopped('db1');
my $stopped_at =
  $node->safe_psql('db1', 'SELECT last_sweep_start FROM dedup_sweeper');
is($node->safe_psql('db1', 'SELECT next_sweep IS NULL FROM dedup_sweeper'),
	't', 'view: no next sweep while sweeping is off');
$node->add_expired('db1', 'e', 6);
my $offset = -s $node->logfile;

# A launcher that does not sweep shows nothing, but once it has handled a
# wake-up it sleeps again in its main wait: /proc counts one more voluntary
# context switch of it than while it slept there before, and
# pg_stat_activity shows it there again, not active (as it is while it
# waits for a sweeper, whose start is in the log by then).  Sweeping on, it
# would have swept db1 before that sleep.
my $launcher  = $node->launcher_pid;
my $main_wait = $node->pg_version >= 17 ? 'DedupLauncherMain' : 'Extension';
my $switches  = sub {
	my $status = slurp_file("/proc/$launcher/status");
	$status =~ /^voluntary_ctxt_switches:\s+(\d+)$/m
	  or die "no voluntary_ctxt_switches in /proc/$launcher/status";
	return $1;
};
my $in_main_wait = sub {
	return $node->safe_psql(
		'db1', qq{
SELECT count(*) FROM pg_stat_activity
 WHERE pid = $launcher AND state IS DISTINCT FROM 'active'
   AND wait_event_type = 'Extension' AND wait_event = '$main_wait'}) eq '1';
};
ok(wait_until($in_main_wait), 'the launcher sleeps in its main wait');
my $slept = $switches->();
$node->safe_psql('db1', 'SELECT dedup_sweeper_wake()');
ok( wait_until(sub { $switches->() > $slept && $in_main_wait->() }),
	'the launcher has handled the wake-up and sleeps again in its main wait');
is($node->safe_psql('db1', 'SELECT last_sweep_start FROM dedup_sweeper'),
	$stopped_at, 'sweep_enabled = off: no sweep, even after a wake-up');
is( $node->log_count(
		$offset, qr/starting background worker process "dedup sweeper/),
	0,
	'sweep_enabled = off: the log shows no sweeper started in any database');
is($node->count_of('db1', 'e'),
	'6', 'sweep_enabled = off: expired claims stay');
is( $node->safe_psql(
		'db1',
		'SELECT sweep_enabled, sweeper_running, next_sweep IS NULL FROM dedup_sweeper'
	),
	'f|t|t',
	'view: sweep_enabled false, launcher still running, no next sweep after a wake-up either'
);

$node->set_config('dedup.sweep_enabled', undef, 'on');
ok( $node->poll_query_until(
		'db1',
		"SELECT count(*) FROM processed_messages WHERE consumer_name = 'e'",
		'2'),
	'sweep_enabled back on: the expired claims are deleted (2 of 6 remain)');
ok( $node->safe_psql('db1',
		"SELECT last_sweep_start > '$stopped_at' FROM dedup_sweeper") eq 't',
	'view: a new sweep started');
is( $node->safe_psql(
		'db1', 'SELECT next_sweep > last_sweep_start FROM dedup_sweeper'),
	't',
	'view: a next sweep again');

###############################################################################
note('3. the outage rule');

# An idle consumer: its latest claim is 30 days old.  Window 1h from THAT.
$node->safe_psql(
	'db1', q{
INSERT INTO processed_messages
SELECT 'idle', 'm' || i, now() - interval '30 days' - i * interval '10 minutes'
  FROM generate_series(0, 12) i});
ok( $node->sweep_until('db1', 'done'),
	'db1: a sweep completed (idle consumer)');
is( $node->count_of('db1', 'idle'),
	'7',
	'idle consumer (latest claim 30 days ago) keeps the hour before its latest claim: 7 of 13'
);

# A consumer whose last claim was 90 minutes ago, then the server went down.
# Insert it while sweeps are off, so that the first sweep after the restart
# is the one that meets the expired rows.
$node->set_config('dedup.sweep_enabled', 'off', 'off');
$node->wait_sweeping_stopped('db1');
$node->safe_psql(
	'db1', q{
INSERT INTO processed_messages
SELECT 'o', 'm' || i, now() - interval '90 minutes' - i * interval '10 minutes'
  FROM generate_series(0, 17) i});
my $before_outage = $node->consumer_counts('db1', "consumer_name <> 'o'");
$node->safe_psql('postgres', 'ALTER SYSTEM RESET dedup.sweep_enabled');
$node->stop;
$node->start;
ok( $node->poll_query_until(
		'db1', q{
SELECT sweeper_running AND sweep_enabled AND last_sweep_outcome = 'done'
   AND sweeper_pid IS NULL
  FROM dedup_sweeper}),
	'after the restart, db1 is swept');
is( $node->count_of('db1', 'o'),
	'7',
	'after the outage: o keeps the hour before its latest claim (7 of 18), though all are older than now - 1h'
);
is( $node->safe_psql(
		'db1', q{
SELECT count(*) FROM processed_messages
 WHERE consumer_name = 'o'
   AND processed_at < (SELECT max(processed_at) - interval '1 hour'
						 FROM processed_messages WHERE consumer_name = 'o')}),
	'0',
	'after the outage: o\'s expired claims are gone');
is($node->consumer_counts('db1', "consumer_name <> 'o'"),
	$before_outage, 'after the outage: no other consumer lost a claim');
is( $node->safe_psql(
		'db1', 'SELECT total_rows_deleted, database_state FROM dedup_sweeper'
	),
	'11|active',
	'view after the restart: 11 rows deleted since, active');

$node->stop;
done_testing();
