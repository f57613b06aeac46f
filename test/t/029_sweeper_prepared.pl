#
# 029_sweeper_prepared.pl: CREATE EXTENSION in a prepared transaction (as
# Citus runs it on its workers) starts the sweeping by itself.
#
# The extension script's wake-up is armed for commit, and PREPARE
# TRANSACTION drops it; COMMIT PREPARED, maybe from another session, runs
# none of dedup's code.  So PREPARE marks the database, and the launcher
# keeps probing it at each interval while a prepared transaction there may
# hold the wake-up.  One node with a sweep every second and the
# postmaster's DEBUG1 line for every worker it starts.  What is checked:
#
#  1. a database probed without dedup, then CREATE EXTENSION in a prepared
#     transaction: the launcher probes it again while it is prepared, and
#     after COMMIT PREPARED from another session its expired claims are
#     swept with no wake-up by hand;
#  2. ROLLBACK PREPARED: the probing stops;
#  3. a restart forgets the marks but not the prepared transaction: the new
#     launcher keeps probing, and COMMIT PREPARED after the restart starts
#     the sweeping too;
#  throughout, a database without dedup and without prepared transactions
#  is probed once per launcher, as before.
#
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupNode;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = DedupNode->create(
	'prepared',
	sweeps => 'every second',
	conf   => { max_prepared_transactions => 2 });
$node->safe_psql('postgres', "CREATE DATABASE $_")
  for qw(ref plain pdb rb rs);

# ref has dedup: its sweeps, one every second, are the launcher's clock
$node->safe_psql('ref', 'CREATE EXTENSION dedup');

# $n sweeps of ref started after byte $offset of the log: the launcher sweeps
# one database at a time, so any probe started before those has ended
sub passes
{
	my ($offset, $n, $name) = @_;
	ok($node->wait_sweeper_starts($offset, 'ref', $n), $name);
	return;
}

# Prepare CREATE EXTENSION dedup in $db as $gid, and wait for the launcher
# to probe $db twice afterwards: it keeps looking.
sub prepare_create_extension
{
	my ($db, $gid) = @_;
	my $offset = -s $node->logfile;
	$node->safe_psql($db,
		"BEGIN; CREATE EXTENSION dedup; PREPARE TRANSACTION '$gid'");
	is($node->safe_psql($db, 'SELECT gid FROM pg_prepared_xacts'),
		$gid, "$db: CREATE EXTENSION is prepared");
	ok($node->wait_sweeper_starts($offset, $db, 2),
		"$db: probed again, twice, while the CREATE EXTENSION is prepared");
	return;
}

# after COMMIT PREPARED from another session: swept, with no wake-up by hand
sub swept_by_itself
{
	my ($db) = @_;
	$node->add_expired($db, 'c', 4);
	ok( $node->poll_query_until(
			$db,
			q{SELECT count(*) FROM processed_messages WHERE consumer_name = 'c'},
			'2'),
		"$db: expired claims swept after COMMIT PREPARED, no dedup_sweeper_wake() by hand"
	);
	ok( $node->poll_query_until(
			$db, 'SELECT database_state FROM dedup_sweeper', 'active'),
		"$db: the view says active");
	return;
}

ok($node->wait_sweeper_starts(0, $_, 1), "$_ has been probed")
  for qw(plain pdb rb rs);
passes(-s $node->logfile, 2, 'the launcher has passed twice since');

###############################################################################
note('1. COMMIT PREPARED');

prepare_create_extension('pdb', 'pdb_ext');

# COMMIT PREPARED must run in the database of the transaction, but in
# another session: none of dedup's code runs in it
$node->safe_psql('pdb', q{COMMIT PREPARED 'pdb_ext'});
swept_by_itself('pdb');

###############################################################################
note('2. ROLLBACK PREPARED');

prepare_create_extension('rb', 'rb_ext');
$node->safe_psql('rb', q{ROLLBACK PREPARED 'rb_ext'});
my $rolled_back = -s $node->logfile;
passes($rolled_back, 3,
	'the launcher has passed 3 times since ROLLBACK PREPARED');
my $after = -s $node->logfile;
passes($after, 4, 'and 4 more times');
ok( $node->sweeper_starts($rolled_back, 'rb') <= 1,
	'after ROLLBACK PREPARED, rb was probed at most once more');
is($node->sweeper_starts($after, 'rb'),
	0, 'then not at all: the probing has stopped');
is( $node->safe_psql(
		'rb', q{SELECT count(*) FROM pg_extension WHERE extname = 'dedup'}),
	'0',
	'rb has no dedup');

###############################################################################
note('3. a restart between PREPARE and COMMIT PREPARED');

prepare_create_extension('rs', 'rs_ext');
is(join("\n", $node->log_problems(0)),
	'', 'no warning or error in the log before the restart');
my $before_restart = -s $node->logfile;
$node->restart;
my $restarted = -s $node->logfile;
is($node->safe_psql('rs', 'SELECT gid FROM pg_prepared_xacts'),
	'rs_ext', 'rs: the prepared transaction survived the restart');
ok( $node->wait_sweeper_starts($restarted, 'rs', 2),
	'rs: the new launcher probes rs, and again: the prepared transaction may hold a wake-up'
);
$node->safe_psql('rs', q{COMMIT PREPARED 'rs_ext'});
swept_by_itself('rs');

# plain, without dedup and without prepared transactions, was left alone
passes(-s $node->logfile, 2, 'the launcher has passed twice more');
is( $node->sweeper_starts(0, 'plain'),
	2,
	'plain was probed exactly twice: by the first launcher and after the restart'
);
is($node->sweeper_starts($before_restart, 'rb'),
	1, 'rb (rolled back) was probed once after the restart');

is(join("\n", $node->log_problems($restarted)),
	'', 'no warning or error in the log since the restart');

$node->stop;
done_testing();
