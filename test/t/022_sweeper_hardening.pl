#
# 022_sweeper_hardening.pl: what a database owner, or databases without
# dedup, must not be able to do to the retention sweeper.
#
#   1. Settings: the owner of a database (not a superuser) sets
#      default_transaction_read_only, default_transaction_isolation =
#      serializable, default_transaction_deferrable, statement_timeout,
#      idle_in_transaction_session_timeout (and transaction_timeout on
#      PG 17+) and exit_on_error for it.  Its sweeps still end 'done' while
#      a serializable transaction is open (a deferrable one would wait for
#      it), and a locked row still ends a sweep 'partial', not in a FATAL.
#   2. Slots: with dedup.max_databases = 2, databases without dedup do not
#      keep a slot, so a database with dedup created after several without
#      it is swept.  When databases with dedup outnumber the slots, the one
#      left out is named once in the log, and is swept as soon as a slot is
#      freed (DROP EXTENSION elsewhere).
#   3. A sweep that finds processed_messages locked by another session ends
#      'blocked' (not 'partial'), says so once in the log with the pid of
#      the session holding the lock, and sweeps again once it is released.
#   4. pg_stat_activity: the sweeper's xact_start and query_start are those
#      of its current batch, not of the worker's start.
#
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupNode;
use PostgreSQL::Test::Utils;
use Test::More;

# The test's own sessions keep the defaults whatever the database owner sets
# for a database below (client settings override the database's); the
# sweeper, a background worker, gets no PGOPTIONS.
$ENV{PGOPTIONS} = join(' ',
	'-c default_transaction_read_only=off',
	'-c default_transaction_deferrable=off',
	'-c statement_timeout=0',
	'-c idle_in_transaction_session_timeout=0',
	'-c exit_on_error=off');

my $node = DedupNode->create(
	'hardening',
	sweeps => 'every second',
	conf   => { 'dedup.max_databases' => 2 });
$ENV{PGOPTIONS} .= ' -c transaction_timeout=0' if $node->pg_version >= 17;

# the latest claim of the consumers below; a fixed date keeps it exact
my $L = DedupNode::LATEST_CLAIM;

###############################################################################
note('2. slots: databases without dedup do not keep one');

# With no database to sweep the launcher sleeps: a reload makes it look.
my $offset = -s $node->logfile;
$node->safe_psql('postgres', "CREATE DATABASE $_") for qw(a1 a2 a3);
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
ok( $node->wait_sweeper_starts($offset, 'a3', 1),
	'the databases without dedup have been probed');

$node->safe_psql('postgres', 'CREATE ROLE dbowner LOGIN');
$node->safe_psql('postgres', 'CREATE DATABASE owned OWNER dbowner');
$node->safe_psql('owned',    'CREATE EXTENSION dedup');
$node->add_expired('owned', 'c', 4);
ok($node->sweep_until('owned', 'done'),
	'a database with dedup created after 4 without it (2 slots) is swept');
is($node->count_of('owned', 'c'),
	'2', 'owned: its expired claims are deleted');
is($node->safe_psql('owned', 'SELECT database_state FROM dedup_sweeper'),
	'active', 'owned: tracked as active');

###############################################################################
note('1. the database owner cannot stall or break the sweep');

my %settings = (
	default_transaction_read_only       => 'on',
	default_transaction_isolation       => q{'serializable'},
	default_transaction_deferrable      => 'on',
	statement_timeout                   => q{'1ms'},
	idle_in_transaction_session_timeout => q{'1ms'},
	exit_on_error                       => 'on');
$settings{transaction_timeout} = q{'1ms'} if $node->pg_version >= 17;
$node->safe_psql(
	'owned',
	join('',
		map { "ALTER DATABASE owned SET $_ = $settings{$_};\n" }
		sort keys %settings),
	extra_params => [ '-U', 'dbowner' ]);
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM pg_db_role_setting s, unnest(s.setconfig)
 WHERE s.setdatabase = (SELECT oid FROM pg_database WHERE datname = 'owned')}
	),
	scalar(keys %settings),
	'the owner has set them for owned');

# a serializable read-write transaction: a serializable read-only deferrable
# transaction would wait for it to end before it can take its snapshot
my $serializable = $node->background_psql('postgres');
$serializable->query_safe('BEGIN ISOLATION LEVEL SERIALIZABLE; SELECT 1');

$node->add_expired('owned', 'd', 4);
ok( $node->sweep_until('owned', 'done'),
	'with the settings and a serializable transaction open, sweeps end done');
is($node->count_of('owned', 'd'), '2', '... and delete the expired claims');

