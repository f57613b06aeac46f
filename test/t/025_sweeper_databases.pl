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
#     off (1 s, 2 s, 4 s ...); a later successful sweep clears last_error.
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
$node->safe_psql('db1', 'CREATE EXTENSION dedup');
$node->safe_psql('db2', 'CREATE EXTENSION dedup');

# the latest claim of the consumers below; a fixed date keeps it exact
my $L = DedupNode::LATEST_CLAIM;
my $offset;

###############################################################################
note('1. several databases, one without the extension, dedup.databases');

my ($r, $o, $e) = $node->psql('noext', 'SELECT * FROM dedup_sweeper');
like($e, qr/relation "dedup_sweeper" does not exist/,
	'noext: no extension, no view');

# db2: no wake-up, no setting: the schedule sweeps it
$node->add_expired('db2', 'z', 4);
ok($node->poll_query_until('db2', "SELECT count(*) FROM processed_messages WHERE consumer_name = 'z'", '2'),
	'db2 is swept on schedule like db1');
is($node->safe_psql('db2', 'SELECT database_state, total_rows_deleted >= 2 FROM dedup_sweeper'),
	'active|t', 'db2 view: active, rows deleted');

ok($node->wait_sweeper_starts(0, 'noext', 1), 'noext has been probed');
$offset = -s $node->logfile;
ok($node->wait_sweeper_starts($offset, 'db1', 4)
	  && $node->wait_sweeper_starts($offset, 'db2', 4),
	'db1 and db2 are each swept every second');
is($node->log_count($offset, qr/dedup.*noext/), 0,
	'meanwhile nothing at all is logged about dedup in noext: it is not probed again');
is($node->log_count(0, qr/^.*(?:LOG|WARNING|ERROR|FATAL):.*(?:dedup.*noext|noext.*dedup).*$/m),
	0, 'no LOG, WARNING or ERROR line about dedup in noext in the whole log');

# dedup.databases = db1: db2 is left alone, even when woken up
$node->set_config('dedup.databases', 'db1', 'db1');
ok($node->sweep_until('db1', 'done'), 'db1: a sweep completed (settle 1)');
ok($node->sweep_until('db1', 'done'), 'db1: a sweep completed (settle 2: the launcher has seen dedup.databases)');
$offset = -s $node->logfile;
$node->add_expired('db1', 'only', 4);
$node->add_expired('db2', 'only', 4);
$node->safe_psql('db2', 'SELECT dedup_sweeper_wake()');
ok($node->poll_query_until('db1', "SELECT count(*) FROM processed_messages WHERE consumer_name = 'only'", '2'),
	'dedup.databases = db1: db1 is swept');
ok($node->wait_sweeper_starts($offset, 'db1', 3), 'db1 swept 3 more times');
is($node->count_of('db2', 'only'), '4', 'dedup.databases = db1: db2\'s expired claims stay');
is($node->sweeper_starts($offset, 'db2'),
	0, 'dedup.databases = db1: no sweeper started in db2');
is($node->safe_psql('db2', 'SELECT database_state IS NULL FROM dedup_sweeper'),
	't', 'db2 view: the sweeper does not track db2');

$node->set_config('dedup.databases', undef, '');
ok($node->poll_query_until('db2', "SELECT count(*) FROM processed_messages WHERE consumer_name = 'only'", '2'),
	'dedup.databases reset: db2 is swept again');

# A new launcher probes every database once, and so does dropping a database
# from dedup.databases and adding it back; nothing else makes it look again.
ok($node->wait_sweeper_starts(0, 'noext', 2),
	'noext is probed again once dedup.databases is reset');
$node->restart;
ok($node->wait_sweeper_starts(0, 'noext', 3), 'the new launcher probes noext');
$offset = -s $node->logfile;
ok($node->wait_sweeper_starts($offset, 'db1', 3), 'db1 swept 3 times since');
is($node->sweeper_starts(0, 'noext'), 3,
	'noext was probed exactly 3 times: after its CREATE DATABASE, after dedup.databases was reset, after the restart'
);

###############################################################################
note('2. DROP EXTENSION and CREATE EXTENSION');

$offset = -s $node->logfile;
$node->safe_psql('db2', 'DROP EXTENSION dedup');
# in three passes of the launcher after the DROP committed, db2 is looked at
# (at most) once; a sweeper started while it ran does not count
my $dropped = -s $node->logfile;
ok($node->wait_sweeper_starts($dropped, 'db1', 3), 'db1 swept 3 times since the DROP');
my $after_drop = -s $node->logfile;
ok($node->wait_sweeper_starts($after_drop, 'db1', 4), 'db1 swept 4 more times');
ok($node->sweeper_starts($dropped, 'db2') <= 1,
	'after DROP EXTENSION, db2 had at most one sweeper (which found no extension)');
is($node->sweeper_starts($after_drop, 'db2'),
	0, 'then no more sweepers in db2');
