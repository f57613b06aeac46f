#
# 023_sweeper_blocked.pl: what one database, or one failing sweep, must not
# do to retention.
#
#   1. dedup.sweep_role is really the role the sweep runs as: a slow sweep
#      shows it in pg_stat_activity ('dedup sweep as role "ops": ...'),
#      although the sweeper's session user is the bootstrap superuser.
#   2. A wake-up does not defeat the back-off: with a sweep failing for
#      lack of privileges, a run of dedup_sweeper_wake() calls (each one
#      seen by the launcher, on until a failed sweep is logged) adds no
#      failed sweep and does not bring the next one forward, nor cancel
#      it: the retry the back-off scheduled comes, and no other; a reload
#      retries at once, and once the role is fixed the database is swept.
#   3. One database cannot hold up the others: a non-superuser with
#      CREATEDB that owns dba holds ALTER DATABASE dba RENAME open in a
#      transaction, so dba's sweeper cannot connect.  The launcher stops
#      that sweeper, goes on, and dbb is still swept; the log names the
#      session holding the lock, once however often the sweep is blocked;
#      after ROLLBACK, dba's view says why its sweeps were blocked, and it
#      is swept again.
#
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupNode;
use DedupProcess qw(wait_until);
use PostgreSQL::Test::Utils;
use Test::More;

# no autovacuum: a worker of it connecting to dba while its lock is held
# (part 3) would wait for that lock as long as the sweepers' lock waits are
# watched, and never be stopped
my $node = DedupNode->create(
	'blocked',
	sweeps => 'every second',
	conf   => { autovacuum => 'off' });

# the latest claim of the consumers below; a fixed date keeps it exact
my $L = DedupNode::LATEST_CLAIM;

$node->safe_psql('postgres', 'CREATE ROLE dbo LOGIN CREATEDB');
$node->safe_psql('postgres',
	'CREATE ROLE ops NOLOGIN; CREATE ROLE nopriv NOLOGIN');
for my $db (qw(dba dbb))
{
	$node->safe_psql('postgres', "CREATE DATABASE $db OWNER dbo");
	$node->safe_psql(
		$db, q{
CREATE EXTENSION dedup;
GRANT USAGE ON SCHEMA public TO ops;
GRANT SELECT, DELETE ON processed_messages TO ops;
GRANT SELECT ON dedup_retention TO ops;
});
}

###############################################################################
note('1. the sweep runs as dedup.sweep_role');

$node->set_config('dedup.sweep_role',        'ops',  'ops');
$node->set_config('dedup.sweep_batch_size',  '10',   '10');
$node->set_config('dedup.sweep_batch_delay', '10ms', '10ms');

# 640 batches with a pause between them: a sweep of several seconds,
# watched from inside the server
my (undef, $bootstrap) = $node->watch_sweep(
	'dbb', q{
SELECT (usesysid = 10)::text FROM pg_stat_activity
 WHERE backend_type = 'dedup sweeper' AND datname = 'dbb'
   AND query = 'dedup sweep as role "ops": deleting expired claims'}, qq{
INSERT INTO processed_messages
SELECT 'slow', 'm' || i, $L - i * interval '1 second' FROM generate_series(0, 10000) i}
);
isnt($bootstrap, '',
	'pg_stat_activity shows the sweeper deleting as role "ops"');
is($bootstrap, 'true',
	'... while its session user is the bootstrap superuser');
ok( $node->poll_query_until(
		'dbb',
		q{SELECT count(*) FROM processed_messages WHERE consumer_name = 'slow'},
		'3601'),
	'the slow sweep, as "ops", deletes every expired claim');

# (polled: the next sweep may have begun already)
ok( $node->poll_query_until(
		'dbb',
		q{SELECT last_sweep_outcome = 'done' AND last_error IS NULL FROM dedup_sweeper}
	),
	'... and ends done');
$node->set_config('dedup.sweep_batch_delay', undef, '0');
$node->set_config('dedup.sweep_batch_size',  undef, '1000');

###############################################################################
note('2. a wake-up does not shorten the back-off of a failing database');

