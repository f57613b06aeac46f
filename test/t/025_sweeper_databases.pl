#
# 025_sweeper_databases.pl: which databases the retention sweeper sweeps, and
# as which role.
#
# One node with shared_preload_libraries = 'dedup', a sweep every second and
# the postmaster's DEBUG1 line for every worker it starts, so that the log
# tells which databases got a sweeper and when.  What is checked:
#
#  1. every database with the extension is swept without per-database setup;
#     a database without it is probed once and then left alone (no repeated
#     log lines), again once by a new launcher and once after it left and
#     came back into dedup.databases; dedup.databases restricts sweeping;
#  2. DROP EXTENSION stops sweeping a database quietly; CREATE EXTENSION
#     makes it swept again (the database had been marked absent, so only its
#     wake-up can do that), also when it commits long after it ran;
#  3. dedup.sweep_role: the sweep needs that role's privileges; without
#     DELETE the sweep fails, the view and the log say why, and retries back
#     off (1 s, 2 s, 4 s ...); a later successful sweep clears last_error;
#     the sweeper's ERROR names its database (CONTEXT);
#  4. consumers whose retention window is invalid (written by 1.0, which
#     did not check): the WARNING names the consumer and the database, once,
#     not at every sweep; again (for those left) once the windows change.
#
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupNode;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = DedupNode->create('databases', sweeps => 'every second');
$node->safe_psql('postgres', "CREATE DATABASE $_") for qw(db1 db2 noext);
$node->safe_psql('db1',      'CREATE EXTENSION dedup');
$node->safe_psql('db2',      'CREATE EXTENSION dedup');

# the latest claim of the consumers below; a fixed date keeps it exact
my $L = DedupNode::LATEST_CLAIM;
my $offset;

###############################################################################
note('1. several databases, one without the extension, dedup.databases');

my ($r, $o, $e) = $node->psql('noext', 'SELECT * FROM dedup_sweeper');
like(
	$e,
	qr/relation "dedup_sweeper" does not exist/,
	'noext: no extension, no view');

# db2: no wake-up, no setting: the schedule sweeps it
$node->add_expired('db2', 'z', 4);
ok( $node->poll_query_until(
		'db2',
		"SELECT count(*) FROM processed_messages WHERE consumer_name = 'z'",
		'2'),
	'db2 is swept on schedule like db1');
is( $node->safe_psql(
		'db2',
		'SELECT database_state, total_rows_deleted >= 2 FROM dedup_sweeper'),
	'active|t',
	'db2 view: active, rows deleted');

ok($node->wait_sweeper_starts(0, 'noext', 1), 'noext has been probed');
$offset = -s $node->logfile;
ok( $node->wait_sweeper_starts($offset, 'db1', 4)
	  && $node->wait_sweeper_starts($offset, 'db2', 4),
	'db1 and db2 are each swept every second');
is( $node->log_count($offset, qr/dedup.*noext/),
	0,
	'meanwhile nothing at all is logged about dedup in noext: it is not probed again'
);
is( $node->log_count(
		0,
		qr/^.*(?:LOG|WARNING|ERROR|FATAL):.*(?:dedup.*noext|noext.*dedup).*$/m
	),
	0,
	'no LOG, WARNING or ERROR line about dedup in noext in the whole log');

# dedup.databases = db1: db2 is left alone, even when woken up
$node->set_config('dedup.databases', 'db1', 'db1');
ok($node->sweep_until('db1', 'done'), 'db1: a sweep completed (settle 1)');
ok( $node->sweep_until('db1', 'done'),
	'db1: a sweep completed (settle 2: the launcher has seen dedup.databases)'
);
$offset = -s $node->logfile;
$node->add_expired('db1', 'only', 4);
$node->add_expired('db2', 'only', 4);
$node->safe_psql('db2', 'SELECT dedup_sweeper_wake()');
ok( $node->poll_query_until(
		'db1',
		"SELECT count(*) FROM processed_messages WHERE consumer_name = 'only'",
		'2'),
	'dedup.databases = db1: db1 is swept');
