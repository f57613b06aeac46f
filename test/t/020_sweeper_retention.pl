#
# 020_sweeper_retention.pl: the retention sweeper, for real.
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
#     the deleted rows and says done / active;
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
#     sweep starts at all, even on a wake-up;
#  5. every database with the extension is swept without per-database setup;
#     a database without it is probed once and then left alone (no repeated
#     log lines); dedup.databases restricts sweeping;
#  6. DROP EXTENSION stops sweeping a database quietly; CREATE EXTENSION
#     makes it swept again (the database had been marked absent, so only its
#     wake-up can do that);
#  7. batches: 1050 expired rows with dedup.sweep_batch_size = 100 go in 11
#     separate transactions of at most 100 rows, oldest first (as the
#     sweeper's DEBUG1 lines tell); with dedup.sweep_batch_delay = 300ms
#     the sweeper waits (in pg_stat_activity) at least 300 ms between two
#     batches, never before the first;
#  8. claims under pgbench while sweeps delete a 2-second window: no failure,
#     no in-window claim lost, no message applied twice within the window;
#  9. dedup.sweep_role: the sweep needs that role's privileges; without
#     DELETE the sweep fails, the view and the log say why, and
#     retries back off (1 s, 2 s, 4 s ...);
# 10. dedup_sweep() returns what it deleted, can be limited to one consumer,
#     and is not executable by PUBLIC.
# 11. A row locked by another transaction makes a sweep end 'partial', with
#     no error and no wait; the next sweep deletes it.
#
# The postmaster logs every background worker start at DEBUG1, so the log
# tells which databases got a sweeper and when.
#
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupTest;
use Time::HiRes qw(usleep time);
use IPC::Run;

# a sweep that never comes should fail the test in a minute, not three
$PostgreSQL::Test::Utils::timeout_default = 60
  unless $ENV{PG_TEST_TIMEOUT_DEFAULT};
my $timeout = $PostgreSQL::Test::Utils::timeout_default;

my $node = PostgreSQL::Test::Cluster->new('sweeper');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'dedup'
dedup.sweep_interval = 1s
dedup.retention = 1h
max_connections = 30
log_statement = ddl
# the postmaster says "starting background worker process ..." at DEBUG1
log_min_messages = debug1
});
$node->start;

# the latest claim of most consumers below; a fixed date keeps it exact
my $L = $LATEST_CLAIM;

sub sql
{
	my ($db, $query) = @_;
	return $node->safe_psql($db, $query);
}

# every consumer's row count, "name=n,..."
sub counts
{
	my ($db, $where) = @_;
	$where //= 'true';
	return sql($db, qq{
SELECT coalesce(string_agg(consumer_name || '=' || n, ',' ORDER BY consumer_name), '')
  FROM (SELECT consumer_name, count(*) AS n FROM processed_messages
		 WHERE $where GROUP BY consumer_name) s});
}

# Wait for a sweep of $db that started after $since and finished 'done'; it
# saw everything committed before $since.
sub wait_sweep_after
{
	my ($db, $since, $what) = @_;
	return ok(
		$node->poll_query_until(
			$db, qq{
SELECT last_sweep_start > '$since' AND sweeper_pid IS NULL
   AND last_sweep_outcome = 'done'
  FROM dedup_sweeper}),
		"$db: a sweep completed ($what)");
}

# Sweep $db now (wake the launcher) and wait until that sweep is over.
sub sweep_now
{
	my ($db, $what) = @_;
	my $since = sql($db, 'SELECT clock_timestamp()');
	sql($db, 'SELECT dedup_sweeper_wake()');
	return wait_sweep_after($db, $since, $what);
}

# the launcher does not start a sweeper for a while: it has stopped sweeping
sub wait_sweeping_stopped
{
	my ($db) = @_;
	return ok(
		$node->poll_query_until(
			$db, q{
SELECT sweeper_pid IS NULL
   AND clock_timestamp() - last_sweep_start > interval '2.5 s'
  FROM dedup_sweeper}),
		"$db: no sweep started for 2.5 s (2.5 intervals): sweeping has stopped");
}

for my $db (qw(db1 db2 noext))
{
	sql('postgres', "CREATE DATABASE $db");
}
sql('db1', 'CREATE EXTENSION dedup');
sql('db2', 'CREATE EXTENSION dedup');

is(sql('db1', 'SELECT sweeper_running FROM dedup_sweeper'),
	't', 'the launcher runs');

###############################################################################
note('1. expiry with dedup.retention = 1h');

