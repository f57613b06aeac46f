#
# 034_sweeper_slowed_database.pl: a database slowed by its owner, or by a
# long VACUUM, does not hold up the other databases' retention.
#
# One node with autovacuum off (every VACUUM of processed_messages is the
# sweeper's, or the test's), sweeps on request, the sweeper's DEBUG1 lines
# in the log, and a slow pace for the sweeper's VACUUM in postgresql.conf
# (autovacuum_vacuum_cost_delay = 100ms).  Two databases with dedup:
# 'slowed', owned by a role that is not a superuser, and 'healthy'.  What
# is checked:
#
#  1. the owner of 'slowed' sets for it (ALTER DATABASE ... SET) what would
#     make the sweeper's VACUUM crawl: vacuum_cost_page_hit and
#     vacuum_cost_page_dirty = 10000 with vacuum_cost_limit = 1 (a sleep of
#     4 x vacuum_cost_delay, 400 ms, after every page: a minute for the
#     table below), maintenance_work_mem = 1MB, an application_name, and
#     role = slowed_owner (the sweeper's current user, were it applied);
#     a superuser sets vacuum_cost_page_miss = 10000 for the bootstrap
#     superuser in that database (ALTER ROLE ... IN DATABASE: the sweeper
#     connects as that role, whose settings only a superuser may change).
#     The sweeper ignores them all: its pg_stat_activity row shows the
#     server's application_name (empty), the log names each setting it
#     ignored, and its VACUUM runs at the server's pace, within
#     dedup.sweep_max_duration (20 s; it takes about a second), so the
#     sweep is 'done' and the table vacuumed; 'healthy' is swept next;
#  2. the server's own settings make the VACUUM long (a page per 100 to
#     400 ms: tens of seconds) and dedup.sweep_max_duration is 2 s: the
#     sweeper stops its VACUUM of 'slowed' at the limit and sweeps
#     'healthy' at once; 'slowed' ends 'partial' with no error and its
#     expired rows deleted, the table not vacuumed, and the log says so
#     (LOG); the next sweep of 'slowed' deletes without vacuuming, leaving
#     the table to autovacuum (DEBUG1), until a VACUUM by someone else; then
#     the sweeper vacuums it again;
#  3. with synchronous_standby_names naming a standby that is not there,
#     sweeps still end (the sweeper commits with synchronous_commit = local,
#     as autovacuum's workers do), one database after the other.
#
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupNode;
use PostgreSQL::Test::Utils;
use Test::More;

# The test's own sessions keep their role whatever the owner of slowed sets
# for it (a client setting overrides the database's); the sweeper, a
# background worker, gets no PGOPTIONS.
$ENV{PGOPTIONS} = '-c role=none';

# (streaming allowed: synchronous replication needs max_wal_senders, section 3)
my $node = DedupNode->create(
	'slowed',
	sweeps => 'on request',
	init   => { allows_streaming => 1 },
	conf   => {
		autovacuum                   => 'off',
		log_min_messages             => 'debug1',
		autovacuum_vacuum_cost_delay => '100ms',
		'dedup.sweep_max_duration'   => '20s'
	});
$node->safe_psql(
	'postgres', q{
CREATE ROLE slowed_owner LOGIN;
CREATE DATABASE slowed OWNER slowed_owner;
CREATE DATABASE healthy});
$node->safe_psql($_, 'CREATE EXTENSION dedup') for qw(slowed healthy);
ok($node->sweep_until($_, 'done'), "$_: a first sweep completed (settle)")
  for qw(slowed healthy);

# vacuum_count of processed_messages in slowed
my $vacuum_count_sql = q{
SELECT vacuum_count FROM pg_stat_user_tables
 WHERE relid = 'processed_messages'::regclass};
sub vacuum_count { return $node->safe_psql('slowed', $vacuum_count_sql); }

###############################################################################
note(
	"1. the settings of slowed's owner, and of the role in slowed, are ignored"
);

$node->safe_psql(
	'slowed', q{
ALTER DATABASE slowed SET vacuum_cost_page_hit = 10000;
ALTER DATABASE slowed SET vacuum_cost_page_dirty = 10000;
ALTER DATABASE slowed SET vacuum_cost_limit = 1;
ALTER DATABASE slowed SET maintenance_work_mem = '1MB';
ALTER DATABASE slowed SET application_name = 'planted by the owner';
ALTER DATABASE slowed SET role = 'slowed_owner'},
	extra_params => [ '-U', 'slowed_owner' ]);
$node->safe_psql('postgres',
	'ALTER ROLE CURRENT_USER IN DATABASE slowed SET vacuum_cost_page_miss = 10000'
);
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM pg_db_role_setting s JOIN pg_database d ON d.oid = s.setdatabase
 WHERE d.datname = 'slowed'}),
	'2',
	'the settings are in place: for the database, and for the role in it');

$node->add_expired('slowed',  's', 3000);
$node->add_expired('healthy', 'h', 100);
my $count0 = vacuum_count();
my $offset = -s $node->logfile;

# '[...]': an empty application_name is still a row seen
my ($since, $seen) = $node->watch_sweep(
	'slowed', q{
SELECT '[' || application_name || ']' FROM pg_stat_activity
 WHERE backend_type = 'dedup sweeper' AND datname = 'slowed'
   AND query LIKE 'dedup sweep%'});