ok($node->wait_sweeper_starts($offset, 'db1', 3), 'db1 swept 3 more times');
is($node->count_of('db2', 'only'),
	'4', 'dedup.databases = db1: db2\'s expired claims stay');
is($node->sweeper_starts($offset, 'db2'),
	0, 'dedup.databases = db1: no sweeper started in db2');
is( $node->safe_psql(
		'db2', 'SELECT database_state IS NULL FROM dedup_sweeper'),
	't',
	'db2 view: the sweeper does not track db2');

$node->set_config('dedup.databases', undef, '');
ok( $node->poll_query_until(
		'db2',
		"SELECT count(*) FROM processed_messages WHERE consumer_name = 'only'",
		'2'),
	'dedup.databases reset: db2 is swept again');

# A new launcher probes every database once, and so does dropping a database
# from dedup.databases and adding it back; nothing else makes it look again.
ok($node->wait_sweeper_starts(0, 'noext', 2),
	'noext is probed again once dedup.databases is reset');
$node->restart;
ok($node->wait_sweeper_starts(0, 'noext', 3),
	'the new launcher probes noext');
$offset = -s $node->logfile;
ok($node->wait_sweeper_starts($offset, 'db1', 3), 'db1 swept 3 times since');
is( $node->sweeper_starts(0, 'noext'),
	3,
	'noext was probed exactly 3 times: after its CREATE DATABASE, after dedup.databases was reset, after the restart'
);

###############################################################################
note('2. DROP EXTENSION and CREATE EXTENSION');

$offset = -s $node->logfile;
$node->safe_psql('db2', 'DROP EXTENSION dedup');

# in three passes of the launcher after the DROP committed, db2 is looked at
# (at most) once; a sweeper started while it ran does not count
my $dropped = -s $node->logfile;
ok($node->wait_sweeper_starts($dropped, 'db1', 3),
	'db1 swept 3 times since the DROP');
my $after_drop = -s $node->logfile;
ok($node->wait_sweeper_starts($after_drop, 'db1', 4),
	'db1 swept 4 more times');
ok( $node->sweeper_starts($dropped, 'db2') <= 1,
	'after DROP EXTENSION, db2 had at most one sweeper (which found no extension)'
);
is($node->sweeper_starts($after_drop, 'db2'),
	0, 'then no more sweepers in db2');
unlike($node->log_since($offset),
	qr/WARNING|ERROR|FATAL/, 'no warning or error in the log since the DROP');

$node->safe_psql('db2', 'CREATE EXTENSION dedup');
$node->add_expired('db2', 'back', 4);
ok( $node->poll_query_until(
		'db2',
		"SELECT count(*) FROM processed_messages WHERE consumer_name = 'back'",
		'2'),
	'after CREATE EXTENSION, db2 is swept again (no wake-up needed)');
is($node->safe_psql('db2', 'SELECT database_state FROM dedup_sweeper'),
	'active', 'db2 view: active');

# Many migration tools run CREATE EXTENSION inside a longer transaction.
$node->safe_psql('db2', 'DROP EXTENSION dedup');
$offset = -s $node->logfile;
ok($node->wait_sweeper_starts($offset, 'db1', 3),
	'db1 swept 3 times since the DROP');
my $before_create = -s $node->logfile;

# the transaction stays open while the launcher passes twice
my $migration = $node->background_psql('db2');
$migration->query_safe('BEGIN; CREATE EXTENSION dedup');
ok( $node->wait_sweeper_starts($before_create, 'db1', 2),
	'db1 swept twice while CREATE EXTENSION in db2 was not committed');
$migration->query_safe('COMMIT');
$migration->quit;
$node->add_expired('db2', 'tx', 4);
note('sweepers started in db2 while CREATE EXTENSION was not committed yet: '
	  . $node->sweeper_starts($before_create, 'db2'));