unlike($node->log_since($offset), qr/WARNING|ERROR|FATAL/,
	'no warning or error in the log since the DROP');

$node->safe_psql('db2', 'CREATE EXTENSION dedup');
$node->add_expired('db2', 'back', 4);
ok($node->poll_query_until('db2', "SELECT count(*) FROM processed_messages WHERE consumer_name = 'back'", '2'),
	'after CREATE EXTENSION, db2 is swept again (no wake-up needed)');
is($node->safe_psql('db2', 'SELECT database_state FROM dedup_sweeper'), 'active', 'db2 view: active');

# Many migration tools run CREATE EXTENSION inside a longer transaction.
$node->safe_psql('db2', 'DROP EXTENSION dedup');
$offset = -s $node->logfile;
ok($node->wait_sweeper_starts($offset, 'db1', 3), 'db1 swept 3 times since the DROP');
my $before_create = -s $node->logfile;
# the transaction stays open while the launcher passes twice
my $migration = $node->background_psql('db2');
$migration->query_safe('BEGIN; CREATE EXTENSION dedup');
ok($node->wait_sweeper_starts($before_create, 'db1', 2),
	'db1 swept twice while CREATE EXTENSION in db2 was not committed');
$migration->query_safe('COMMIT');
$migration->quit;
$node->add_expired('db2', 'tx', 4);
note('sweepers started in db2 while CREATE EXTENSION was not committed yet: '
	  . $node->sweeper_starts($before_create, 'db2'));
# give the launcher three passes over the databases
$offset = -s $node->logfile;
ok($node->wait_sweeper_starts($offset, 'db1', 3), 'db1 swept 3 times since the COMMIT');
is($node->count_of('db2', 'tx'), '2',
	'CREATE EXTENSION inside a longer transaction: db2 is swept once it commits');
is($node->safe_psql('db2', 'SELECT database_state FROM dedup_sweeper'), 'active',
	'... and tracked as active');
is($node->sweeper_starts($before_create, 'db2') >= 1, 1,
	'... by a sweeper the commit woke');

###############################################################################
note('3. dedup.sweep_role');

# "sweeper" gets what deleting expired rows needs: it reads both tables and
# deletes from processed_messages.  "nodelete" may read and update but not
# delete.
$node->safe_psql('postgres', 'CREATE ROLE sweeper NOLOGIN; CREATE ROLE nodelete NOLOGIN');
for my $db (qw(db1 db2))
{
	$node->safe_psql($db, q{
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
note('sweep as a role with SELECT and DELETE: outcome ' . ($role_outcome // 'none')
	  . ', last error: ' . $node->safe_psql('db1', 'SELECT last_error FROM dedup_sweeper'));
is($role_outcome, 'done', 'sweep_role with SELECT, DELETE: the sweep succeeds');
is($node->count_of('db1', 'batch-role'), '2',
	'sweep_role with SELECT, DELETE: expired claims deleted');

# A role that may read (and update) but not delete.  Sweep db1 only, so that every error
# in the log comes from it.
$node->set_config('dedup.databases', 'db1', 'db1');
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
ok($node->wait_log_count($offset, $error_re, 1), 'the error is in the server log');
# each retry waits twice as long as the one before: failures after 0, 1, 3
# and 7 s at the earliest (a busy machine only makes the gaps longer)
ok($node->wait_log_count($offset, $error_re, 4), 'back-off: the sweep failed four times');
my @error_times;
for my $line (split /\n/, $node->log_since($offset))
{
	next unless $line =~ $error_re;
	$line =~ /^\S+ (\d+):(\d+):(\d+\.\d+)/ or next;
	push @error_times, $1 * 3600 + $2 * 60 + $3;
}
my @gaps = map { $error_times[$_] - $error_times[ $_ - 1 ] } 1 .. 3;
note('gaps between the first four errors: ' . join(', ', map { sprintf '%.3f s', $_ } @gaps));
ok($gaps[0] >= 0.999 && $gaps[1] >= 1.999 && $gaps[2] >= 3.999,
	'back-off: the retries waited at least 1 s, 2 s and 4 s');
is($node->count_of('db1', 'denied'), '10', 'the failing sweeps deleted nothing');

$node->set_config('dedup.sweep_role', undef, '');
$node->set_config('dedup.databases', undef, '');
# the back-off may put the next sweep far away; a wake-up sweeps now
ok($node->sweep_until('db1', 'done'), 'db1: a sweep completed (role fixed, woken up)');
is($node->count_of('db1', 'denied'), '2', 'fixed: the expired claims are deleted');
is($node->safe_psql('db1', qq{SELECT last_error IS NULL, last_error_at > '$since' FROM dedup_sweeper}),
	't|t', 'view: the successful sweep clears last_error; last_error_at still tells when the last one was');

$node->stop;
done_testing();