# only dbb, so that every error in the log is of its sweeps
$node->set_config('dedup.databases',  'dbb',    'dbb');
$node->set_config('dedup.sweep_role', 'nopriv', 'nopriv');
my $offset = -s $node->logfile;
$node->add_expired('dbb', 'denied', 4);
$node->safe_psql('dbb', 'SELECT dedup_sweeper_wake()');
my $error_re = qr/ERROR:  permission denied for table processed_messages/;

# failures after 0, 1, 3 and 7 s: the next one is 8 s away
ok($node->wait_log_count($offset, $error_re, 4), 'four failed sweeps');
is( $node->safe_psql(
		'dbb', 'SELECT last_sweep_outcome, last_error FROM dedup_sweeper'),
	'failed|permission denied for table processed_messages',
	'a role without privileges: the sweep fails, saying why');
ok( $node->poll_query_until(
		'dbb', 'SELECT sweeper_pid IS NULL FROM dedup_sweeper'),
	'no sweep is running');

my $before = $node->safe_psql('dbb', 'SELECT next_sweep FROM dedup_sweeper');
my $wake_offset = -s $node->logfile;
my $launcher_pass =
  q{SELECT query_start FROM pg_stat_activity WHERE backend_type = 'dedup sweeper launcher'};

# the failed sweeps logged since the wake-ups began, by time
my $woken_errors = sub {
	return map { /^(\S+ \S+ \S+) \[/ ? $1 : () }
	  grep { $_ =~ $error_re } split /\n/, $node->log_since($wake_offset);
};

# At least 10 wake-ups, and on until a failed sweep is logged: the retry
# the back-off scheduled at $before, which a wake-up must neither bring
# forward nor cancel
my $wakes   = 0;
my $retried = wait_until(
	sub {
		# wait until the launcher has made a pass, and is done with it
		my $pass = $node->safe_psql('postgres', $launcher_pass);
		$node->safe_psql('dbb', 'SELECT dedup_sweeper_wake()');
		$wakes++;
		$node->poll_query_until(
			'postgres', qq{
SELECT query_start > '$pass' AND state = 'idle' FROM pg_stat_activity
 WHERE backend_type = 'dedup sweeper launcher'}
		) or die "the launcher did not answer wake-up $wakes";
		return $wakes >= 10 && $woken_errors->() > 0;
	});
my $after = $node->safe_psql('dbb', q{SELECT next_sweep FROM dedup_sweeper});
my @woken_errors = $woken_errors->();
note(
	scalar(@woken_errors)
	  . " failed sweeps during $wakes wake-ups, the first allowed at $before"
);
ok($retried,
	scalar(@woken_errors)
	  . " failed sweep(s) during $wakes wake-ups answered by the launcher: the retry the back-off scheduled came"
);

# However long the wake-ups took, a failed sweep may only have come when the
# back-off allowed it: at the next sweep scheduled before them, and then 16 s
# later at the earliest
is( $node->safe_psql(
		'dbb', qq{
SELECT count(*)
  FROM (SELECT t, lag(t) OVER (ORDER BY t) AS previous
		  FROM unnest('{@{[ join(',', map { qq{"$_"} } @woken_errors) ]}}'::timestamptz[]) t) s
 WHERE t < '$before' OR t - previous < interval '16 s'}),
	'0',
	'... and no more than the back-off allows: none before it, none less than 16 s after another'
);
is( $node->safe_psql(
		'dbb', qq{SELECT '$after'::timestamptz >= '$before'::timestamptz}),
	't',
	'... and the next sweep is not brought forward');

# a reload retries at once: once the role is fixed, the claims go
$node->set_config('dedup.sweep_role', 'ops', 'ops');
ok( $node->poll_query_until(
		'dbb',
		q{SELECT count(*) FROM processed_messages WHERE consumer_name = 'denied'},
		'2'),
	'after a reload that fixes the role, the database is swept');
$node->set_config('dedup.databases', undef, '');
ok($node->sweep_until('dbb', 'done'),
	'a wake-up of a healthy database sweeps at once');

###############################################################################
note('3. one database cannot hold up the others');

ok($node->sweep_until('dba', 'done'), 'dba is swept');
my $dba_oid = $node->safe_psql('postgres',
	q{SELECT oid FROM pg_database WHERE datname = 'dba'});
$offset = -s $node->logfile;

# dbo, not a superuser, owns dba and may rename it (CREATEDB)
my $holder =
  $node->background_psql('postgres', extra_params => [ '-U', 'dbo' ]);
my $holder_pid = $holder->query_safe('SELECT pg_backend_pid()');
$holder->query_safe('BEGIN; ALTER DATABASE dba RENAME TO dbx');

# a sweeper of dba waits for the database lock
ok( $node->poll_query_until(
		'postgres', qq{
SELECT count(*) > 0 FROM pg_locks
 WHERE locktype = 'object' AND classid = 'pg_database'::regclass
   AND objid = $dba_oid AND NOT granted}),
	'a sweeper of dba waits for the lock on dba');

# claims expired after that: only a sweep that comes later deletes them
$node->add_expired('dbb', 'later', 4);
ok( $node->poll_query_until(
		'dbb',
		q{SELECT count(*) FROM processed_messages WHERE consumer_name = 'later'},
		'2'),
	'dbb is still swept');

my $blocked_re =
  qr/LOG:  dedup sweep of database "dba" is blocked: another session \(pid $holder_pid\) holds a lock on database "dba"/;
ok( $node->wait_log_count($offset, $blocked_re, 1),
	'the log names the session holding the lock on dba');

# the sweepers of dba since the lock was taken, but perhaps the first
ok( $node->wait_sweeper_starts($offset, 'dba', 4),
	'three more sweepers of dba have been started');
ok( $node->wait_log_count(
		$offset,
		qr/FATAL:  terminating background worker "dedup sweeper" due to administrator command/,
		3),
	'... and stopped');
is($node->log_count($offset, $blocked_re), 1, '... and the log said so once');
like(
	$node->log_since($offset),
	qr/DETAIL:  The sweeper could not connect, and was stopped; it tries again after dedup.sweep_interval\./,
	'... saying what happens next');

# end the transaction between two sweepers of dba, so that the view is
# likely to show the last one blocked: the next comes an interval later
ok( $node->poll_query_until(
		'postgres', qq{
SELECT count(*) = 0 FROM pg_locks
 WHERE locktype = 'object' AND classid = 'pg_database'::regclass
   AND objid = $dba_oid AND NOT granted}),
	'the last sweeper of dba has been stopped');
$holder->query_safe('ROLLBACK');
$holder->quit;

# a sweep that has ended done since clears last_error, and keeps its time.
# One has if it is the last outcome, or, while another runs, if the last
# sweep ended after the last error (a blocked sweeper records an error, not
# an end; a sweeper's end is recorded before the next one is launched)
my ($outcome, $error, $error_at, $done_since) = split /\|/, $node->safe_psql(
	'dba',
	q{SELECT last_sweep_outcome, last_error, last_error_at IS NOT NULL,
			 last_sweep_outcome = 'done' OR coalesce(last_sweep_end > last_error_at, false)
		FROM dedup_sweeper});
note("dba right after ROLLBACK: $outcome, a sweep done since: $done_since");
ok($outcome =~ /^(?:blocked|running|done)$/,
	"dba: the last sweep was blocked, or one has begun since ($outcome)");
is( $error,
	$done_since eq 't'
	? ''
	: qq{could not connect: another session (pid $holder_pid) holds a lock on database "dba"},
	"dba: last_error names the session holding the lock, unless a sweep is done since ($outcome)"
);
is($error_at, 't', 'dba: last_error_at says when the last error was');
$node->add_expired('dba', 'after', 4);
ok( $node->poll_query_until(
		'dba',
		q{SELECT count(*) FROM processed_messages WHERE consumer_name = 'after'},
		'2'),
	'dba is swept again once the lock is released');
ok( $node->poll_query_until(
		'dba',
		q{SELECT last_sweep_outcome = 'done' AND sweeper_pid IS NULL FROM dedup_sweeper}
	),
	'... and its sweeps end done');

$node->stop;
done_testing();