# give the launcher three passes over the databases
$offset = -s $node->logfile;
ok( $node->wait_sweeper_starts($offset, 'db1', 3),
	'db1 swept 3 times since the COMMIT');
is( $node->count_of('db2', 'tx'),
	'2',
	'CREATE EXTENSION inside a longer transaction: db2 is swept once it commits'
);
is($node->safe_psql('db2', 'SELECT database_state FROM dedup_sweeper'),
	'active', '... and tracked as active');
is($node->sweeper_starts($before_create, 'db2') >= 1,
	1, '... by a sweeper the commit woke');

###############################################################################
note('3. dedup.sweep_role');

# "sweeper" gets what deleting expired rows needs: it reads both tables and
# deletes from processed_messages.  "nodelete" may read and update but not
# delete.
$node->safe_psql('postgres',
	'CREATE ROLE sweeper NOLOGIN; CREATE ROLE nodelete NOLOGIN');
for my $db (qw(db1 db2))
{
	$node->safe_psql(
		$db, q{
GRANT USAGE ON SCHEMA public TO sweeper, nodelete;
GRANT SELECT, DELETE ON processed_messages TO sweeper;
GRANT SELECT, UPDATE ON processed_messages TO nodelete;
GRANT SELECT ON dedup_retention TO sweeper, nodelete;
});
}
$node->set_config('dedup.sweep_role', 'sweeper', 'sweeper');
$node->add_expired('db1', 'batch-role', 10);