# 181 rows a minute apart, the latest at $L, and two rows a microsecond on
# either side of $L - 1h.  Expired: minutes 61..180 and edge-out = 121 rows.
# (counted before the commit: a scheduled sweep may come right after it)
is( sql(
		'db1', qq{
BEGIN;
INSERT INTO processed_messages
SELECT 'a', 'm' || i, $L - i * interval '1 minute' FROM generate_series(0, 180) i;
INSERT INTO processed_messages VALUES
	('a', 'edge-in',  $L - interval '1 hour' + interval '1 microsecond'),
	('a', 'edge-out', $L - interval '1 hour' - interval '1 microsecond');
SELECT count(*) FROM processed_messages WHERE consumer_name = 'a';
COMMIT;
}), '183', 'consumer a: 183 claims over 3 hours');
sweep_now('db1', 'expiry with 1h');

is(count_of($node, 'db1', 'a'), '62', 'consumer a: 62 claims remain (121 deleted)');
is( sql('db1', qq{
SELECT count(*) FROM generate_series(0, 60) i
 WHERE NOT EXISTS (SELECT FROM processed_messages
					WHERE consumer_name = 'a' AND message_id = 'm' || i)}),
	'0',
	'every claim within the hour before the latest one is still there');
is( sql('db1', qq{
SELECT count(*) FROM processed_messages
 WHERE consumer_name = 'a' AND processed_at < $L - interval '1 hour'}),
	'0', 'no claim older than latest - 1h is left');
is( sql('db1', q{
SELECT string_agg(message_id, ',' ORDER BY message_id) FROM processed_messages
 WHERE consumer_name = 'a' AND message_id IN ('m60', 'm61', 'edge-in', 'edge-out')}),
	'edge-in,m60',
	'boundary: a claim exactly 1h before the latest stays, 1 microsecond older goes');
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
# Sample the view as fast as one backend can for 3 s (three sweeps, each
# seen as 'running' while it lasts).
my $samples = sql('db1', q{
CREATE FUNCTION pg_temp.sample() RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	n int := 0;
	failed int := 0;
	running int := 0;
	outcome text;
	stop timestamptz := clock_timestamp() + interval '3 s';
BEGIN
	WHILE clock_timestamp() < stop LOOP
		SELECT last_sweep_outcome INTO outcome FROM dedup_sweeper;
		IF outcome = 'failed' THEN failed := failed + 1; END IF;
		IF outcome = 'running' THEN running := running + 1; END IF;
		n := n + 1;
	END LOOP;
	RETURN failed || '|' || running || '|' || n;
END $$;
SELECT pg_temp.sample();});
my ($failed_samples, $running_samples, $all_samples) = split /\|/, $samples;
note("$all_samples samples of the view: $failed_samples 'failed', $running_samples 'running'");
ok($running_samples > 0, 'sweeps ran while the view was sampled');
is($failed_samples, 0,
	"the view never says 'failed' for a database whose sweeps all succeed");

###############################################################################
note('2. per-consumer windows, forever, reset, dedup.retention = -1');