# kept until the row is locked, so that no sweep deletes it before
$node->safe_psql('owned', q{SELECT dedup_keep_forever('e')});
$node->add_expired('owned', 'e', 4);
my $locker = $node->background_psql('owned');
$locker->query_safe(
	q{
BEGIN ISOLATION LEVEL READ COMMITTED;
SELECT 1 FROM processed_messages WHERE consumer_name = 'e' AND message_id = 'm3' FOR UPDATE}
);
$node->safe_psql('owned', q{SELECT dedup_reset_retention('e')});
$offset = -s $node->logfile;
ok($node->sweep_until('owned', 'partial'),
	'with exit_on_error on, a locked row still ends a sweep partial');
is($node->safe_psql('owned', 'SELECT last_error FROM dedup_sweeper'),
	'', '... with no error');
unlike($node->log_since($offset), qr/FATAL/, '... and no FATAL in the log');
$locker->query_safe('COMMIT');
$serializable->query_safe('COMMIT');
$node->safe_psql(
	'owned',
	'ALTER DATABASE owned RESET ALL',
	extra_params => [ '-U', 'dbowner' ]);

###############################################################################
note('2. slots: more databases with dedup than slots');

$node->safe_psql('postgres', 'CREATE DATABASE app2');
$node->safe_psql('app2',     'CREATE EXTENSION dedup');
ok( $node->sweep_until('app2', 'done'),
	'a second database with dedup is swept');

$offset = -s $node->logfile;
$node->safe_psql('postgres', 'CREATE DATABASE app3');
$node->safe_psql('app3',     'CREATE EXTENSION dedup');
$node->add_expired('app3', 'c', 4);
my $exhausted =
  qr/LOG:  dedup sweeper cannot track database "app3": all 2 slots are in use/;
ok( $node->wait_log_count($offset, $exhausted, 1),
	'the database left out is named in the log');
like(
	$node->log_since($offset),
	qr/HINT:  Raise dedup.max_databases/,
	'... with the setting to raise');
my $after = -s $node->logfile;
ok($node->wait_sweeper_starts($after, 'owned', 3),
	'three more passes of the launcher');
is($node->log_count($offset, $exhausted), 1, '... and it is named only once');
is( $node->safe_psql(
		'app3', 'SELECT database_state IS NULL FROM dedup_sweeper'),
	't',
	'app3 is not tracked');
is($node->count_of('app3', 'c'), '4', '... nor swept');

$node->safe_psql('app2', 'DROP EXTENSION dedup');
ok( $node->poll_query_until(
		'app3',
		q{SELECT count(*) FROM processed_messages WHERE consumer_name = 'c'},
		'2'),
	'once DROP EXTENSION in app2 frees a slot, app3 is swept');

###############################################################################
note('3. a sweep blocked by a table lock');

$offset = -s $node->logfile;
my $holder = $node->background_psql('owned');
$holder->query_safe(
	qq{
BEGIN;
LOCK TABLE processed_messages IN EXCLUSIVE MODE;
INSERT INTO processed_messages
SELECT 'f', 'm' || i, $L - i * interval '1 hour' FROM generate_series(0, 3) i}
);
my $holder_pid = $holder->query_safe('SELECT pg_backend_pid()');
ok($node->sweep_until('owned', 'blocked'),
	'a sweep that finds the table locked ends blocked');
ok($node->sweep_until('owned', 'blocked'), '... and so does the next one');
is( $node->safe_psql(
		'owned',
		'SELECT last_sweep_rows, last_error IS NULL FROM dedup_sweeper'),
	'0|t',
	'... deleting nothing, and with no error');
my $blocked_re =
  qr/LOG:  dedup sweep of database "owned" is blocked: another session holds a lock on table "processed_messages" \(pid $holder_pid\)/;
is($node->log_count($offset, $blocked_re),
	1, 'the log names the session holding the lock, once');
$holder->query_safe('COMMIT');
ok($node->sweep_until('owned', 'done'),
	'once the lock is released, the sweep ends done');
is($node->count_of('owned', 'f'), '2', '... and deletes the expired claims');
$holder->quit;

###############################################################################
note('4. the sweeper in pg_stat_activity');

# a sweep of 20000 batches: long enough to be seen in a later batch
$node->set_config('dedup.sweep_batch_size', '10', '10');
$node->safe_psql(
	'owned', qq{
INSERT INTO processed_messages
SELECT 'big', 'm' || i, $L - i * interval '1 second' FROM generate_series(0, 200000) i}
);

# watched from inside the server: a busy machine can start a polling psql
# only after the whole sweep
my (undef, $seen) = $node->watch_sweep(
	'owned', q{
SELECT 'seen' FROM pg_stat_activity
 WHERE backend_type = 'dedup sweeper' AND state = 'active'
   AND xact_start > backend_start + interval '100 ms'
   AND query_start >= xact_start
   AND query_start > clock_timestamp() - interval '10 s'}, '');
is($seen, 'seen',
	'the sweeper shows the start of its current transaction, not its own');

$node->stop;
done_testing();