# Wait for the end of a sweep, whatever its outcome.  Twice: the second
# sweeper was certainly started after the postmaster had the new setting.
# The outcome is the one sweep() read with the sweep's end: the view may
# already show the next sweep (every second) running.
ok(defined $node->sweep('db1'), 'db1: a sweep ended (role sweeper, first)');
my $role_outcome = $node->sweep('db1');
note(   'sweep as a role with SELECT and DELETE: outcome '
	  . ($role_outcome // 'none')
	  . ', last error: '
	  . $node->safe_psql('db1', 'SELECT last_error FROM dedup_sweeper'));
is($role_outcome, 'done',
	'sweep_role with SELECT, DELETE: the sweep succeeds');
is($node->count_of('db1', 'batch-role'),
	'2', 'sweep_role with SELECT, DELETE: expired claims deleted');

# A role that may read (and update) but not delete.  Sweep db1 only, so that every error
# in the log comes from it.
$node->set_config('dedup.databases',  'db1',      'db1');
$node->set_config('dedup.sweep_role', 'nodelete', 'nodelete');
my $since = $node->safe_psql('db1', 'SELECT clock_timestamp()');
$offset = -s $node->logfile;
$node->add_expired('db1', 'denied', 10);
$node->safe_psql('db1', 'SELECT dedup_sweeper_wake()');
ok( $node->poll_query_until(
		'db1', qq{
SELECT last_sweep_outcome, last_error, last_error_at > '$since'
  FROM dedup_sweeper},
		"failed|permission denied for table processed_messages|t"),
	'view: last_sweep_outcome failed, last_error permission denied');
my $error_re = qr/ERROR:  permission denied for table processed_messages/;
ok($node->wait_log_count($offset, $error_re, 1),
	'the error is in the server log');
like(
	$node->log_since($offset),
	qr/\[(\d+)\] ERROR:  permission denied for table processed_messages\n[^\n]*\[\1\] CONTEXT:  dedup sweep of database "db1"\n/,
	'... naming the database');

# each retry waits twice as long as the one before: failures after 0, 1, 3
# and 7 s at the earliest (a busy machine only makes the gaps longer)
ok( $node->wait_log_count($offset, $error_re, 4),
	'back-off: the sweep failed four times');
my @error_times;
for my $line (split /\n/, $node->log_since($offset))
{
	next unless $line =~ $error_re;
	$line =~ /^\S+ (\d+):(\d+):(\d+\.\d+)/ or next;
	push @error_times, $1 * 3600 + $2 * 60 + $3;
}
my @gaps = map { $error_times[$_] - $error_times[ $_ - 1 ] } 1 .. 3;
note('gaps between the first four errors: '
	  . join(', ', map { sprintf '%.3f s', $_ } @gaps));
ok( $gaps[0] >= 0.999 && $gaps[1] >= 1.999 && $gaps[2] >= 3.999,
	'back-off: the retries waited at least 1 s, 2 s and 4 s');
is($node->count_of('db1', 'denied'),
	'10', 'the failing sweeps deleted nothing');

$node->set_config('dedup.sweep_role', undef, '');
$node->set_config('dedup.databases',  undef, '');

# the back-off may put the next sweep far away; a wake-up sweeps now
ok($node->sweep_until('db1', 'done'),
	'db1: a sweep completed (role fixed, woken up)');
is($node->count_of('db1', 'denied'),
	'2', 'fixed: the expired claims are deleted');
is( $node->safe_psql(
		'db1',
		qq{SELECT last_error IS NULL, last_error_at > '$since' FROM dedup_sweeper}
	),
	't|t',
	'view: the successful sweep clears last_error; last_error_at still tells when the last one was'
);

###############################################################################
note('4. invalid retention windows');

# 1.0 did not check windows: the update keeps them (NOT VALID), the sweeps
# leave their consumers alone
$node->safe_psql('postgres', 'CREATE DATABASE old');
$offset = -s $node->logfile;
$node->safe_psql(
	'old', qq{
BEGIN;
CREATE EXTENSION dedup VERSION '1.0';
SELECT dedup_set_retention('bad-a', '10000 years'), dedup_set_retention('bad-b', '1 mon -29 days');
INSERT INTO processed_messages (consumer_name, message_id, processed_at)
SELECT c, c || '-' || h, $L - h * interval '1 hour'
  FROM unnest(ARRAY['bad-a', 'bad-b']) AS c, generate_series(0, 3) AS h;
ALTER EXTENSION dedup UPDATE;
COMMIT});
my $bad_a =
  qr/WARNING:  claims of consumer "bad-a" are kept: its retention window (?:\@ )?10000 years is invalid/;
my $bad_b =
  qr/WARNING:  claims of consumer "bad-b" are kept: its retention window (?:\@ )?1 mon -29 days is invalid/;
ok( $node->wait_log_count($offset, $bad_a, 1)
	  && $node->wait_log_count($offset, $bad_b, 1),
	'a sweep names both consumers with an invalid window');
like(
	$node->log_since($offset),
	qr/\[(\d+)\] ${bad_a}\n[^\n]*\[\1\] HINT:  [^\n]*\n[^\n]*\[\1\] CONTEXT:  dedup sweep of database "old"\n/,
	'... and the database');
my $swept = -s $node->logfile;
ok($node->wait_sweeper_starts($swept, 'old', 3), 'old swept 3 more times');
ok($node->sweep_until('old', 'done'), '... the last one to its end');
is( $node->log_count($offset, $bad_a) . '|'
	  . $node->log_count($offset, $bad_b),
	'1|1',
	'... which said nothing more');

# one is fixed: the other one is named again, once
$node->safe_psql('old', q{SELECT dedup_set_retention('bad-a', '1 hour')});
ok( $node->wait_log_count($offset, $bad_b, 2),
	'once one is fixed, the other is named again');
$swept = -s $node->logfile;
ok($node->wait_sweeper_starts($swept, 'old', 3), 'old swept 3 more times');
ok($node->sweep_until('old', 'done'), '... the last one to its end');
is( $node->log_count($offset, $bad_a) . '|'
	  . $node->log_count($offset, $bad_b),
	'1|2',
	'... which said nothing more');
is($node->count_of('old', 'bad-b'), '4', "bad-b's claims are kept");

$node->stop;
done_testing();