sql('db1', qq{
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
sweep_now('db1', 'per-consumer windows');
is(counts('db1'), 'a=62,c=11,f=21,long=25,r=49',
	'c keeps 10 minutes (11 of 31), long keeps 1 day (25 of 31), f and r (forever) keep all, a unchanged'
);
is( sql('db1', qq{
SELECT min(processed_at) = $L - interval '10 minutes' FROM processed_messages
 WHERE consumer_name = 'c'}),
	't', 'c: its oldest claim left is the one exactly 10 minutes before its latest');
is( sql('db1', q{SELECT total_rows_deleted FROM dedup_sweeper}),
	'147', 'view: 121 + 20 + 6 rows deleted in all');
is( sql('db1',
		q{SELECT string_agg(consumer_name || ':' || coalesce(retention::text, 'forever'), ',' ORDER BY consumer_name) FROM dedup_retention}
	),
	'c:00:10:00,f:forever,long:1 day,r:forever',
	'dedup_retention holds the windows');

is(sql('db1', q{SELECT dedup_reset_retention('r')}),
	't', 'dedup_reset_retention(r) returns true: r had its own window');
is(sql('db1', q{SELECT dedup_reset_retention('r')}),
	'f', 'a second dedup_reset_retention(r) returns false');
sweep_now('db1', 'r back to the default');
is(count_of($node, 'db1', 'r'), '2',
	'r is back on dedup.retention = 1h: 2 of its 49 claims remain (latest and latest - 1h)'
);
is(counts('db1'), 'a=62,c=11,f=21,long=25,r=2', 'nobody else lost a claim');

# dedup.retention = -1: forever for consumers without their own window
set_config($node, 'dedup.retention', '-1', '-1');
sweep_now('db1', 'settle: sweepers from now on have dedup.retention = -1');
sql('db1', qq{
BEGIN;
SELECT dedup_set_retention('c2', '10 minutes');
INSERT INTO processed_messages
SELECT 'd', 'm' || i, $L - i * interval '1 day' FROM generate_series(0, 10) i
UNION ALL
SELECT 'c2', 'm' || i, $L - i * interval '1 minute' FROM generate_series(0, 30) i;
COMMIT;
});
sweep_now('db1', 'dedup.retention = -1');
is(count_of($node, 'db1', 'd'), '11',
	'dedup.retention = -1: d (no window of its own) keeps claims 10 days old');
is(count_of($node, 'db1', 'c2'), '11',
	'dedup.retention = -1: c2 (own window of 10 minutes) is still swept');
is(sql('db1', 'SELECT default_retention FROM dedup_sweeper'),
	'forever', 'view: default_retention forever');

###############################################################################
note('4a. reload: a new dedup.retention applies to the next sweep');

set_config($node, 'dedup.retention', undef, '1h');
# no wake-up: the scheduled sweep picks it up
ok($node->poll_query_until('db1', "SELECT count(*) FROM processed_messages WHERE consumer_name = 'd'", '1'),
	'after the reload to 1h, the next scheduled sweep deletes d\'s old claims');
is(counts('db1'), 'a=62,c=11,c2=11,d=1,f=21,long=25,r=2',
	'd keeps only its latest claim; no one else is affected');

###############################################################################
note('4b. dedup.sweep_enabled = off stops sweeping, on resumes it');

set_config($node, 'dedup.sweep_enabled', 'off', 'off');
wait_sweeping_stopped('db1');
my $stopped_at = sql('db1', 'SELECT last_sweep_start FROM dedup_sweeper');
sql('db1', qq{
INSERT INTO processed_messages
SELECT 'e', 'm' || i, $L - i * interval '1 hour' FROM generate_series(0, 5) i});
sql('db1', 'SELECT dedup_sweeper_wake()');
my $offset = -s $node->logfile;
sleep(4);    # four intervals go by
is(sql('db1', 'SELECT last_sweep_start FROM dedup_sweeper'),
	$stopped_at, 'sweep_enabled = off: no sweep in 4 intervals, even after a wake-up');
is(occurrences(log_from($node, $offset), qr/starting background worker process "dedup sweeper/),
	0, 'sweep_enabled = off: the log shows no sweeper started in any database');
is(count_of($node, 'db1', 'e'), '6', 'sweep_enabled = off: expired claims stay');
is(sql('db1', 'SELECT sweep_enabled, sweeper_running FROM dedup_sweeper'),
	'f|t', 'view: sweep_enabled false, launcher still running');

set_config($node, 'dedup.sweep_enabled', undef, 'on');
ok($node->poll_query_until('db1', "SELECT count(*) FROM processed_messages WHERE consumer_name = 'e'", '2'),
	'sweep_enabled back on: the expired claims are deleted (2 of 6 remain)');
ok(sql('db1', "SELECT last_sweep_start > '$stopped_at' FROM dedup_sweeper") eq 't',
	'view: a new sweep started');

###############################################################################
note('3. the outage rule');

# An idle consumer: its latest claim is 30 days old.  Window 1h from THAT.
sql('db1', q{
INSERT INTO processed_messages
SELECT 'idle', 'm' || i, now() - interval '30 days' - i * interval '10 minutes'
  FROM generate_series(0, 12) i});
sweep_now('db1', 'idle consumer');
is(count_of($node, 'db1', 'idle'), '7',
	'idle consumer (latest claim 30 days ago) keeps the hour before its latest claim: 7 of 13'
);

# A consumer whose last claim was 90 minutes ago, then the server went down.
# Insert it while sweeps are off, so that the first sweep after the restart
# is the one that meets the expired rows.
set_config($node, 'dedup.sweep_enabled', 'off', 'off');
wait_sweeping_stopped('db1');
sql('db1', q{
INSERT INTO processed_messages
SELECT 'o', 'm' || i, now() - interval '90 minutes' - i * interval '10 minutes'
  FROM generate_series(0, 17) i});
my $before_outage = counts('db1', "consumer_name <> 'o'");
sql('postgres', 'ALTER SYSTEM RESET dedup.sweep_enabled');
$node->stop;
$node->start;
ok( $node->poll_query_until(
		'db1', q{
SELECT sweeper_running AND sweep_enabled AND last_sweep_outcome = 'done'
   AND sweeper_pid IS NULL
  FROM dedup_sweeper}),
	'after the restart, db1 is swept');
is(count_of($node, 'db1', 'o'), '7',
	'after the outage: o keeps the hour before its latest claim (7 of 18), though all are older than now - 1h'
);
is( sql('db1', q{
SELECT count(*) FROM processed_messages
 WHERE consumer_name = 'o'
   AND processed_at < (SELECT max(processed_at) - interval '1 hour'
						 FROM processed_messages WHERE consumer_name = 'o')}),
	'0', 'after the outage: o\'s expired claims are gone');
is(counts('db1', "consumer_name <> 'o'"),
	$before_outage, 'after the outage: no other consumer lost a claim');
is(sql('db1', 'SELECT total_rows_deleted, database_state FROM dedup_sweeper'),
	'11|active', 'view after the restart: 11 rows deleted since, active');

###############################################################################
note('7. batches');

# Every batch of the sweeper says at DEBUG1 how many rows of which consumer
# it deleted, in which transaction, and up to which claim time; the log line
# prefix (%m) says when, here in seconds since midnight.
sub batches_logged
{
	my ($offset, $consumer) = @_;
	my @batches;
	for my $line (split /\n/, log_from($node, $offset))
	{
		next
		  unless $line =~ /^\S+ (\d\d):(\d\d):(\d\d\.\d+) .*dedup sweep: deleted (\d+) rows of consumer "\Q$consumer\E" in transaction (\d+), up to (.*)$/;
		push @batches,
		  { at => $1 * 3600 + $2 * 60 + $3, n => $4, xid => $5, upto => $6 };
	}
	return grep { $_->{n} > 0 } @batches;
}
set_config($node, 'dedup.sweep_batch_size', '100', '100');
sweep_now('db1', 'settle: sweepers from now on have batch size 100');
my $total_before = sql('db1', 'SELECT total_rows_deleted FROM dedup_sweeper');
my $batch_offset = -s $node->logfile;
sql('db1', qq{
INSERT INTO processed_messages
SELECT 'batch', 'm' || i, $L - interval '2 hours' - i * interval '1 second'
  FROM generate_series(1, 1050) i
UNION ALL VALUES ('batch', 'latest', $L), ('batch', 'recent', $L - interval '30 minutes')});
sweep_now('db1', '1050 expired rows');
is(count_of($node, 'db1', 'batch'), '2', 'all 1050 expired rows deleted, the 2 in the window kept');
my @batches = batches_logged($batch_offset, 'batch');
my %xids = map { $_->{xid} => 1 } @batches;
my @sizes = map { $_->{n} } @batches;
my $sum = 0;
$sum += $_ for @sizes;
is( join('|', scalar(@batches), scalar(keys %xids), $sum, join(',', @sizes)),
	'11|11|1050|100,100,100,100,100,100,100,100,100,100,50',
	'deleted in 11 batches in 11 transactions: ten of 100 rows and one of 50');
is( scalar(grep { $batches[$_]{upto} lt $batches[ $_ - 1 ]{upto} } 1 .. $#batches),
	0, 'oldest first: each batch ends at a later claim than the one before');
is( sql('db1', 'SELECT total_rows_deleted FROM dedup_sweeper'),
	$total_before + 1050, 'view: total_rows_deleted grew by 1050');

# the pause between batches: 5 batches of 100 with 300 ms between them
set_config($node, 'dedup.sweep_batch_delay', '300ms', '300ms');
$batch_offset = -s $node->logfile;
sql('db1', qq{
INSERT INTO processed_messages
SELECT 'paced', 'm' || i, $L - interval '2 hours' - i * interval '1 second'
  FROM generate_series(1, 500) i
UNION ALL VALUES ('paced', 'latest', $L)});
my $paced_since = sql('db1', 'SELECT clock_timestamp()');
sql('db1', 'SELECT dedup_sweeper_wake()');
my $pause_wait =
  sql('db1', 'SHOW server_version_num') >= 170000
  ? 'DedupSweepBatchDelay'
  : 'Extension';
ok( $node->poll_query_until(
		'db1', qq{
SELECT count(*) = 1 FROM pg_stat_activity
 WHERE backend_type = 'dedup sweeper' AND datname = 'db1'
   AND wait_event_type = 'Extension' AND wait_event = '$pause_wait'}),
	"the sweeper pauses between batches in pg_stat_activity ($pause_wait)");
wait_sweep_after('db1', $paced_since, '500 expired rows, paced');
is(count_of($node, 'db1', 'paced'), '1', 'paced sweep: the 500 expired rows deleted');
my @paced = batches_logged($batch_offset, 'paced');
my @pauses = map { $paced[$_]{at} - $paced[ $_ - 1 ]{at} } 1 .. $#paced;
is(join(',', map { $_->{n} } @paced), '100,100,100,100,100',
	'paced sweep: five batches of 100');
is(scalar(grep { $_ < 0.299 } @pauses), 0,	# the log says when to the ms
	'paced sweep: at least 300 ms between two batches (pauses: '
	  . join(", ", map { sprintf "%.3f s", $_ } @pauses) . ')');
set_config($node, 'dedup.sweep_batch_delay', undef, '0');
set_config($node, 'dedup.sweep_batch_size', undef, '1000');

###############################################################################
note('9. dedup.sweep_role');

# "sweeper" gets what deleting expired rows needs: it reads both tables and
# deletes from processed_messages.  "nodelete" may read and update but not
# delete.
sql('postgres', 'CREATE ROLE sweeper NOLOGIN; CREATE ROLE nodelete NOLOGIN');
for my $db (qw(db1 db2))
{
	sql($db, q{
GRANT USAGE ON SCHEMA public TO sweeper, nodelete;
GRANT SELECT, DELETE ON processed_messages TO sweeper;
GRANT SELECT, UPDATE ON processed_messages TO nodelete;
GRANT SELECT ON dedup_retention TO sweeper, nodelete;
});
}
set_config($node, 'dedup.sweep_role', 'sweeper', 'sweeper');
sql('db1', qq{
INSERT INTO processed_messages
SELECT 'batch-role', 'm' || i, $L - i * interval '1 hour' FROM generate_series(0, 9) i});

# Wait for the end of a sweep, whatever its outcome.  Twice: the second
# sweeper was certainly started after the postmaster had the new setting.
sub sweep_now_any
{
	my ($db, $what) = @_;
	my $since = sql($db, 'SELECT clock_timestamp()');
	sql($db, 'SELECT dedup_sweeper_wake()');
	return ok(
		$node->poll_query_until(
			$db, qq{
SELECT last_sweep_start > '$since' AND sweeper_pid IS NULL
   AND last_sweep_end > last_sweep_start
  FROM dedup_sweeper}),
		"$db: a sweep ended ($what)");
}
sweep_now_any('db1', 'role sweeper, first');
sweep_now_any('db1', 'role sweeper, second');
my ($role_outcome, $role_error) = split /\|/,
  sql('db1', 'SELECT last_sweep_outcome, last_error FROM dedup_sweeper');
note("sweep as a role with SELECT and DELETE: outcome $role_outcome, error: "
	  . ($role_error // ''));
is($role_outcome, 'done', 'sweep_role with SELECT, DELETE: the sweep succeeds');
is(count_of($node, 'db1', 'batch-role'), '2',
	'sweep_role with SELECT, DELETE: expired claims deleted');

is(sql('db1', 'SELECT last_sweep_outcome FROM dedup_sweeper'), 'done', 'view: done');

# A role that may read (and update) but not delete.  Sweep db1 only, so that every error
# in the log comes from it.
set_config($node, 'dedup.databases', 'db1', 'db1');
set_config($node, 'dedup.sweep_role', 'nodelete', 'nodelete');
my $since = sql('db1', 'SELECT clock_timestamp()');
$offset = -s $node->logfile;
sql('db1', qq{
INSERT INTO processed_messages
SELECT 'denied', 'm' || i, $L - i * interval '1 hour' FROM generate_series(0, 9) i});
sql('db1', 'SELECT dedup_sweeper_wake()');
ok( $node->poll_query_until(
		'db1', qq{
SELECT last_sweep_outcome, last_error, last_error_at > '$since'
  FROM dedup_sweeper},
		"failed|permission denied for table processed_messages|t"),
	'view: last_sweep_outcome failed, last_error permission denied');
my $first_error = time;
my $error_re = qr/ERROR:  permission denied for table processed_messages/;
ok(wait_log_count($node, $offset, $error_re, 1), 'the error is in the server log');
# let ten intervals go by: without back-off that is ten more errors
sleep(1) while time < $first_error + 10;
my @error_times;
for my $line (split /\n/, log_from($node, $offset))
{
	next unless $line =~ $error_re;
	$line =~ /^\S+ (\d+):(\d+):(\d+\.\d+)/ or next;
	push @error_times, $1 * 3600 + $2 * 60 + $3;
}
my @gaps = map { $error_times[$_] - $error_times[ $_ - 1 ] } 1 .. $#error_times;
note(scalar(@error_times) . ' errors in 10 s, gaps: ' . join(', ', map { sprintf '%.2f', $_ } @gaps));
ok(@error_times >= 3 && @error_times <= 5,
	'back-off: 3 to 5 errors logged in 10 s with a 1 s interval (got '
	  . scalar(@error_times) . ')');
ok(@gaps >= 2 && !grep({ $gaps[$_] < 1.5 * $gaps[ $_ - 1 ] } 1 .. $#gaps),
	'back-off: each retry waits at least 1.5 times longer than the one before');
is(count_of($node, 'db1', 'denied'), '10', 'the failing sweeps deleted nothing');

set_config($node, 'dedup.sweep_role', undef, '');
set_config($node, 'dedup.databases', undef, '');
# the back-off may put the next sweep far away; a wake-up sweeps now
sweep_now('db1', 'role fixed, woken up');
is(count_of($node, 'db1', 'denied'), '2', 'fixed: the expired claims are deleted');
is(sql('db1', q{SELECT last_sweep_outcome, last_error LIKE 'permission denied%' FROM dedup_sweeper}),
	'done|t', 'view: done again; last_error still tells what went wrong before');

###############################################################################
note('10. dedup_sweep()');

is( sql('db1', qq{
BEGIN;
INSERT INTO processed_messages
SELECT 'x', 'm' || i, $L - i * interval '1 hour' FROM generate_series(0, 4) i
UNION ALL
SELECT 'y', 'm' || i, $L - i * interval '1 hour' FROM generate_series(0, 5) i;
SELECT dedup_sweep('x');
SELECT count(*) FROM processed_messages WHERE consumer_name = 'y';
SELECT dedup_sweep();
SELECT dedup_sweep();
COMMIT;
}),
	"3\n6\n4\n0",
	"dedup_sweep('x') deletes x's 3 expired rows only, dedup_sweep() then y's 4, then none"
);
is(counts('db1', "consumer_name IN ('x', 'y')"), 'x=2,y=2',
	'after dedup_sweep: x and y keep their window');

sql('postgres', 'CREATE ROLE plain LOGIN; CREATE ROLE maint LOGIN');
sql('db1', 'GRANT EXECUTE ON FUNCTION dedup_sweep(text) TO maint');
my ($ret, $out, $err) = $node->psql(
	'db1', "\\set VERBOSITY verbose\nSELECT dedup_sweep();",
	extra_params => [ '-U', 'plain' ]);
isnt($ret, 0, 'a plain role cannot run dedup_sweep()');
like($err, qr/ERROR:  42501: permission denied for function dedup_sweep/,
	'... permission denied, SQLSTATE 42501');
($ret, $out, $err) = $node->psql(
	'db1', "\\set VERBOSITY verbose\nSELECT dedup_sweep('x');",
	extra_params => [ '-U', 'plain' ]);
like($err, qr/ERROR:  42501: permission denied for function dedup_sweep/,
	"... nor dedup_sweep('x')");
sql('db1', qq{
INSERT INTO processed_messages
SELECT 'x', 'old' || i, $L - interval '1 day' - i * interval '1 hour' FROM generate_series(0, 2) i});
# the background sweeper may get there first: count both
my $by_maint = $node->safe_psql('db1', 'SELECT dedup_sweep()',
	extra_params => [ '-U', 'maint' ]);
ok($by_maint =~ /^[0-3]$/ && count_of($node, 'db1', 'x') eq '2',
	"a role granted EXECUTE (and no table privilege) runs dedup_sweep() (deleted $by_maint)");

###############################################################################
note('8. claims while sweeps delete a 2-second window');

my $window = 2;
sql('db1', qq{
SELECT dedup_set_retention('busy', '$window seconds');
CREATE TABLE applied (consumer text NOT NULL, key int NOT NULL, at timestamptz NOT NULL);
});
my $tmpdir = PostgreSQL::Test::Utils::tempdir;
my $script = "$tmpdir/claim.sql";
append_to_file($script, q{\set k random(1, 2000)
BEGIN;
SELECT dedup_claim('busy', 'k' || :k) AS claimed \gset
\if :claimed
INSERT INTO applied VALUES ('busy', :k, now());
\endif
END;
});
$total_before = sql('db1', 'SELECT total_rows_deleted FROM dedup_sweeper');
$offset = -s $node->logfile;
my @cmd = (
	'pgbench', '-n', '-h', $node->host, '-p', $node->port,
	'-c', 6, '-j', 3, '-T', 10, '-R', 2000, '-f', $script, 'db1');
my ($stdout, $stderr);
my $ok = IPC::Run::run(\@cmd, '>', \$stdout, '2>', \$stderr);
note($stdout);
ok($ok, 'pgbench exited successfully') or diag($stderr);
like($stdout, qr/number of failed transactions: 0 \(/, 'pgbench: no failed transaction');
unlike($stderr, qr/error|abort/i, 'pgbench: no client error') or diag($stderr);
my ($processed) = $stdout =~ /number of transactions actually processed: (\d+)/;
ok(defined $processed && $processed > 5000, "pgbench ran " . ($processed // 'no') . ' claims');

my $run_log = log_from($node, $offset);
my $sweeps_during = occurrences($run_log, sweeper_start_re('db1'));
ok($sweeps_during >= 7, "db1 was swept during the run ($sweeps_during sweeps)");
unlike($run_log, qr/ERROR|FATAL/, 'no error in the log during the run');
sweep_now('db1', 'after pgbench');

my ($applied, $keys, $in_window) = split /\|/, sql('db1', qq{
SELECT count(*), count(DISTINCT key),
	   count(*) FILTER (WHERE at >= (SELECT max(at) FROM applied) - interval '$window s')
  FROM applied});
note("$applied applications of $keys keys, $in_window in the last window");
ok($applied > $keys,
	'keys were claimed again after their claim expired: the sweeper deleted claims during the run');
ok($in_window > 100, 'many claims are in the final window');
ok(sql('db1', 'SELECT total_rows_deleted FROM dedup_sweeper') - $total_before > 0,
	'view: rows were deleted during the run');
is( sql('db1', q{
SELECT (SELECT max(at) FROM applied)
	 = (SELECT max(processed_at) FROM processed_messages WHERE consumer_name = 'busy')}),
	't', 'the latest application is the latest claim');
is( sql('db1', qq{
SELECT count(*) FROM applied a
 WHERE a.at >= (SELECT max(at) FROM applied) - interval '$window s'
   AND NOT EXISTS (SELECT FROM processed_messages p
					WHERE p.consumer_name = 'busy' AND p.message_id = 'k' || a.key
					  AND p.processed_at = a.at)}),
	'0', 'every claim applied within the window of the latest claim is still recorded');
is( sql('db1', q{
SELECT count(*) FROM processed_messages p
 WHERE p.consumer_name = 'busy'
   AND NOT EXISTS (SELECT FROM applied a
					WHERE 'k' || a.key = p.message_id AND a.at = p.processed_at)}),
	'0', 'every recorded claim was applied (no claim without its effect)');
is( sql('db1', qq{
SELECT count(*) FROM processed_messages
 WHERE consumer_name = 'busy'
   AND processed_at < (SELECT max(processed_at) FROM processed_messages
						WHERE consumer_name = 'busy') - interval '$window s'}),
	'0', 'no expired busy claim is left after the last sweep');
is( sql('db1', q{
SELECT count(*) FROM (
	SELECT at - lag(at) OVER (PARTITION BY key ORDER BY at) AS gap FROM applied) s
 WHERE gap < interval '1.5 s'}),
	'0', 'no key was applied twice within 1.5 s (window 2 s): a claim is only swept after expiring');

###############################################################################
note('5. several databases, one without the extension, dedup.databases');

my ($r, $o, $e) = $node->psql('noext', 'SELECT * FROM dedup_sweeper');
like($e, qr/relation "dedup_sweeper" does not exist/,
	'noext: no extension, no view');

# db2: no wake-up, no setting: the schedule sweeps it
sql('db2', qq{
INSERT INTO processed_messages
SELECT 'z', 'm' || i, $L - i * interval '1 hour' FROM generate_series(0, 3) i});
ok($node->poll_query_until('db2', "SELECT count(*) FROM processed_messages WHERE consumer_name = 'z'", '2'),
	'db2 is swept on schedule like db1');
is(sql('db2', 'SELECT database_state, total_rows_deleted >= 2 FROM dedup_sweeper'),
	'active|t', 'db2 view: active, rows deleted');

$offset = -s $node->logfile;
ok(wait_log_count($node, $offset, sweeper_start_re('db1'), 4)
	  && wait_log_count($node, $offset, sweeper_start_re('db2'), 4),
	'db1 and db2 are each swept every second');
my $slice = log_from($node, $offset);
is(occurrences($slice, qr/dedup.*noext/), 0,
	'meanwhile nothing at all is logged about dedup in noext: it is not probed again');
my $all = log_from($node, 0);
is(occurrences($all, qr/^.*(?:LOG|WARNING|ERROR|FATAL):.*(?:dedup.*noext|noext.*dedup).*$/m),
	0, 'no LOG, WARNING or ERROR line about dedup in noext in the whole log');
# A new launcher probes every database once, and so does dropping a database
# from dedup.databases and adding it back; nothing else makes it look again.
is(occurrences($all, sweeper_start_re('noext')), 3,
	'noext was probed exactly 3 times: after its CREATE DATABASE, after the restart, after dedup.databases was reset'
);

# dedup.databases = db1: db2 is left alone, even when woken up
set_config($node, 'dedup.databases', 'db1', 'db1');
sweep_now('db1', 'settle 1');
sweep_now('db1', 'settle 2: the launcher has seen dedup.databases');
$offset = -s $node->logfile;
sql('db1', qq{
INSERT INTO processed_messages
SELECT 'only', 'm' || i, $L - i * interval '1 hour' FROM generate_series(0, 3) i});
sql('db2', qq{
INSERT INTO processed_messages
SELECT 'only', 'm' || i, $L - i * interval '1 hour' FROM generate_series(0, 3) i});
sql('db2', 'SELECT dedup_sweeper_wake()');
ok($node->poll_query_until('db1', "SELECT count(*) FROM processed_messages WHERE consumer_name = 'only'", '2'),
	'dedup.databases = db1: db1 is swept');
ok(wait_log_count($node, $offset, sweeper_start_re('db1'), 3), 'db1 swept 3 more times');
is(count_of($node, 'db2', 'only'), '4', 'dedup.databases = db1: db2\'s expired claims stay');
is(occurrences(log_from($node, $offset), sweeper_start_re('db2')),
	0, 'dedup.databases = db1: no sweeper started in db2');
is(sql('db2', 'SELECT database_state IS NULL FROM dedup_sweeper'),
	't', 'db2 view: the sweeper does not track db2');

set_config($node, 'dedup.databases', undef, '');
ok($node->poll_query_until('db2', "SELECT count(*) FROM processed_messages WHERE consumer_name = 'only'", '2'),
	'dedup.databases reset: db2 is swept again');

###############################################################################
note('6. DROP EXTENSION and CREATE EXTENSION');

$offset = -s $node->logfile;
sql('db2', 'DROP EXTENSION dedup');
# in three passes of the launcher, db2 is looked at (at most) once
ok(wait_log_count($node, $offset, sweeper_start_re('db1'), 3), 'db1 swept 3 times since the DROP');
my $after_drop = -s $node->logfile;
ok(wait_log_count($node, $after_drop, sweeper_start_re('db1'), 4), 'db1 swept 4 more times');
$slice = log_from($node, $offset);
ok(occurrences($slice, sweeper_start_re('db2')) <= 1,
	'after DROP EXTENSION, db2 had at most one sweeper (which found no extension)');
is(occurrences(log_from($node, $after_drop), sweeper_start_re('db2')),
	0, 'then no more sweepers in db2');
unlike($slice, qr/WARNING|ERROR|FATAL/, 'no warning or error in the log since the DROP');

sql('db2', 'CREATE EXTENSION dedup');
sql('db2', qq{
INSERT INTO processed_messages
SELECT 'back', 'm' || i, $L - i * interval '1 hour' FROM generate_series(0, 3) i});
ok($node->poll_query_until('db2', "SELECT count(*) FROM processed_messages WHERE consumer_name = 'back'", '2'),
	'after CREATE EXTENSION, db2 is swept again (no wake-up needed)');
is(sql('db2', 'SELECT database_state FROM dedup_sweeper'), 'active', 'db2 view: active');

# Many migration tools run CREATE EXTENSION inside a longer transaction.
sql('db2', 'DROP EXTENSION dedup');
$offset = -s $node->logfile;
ok(wait_log_count($node, $offset, sweeper_start_re('db1'), 3), 'db1 swept 3 times since the DROP');
my $before_create = -s $node->logfile;
sql('db2', q{
BEGIN;
CREATE EXTENSION dedup;
SELECT pg_sleep(1.5);
COMMIT;
});
sql('db2', qq{
INSERT INTO processed_messages
SELECT 'tx', 'm' || i, $L - i * interval '1 hour' FROM generate_series(0, 3) i});
note('sweepers started in db2 while CREATE EXTENSION was not committed yet: '
	  . occurrences(log_from($node, $before_create), sweeper_start_re('db2')));
# give the launcher three passes over the databases
$offset = -s $node->logfile;
ok(wait_log_count($node, $offset, sweeper_start_re('db1'), 3), 'db1 swept 3 times since the COMMIT');
is(count_of($node, 'db2', 'tx'), '2',
	'CREATE EXTENSION inside a longer transaction: db2 is swept once it commits');
is(sql('db2', 'SELECT database_state FROM dedup_sweeper'), 'active',
	'... and tracked as active');
is(occurrences(log_from($node, $before_create), sweeper_start_re('db2')) >= 1, 1,
	'... by a sweeper the commit woke');

###############################################################################
note('7. rows locked by another transaction: skipped, not waited for');

# Claims never lock the rows a sweep deletes, but anyone may lock them with
# SELECT ... FOR UPDATE.  The sweep neither waits for such a lock nor calls it
# an error: the sweep ends 'partial' and the next one deletes the rows.
sql('db2', qq{
INSERT INTO processed_messages
SELECT 'locked', 'm' || i, $L - i * interval '1 hour' FROM generate_series(0, 3) i});
my $locker = $node->background_psql('db2');
$locker->query_safe(q{BEGIN; SELECT message_id FROM processed_messages
  WHERE consumer_name = 'locked' AND message_id = 'm3' FOR UPDATE});
$offset = -s $node->logfile;
my $locked_since = sql('db2', 'SELECT clock_timestamp()');
sql('db2', 'SELECT dedup_sweeper_wake()');
ok( $node->poll_query_until(
		'db2', qq{
SELECT last_sweep_start > '$locked_since' AND sweeper_pid IS NULL
   AND last_sweep_outcome = 'partial'
  FROM dedup_sweeper}),
	'a sweep that meets a locked row ends partial');
is(sql('db2', q{SELECT last_error_at IS NULL OR last_error_at < '} . $locked_since . q{' FROM dedup_sweeper}),
	't', '... records no error');
unlike(log_from($node, $offset), qr/ERROR|WARNING/, '... and logs none');
is(sql('db2', q{SELECT dedup_claim('meanwhile', 'k') AND NOT dedup_claim('meanwhile', 'k')}),
	't', 'claims go on meanwhile');
$locker->query_safe('COMMIT');
$locker->quit;
sweep_now('db2', 'after the lock is released');
is(counts('db2', q{consumer_name = 'locked'}), 'locked=2',
	'the next sweep deletes the rows once they are free');

$node->stop;
done_testing();