is($seen, '[]',
	"pg_stat_activity: the sweeper's application_name is the server's, not the database's"
);
is($node->wait_sweep_after('slowed', $since),
	'done', 'slowed: the sweep is done');
is($node->count_of('slowed', 's'),
	'2', 'slowed: the expired rows are deleted');
is( vacuum_count(),
	$count0 + 1,
	"slowed: the sweeper vacuumed the table, at the server's pace, within dedup.sweep_max_duration"
);
for my $name (
	qw(vacuum_cost_page_hit vacuum_cost_page_dirty vacuum_cost_limit
	maintenance_work_mem application_name role vacuum_cost_page_miss))
{
	ok( $node->log_count($offset,
			qr/dedup sweep: setting "$name" of the database or role ignored: the server's "[^"]*" applies/
		) == 1,
		"the log says that $name was ignored (DEBUG1)");
}
is($node->sweep('healthy'), 'done', 'healthy: then swept');
is($node->count_of('healthy', 'h'),
	'2', 'healthy: its expired rows are deleted');

###############################################################################
note('2. a VACUUM stopped at dedup.sweep_max_duration');

# a page per 100 to 400 ms, whatever it costs: a VACUUM of tens of seconds
$node->set_config('autovacuum_vacuum_cost_limit', '1',  '1');
$node->set_config('dedup.sweep_max_duration',     '2s', '2s');
$node->add_expired('slowed', 't', 3000);

# too few for a VACUUM of healthy (autovacuum_vacuum_threshold is 50): its
# sweep is deletes only, whatever the cost limit
$node->add_expired('healthy', 'i', 20);
$count0 = vacuum_count();
$offset = -s $node->logfile;
($since, $seen) = $node->watch_sweep(
	'slowed', q{
SELECT query FROM pg_stat_activity
 WHERE backend_type = 'dedup sweeper' AND datname = 'slowed'
   AND query = 'dedup sweep: vacuuming processed_messages'});
is( $seen,
	'dedup sweep: vacuuming processed_messages',
	'slowed: the sweeper vacuums');
is($node->sweep('healthy'), 'done', 'healthy: swept meanwhile');
is($node->count_of('healthy', 'i'),
	'2', 'healthy: its expired rows are deleted');
is($node->wait_sweep_after('slowed', $since),
	'partial', 'slowed: its sweep ended partial, stopped in its VACUUM');
is( $node->safe_psql(
		'slowed', q{
SELECT last_sweep_rows || '|' || (last_error IS NULL) FROM dedup_sweeper}),
	'2998|true',
	'slowed: its 2998 expired rows deleted, no error');
is($node->count_of('slowed', 't'),
	'2', 'slowed: the expired rows are deleted');
is(vacuum_count(), $count0, 'slowed: the VACUUM did not complete');
ok( $node->log_count($offset,
		qr/LOG:  dedup sweep of database "slowed" stopped its VACUUM of processed_messages at dedup.sweep_max_duration \(2 s\)/
	) == 1,
	'the log says so');

$node->add_expired('slowed', 'u', 100);
$offset = -s $node->logfile;
is($node->sweep('slowed'), 'done', 'slowed: the next sweep is done');
is($node->count_of('slowed', 'u'),
	'2', 'slowed: its expired rows are deleted');
is(vacuum_count(), $count0, 'slowed: no VACUUM');
ok( $node->log_count($offset,
		qr/dedup sweep: not vacuuming processed_messages \(\d+ dead rows, \d+ live\): left to autovacuum since the time limit stopped this sweeper's last VACUUM of it/
	) == 1,
	'the log says why (DEBUG1)');

$node->set_config('autovacuum_vacuum_cost_limit', undef, '-1');
$node->set_config('dedup.sweep_max_duration',     '20s', '20s');
$node->safe_psql('slowed', 'VACUUM processed_messages');
$node->add_expired('slowed', 'v', 3000);
is($node->sweep('slowed'),
	'done', 'slowed: after a VACUUM by hand, a sweep is done');
is(vacuum_count(), $count0 + 2, 'slowed: and the sweeper vacuums again');

###############################################################################
note('3. a synchronous standby that is not there');

# The test's own sessions do not wait for it; the sweeper, as autovacuum's
# workers, commits without waiting either (synchronous_commit at most
# local), or its first commit would wait for ever, and every database with
# it.
$ENV{PGOPTIONS} .= ' -c synchronous_commit=local';
$node->set_config('synchronous_standby_names', 'nobody', 'nobody');
$node->add_expired('slowed',  'w', 100);
$node->add_expired('healthy', 'x', 100);
is($node->sweep('slowed'),
	'done', 'slowed: the sweep is done, not waiting for the standby');
is($node->count_of('slowed', 'w'),
	'2', 'slowed: the expired rows are deleted');
is($node->sweep('healthy'), 'done', 'healthy: swept next');
is($node->count_of('healthy', 'x'),
	'2', 'healthy: the expired rows are deleted');
$node->set_config('synchronous_standby_names', undef, '');
$ENV{PGOPTIONS} = '-c role=none';

my @problems = $node->log_problems(0);
is(join("\n", @problems), '', 'no warning or error in the log');

done_testing();
