#
# 027_sweeper_step_aside.pl: the retention sweeper steps aside for DDL, and
# keeps the log quiet.
#
#   1. DROP DATABASE and ALTER DATABASE RENAME (no FORCE) succeed while a
#      long sweep runs in that database: the sweeper steps aside.
#   2. DROP EXTENSION during a long sweep waits for one batch at most, and
#      the database is then left alone.
#   3. A database without dedup is probed once, not at every sweep, and
#      nothing is logged over and over; while every sweep succeeds, the view
#      never reports a failed one.
#
# The postmaster logs every worker it starts (DEBUG1), so the log tells
# which databases got a sweeper and when.
#
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupNode;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = DedupNode->create(
	'aside',
	sweeps => 'on request',
	conf   => {
		shared_buffers   => '32MB',
		max_connections  => 20,
		log_min_messages => 'debug1',
	});
$node->safe_psql('postgres', 'CREATE EXTENSION dedup');

# a database known to lack dedup
$node->safe_psql('postgres', 'CREATE DATABASE plaindb');

# the claims add_expired() leaves out of a window of an hour
my $L       = DedupNode::LATEST_CLAIM;
my $expired = "processed_at < $L - interval '1 hour'";

# ===========================================================================
# 1. DROP DATABASE and ALTER DATABASE RENAME during a long sweep
# ===========================================================================

# Long sweeps: 200000 expired claims deleted 5 at a time, with a 1 ms pause
# between batches, take about 40000 transactions and at least 40 s, longer
# than DROP DATABASE waits for other sessions to leave (5 s) and than the
# lock_timeout of DROP EXTENSION below (10 s, a batch with room for a busy
# machine): if the sweeper did not step aside, those would fail.  (Without the pause, a fast machine deleted more than
# half of them before the checks below could look.)
$node->set_config('dedup.sweep_batch_size',  '5',   '5');
$node->set_config('dedup.sweep_batch_delay', '1ms', '1ms');

my $many = 200_000;

# Create a database with $many expired claims, start its sweep, and return the
# sweeper's pid once it has deleted a batch.
sub start_long_sweep
{
	my ($db) = @_;
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db,        'CREATE EXTENSION dedup');

	# the sweep that CREATE EXTENSION asked for is over
	$node->poll_query_until($db,
		q{SELECT sweeper_pid IS NULL AND last_sweep_end IS NOT NULL FROM dedup_sweeper}
	) or die "first sweep of $db did not end";
	$node->add_expired($db, 'c', $many + 2);
	is($node->safe_psql($db, 'SELECT dedup_sweeper_wake()'),
		't', "$db: dedup_sweeper_wake() says a sweeper runs");

	# as the owner of processed_messages (dedup.sweep_role is empty): here
	# the bootstrap superuser, which created the extension
	ok( $node->poll_query_until(
			'postgres', qq{
SELECT count(*) = 1 FROM pg_stat_activity
 WHERE backend_type = 'dedup sweeper' AND datname = '$db'
   AND query = format('dedup sweep as role "%s": deleting expired claims',
					  (SELECT rolname FROM pg_roles WHERE oid = 10))}
		),
		"$db: a 'dedup sweeper' connected to $db is deleting, as the table's owner"
	);
	ok( $node->poll_query_until(
			$db,
			'SELECT last_sweep_rows > 0 AND sweeper_pid IS NOT NULL FROM dedup_sweeper'
		),
		"$db: the sweeper has deleted a batch");
	return $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'dedup sweeper' AND datname = '$db'"
	);
}

{
	my $offset   = -s $node->logfile;
	my $launcher = $node->launcher_pid;
	my $sweeper  = start_long_sweep('dropme');
	my $t0       = time;
	my ($ret, $out, $err) = $node->psql_verbose(
		'postgres', qq{
SELECT count(*) FROM pg_stat_activity WHERE pid = $sweeper;
DROP DATABASE dropme;
SELECT count(*) FROM pg_stat_activity WHERE pid = $sweeper;
SELECT count(*) FROM pg_database WHERE datname = 'dropme';
});
	my $elapsed = time - $t0;
	is($ret, 0, 'DROP DATABASE during a sweep succeeds') or diag $err;
	is($out, "1\n0\n0",
		'DROP DATABASE: the sweeper ran when it started, had left when it ended'
	);
	note sprintf('DROP DATABASE took %.2f s', $elapsed);
	cmp_ok($elapsed, '<', 40,
		'DROP DATABASE: the sweeper stepped aside, not after its sweep (40 s at least)'
	);
	is($node->launcher_pid, $launcher,
		'DROP DATABASE: the launcher lives on');
	my @lines = (
		$node->log_problems($offset),
		$node->log_entries(
			$offset, qr/terminated by signal|exited with exit code [1-9]/));
	is(scalar @lines, 0, 'DROP DATABASE: no error logged')
	  or diag join("\n", @lines);
}

{
	my $sweeper = start_long_sweep('renameme');
	my ($ret, $out, $err) = $node->psql_verbose(
		'postgres', qq{
SELECT count(*) FROM pg_stat_activity WHERE pid = $sweeper;
ALTER DATABASE renameme RENAME TO renamed;
SELECT count(*) FROM pg_stat_activity WHERE pid = $sweeper;
});
	is($ret, 0, 'ALTER DATABASE RENAME during a sweep succeeds') or diag $err;
	is($out, "1\n0",
		'ALTER DATABASE RENAME: the sweeper ran when it started, had left when it ended'
	);
	is( $node->safe_psql(
			'renamed', q{
SELECT last_sweep_outcome, last_error IS NULL, last_sweep_rows BETWEEN 1 AND 99999
  FROM dedup_sweeper}
		),
		'partial|t|t',
		'ALTER DATABASE RENAME: the sweep stopped early (most rows left), without error'
	);
	cmp_ok($node->count_of('renamed', 'c', $expired),
		'>', 0, 'ALTER DATABASE RENAME: expired claims are left for later');

	# the renamed database is swept to the end at the next sweep
	$node->set_config('dedup.sweep_batch_size', '10000', '10000');
	$node->safe_psql('renamed', 'SELECT dedup_sweeper_wake()');
	ok( $node->poll_query_until(
			'renamed', q{
SELECT last_sweep_outcome = 'done' AND total_rows_deleted = 200000
  FROM dedup_sweeper}
		),
		'renamed database: the next sweep finishes the job');
	is($node->count_of('renamed', 'c', $expired),
		'0', 'renamed database: no expired claim left');
	is($node->count_of('renamed', 'c'),
		'2', 'renamed database: the claims in the window are kept');
	$node->set_config('dedup.sweep_batch_size', '5', '5');
}

# ===========================================================================
# 2. DROP EXTENSION during a long sweep
# ===========================================================================

my $dropext_offset;
{
	my $sweeper = start_long_sweep('dropext');
	$dropext_offset = -s $node->logfile;
	my $t0 = time;
	my ($ret, $out, $err) = $node->psql_verbose(
		'dropext', qq{
SELECT count(*) FROM pg_stat_activity WHERE pid = $sweeper;
SELECT count(*) > 100000 FROM processed_messages;
SET lock_timeout = '10s';
DROP EXTENSION dedup;
});
	my $elapsed = time - $t0;
	is($ret, 0, 'DROP EXTENSION during a sweep succeeds') or diag $err;
	is($out, "1\nt",
		'DROP EXTENSION: the sweeper was running, with most of the work ahead'
	);
	note sprintf('DROP EXTENSION took %.2f s', $elapsed);
	ok( $node->poll_query_until(
			'postgres',
			"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $sweeper"),
		'DROP EXTENSION: the sweeper exits');
	is( $node->safe_psql(
			'dropext',
			q{SELECT count(*) FROM pg_class WHERE relname = 'processed_messages'}
		),
		'0',
		'DROP EXTENSION: processed_messages is gone');
}

# ===========================================================================
# 3. log hygiene: sweep every second for a while; databases without dedup
#    are probed once, nothing is logged again and again
# ===========================================================================

{
	ok($node->wait_sweeper_starts(0, 'plaindb', 1),
		'plaindb has been probed');
	$node->set_config('dedup.sweep_interval', '1s', '1s');
	my $offset = -s $node->logfile;
	$node->safe_psql('postgres', 'CREATE DATABASE noext');

	# Meanwhile, read the view of postgres (swept every second, always
	# successfully) as often as possible for 3 seconds, 1000 reads and a
	# sweep at least: it must never say that a sweep failed.
	my $timeout = $PostgreSQL::Test::Utils::timeout_default;
	my $samples = $node->safe_psql(
		'postgres', qq{
SET log_statement = none;
CREATE TEMP TABLE samples (failed bigint, total bigint, first_start timestamptz, last_start timestamptz);
DO \$\$
DECLARE
	t_end timestamptz := clock_timestamp() + interval '3 s';
	deadline timestamptz := clock_timestamp() + interval '$timeout s';
	r record;
	n_failed bigint := 0;
	n_total bigint := 0;
	first_start timestamptz;
BEGIN
	SELECT last_sweep_outcome, last_sweep_start INTO r FROM dedup_sweeper;
	WHILE (clock_timestamp() < t_end OR n_total <= 1000
		   OR r.last_sweep_start IS NOT DISTINCT FROM first_start)
		  AND clock_timestamp() < deadline LOOP
		SELECT last_sweep_outcome, last_sweep_start INTO r FROM dedup_sweeper;
		first_start := coalesce(first_start, r.last_sweep_start);
		n_total := n_total + 1;
		IF r.last_sweep_outcome = 'failed' THEN
			n_failed := n_failed + 1;
		END IF;
	END LOOP;
	INSERT INTO samples VALUES (n_failed, n_total, first_start, r.last_sweep_start);
END
\$\$;
SELECT failed, total > 1000, last_start > first_start, total,
       (SELECT last_error IS NULL FROM dedup_sweeper) FROM samples;
});
	my ($failed, $many_samples, $swept, $total, $no_error) = split /\|/,
	  $samples;
	is("$many_samples|$swept|$no_error", 't|t|t',
		'view sampling: many reads, during which postgres was swept without error'
	);
	is($failed, 0,
		"view sampling: last_sweep_outcome never says 'failed' while every sweep succeeds"
	) or diag "$failed of $total reads said 'failed'";
	my $start =
	  'starting background worker process "dedup sweeper for database';
	ok( $node->wait_sweeper_starts($offset, 'postgres', 8),
		'dedup.sweep_interval = 1s: postgres is swept again and again');
	my $log     = $node->log_since($offset);
	my $noext   = () = $log =~ /\Q$start\E noext"/g;
	my $dropext = () = $log =~ /\Q$start\E dropext"/g;
	my $plaindb = () = $log =~ /\Q$start\E plaindb"/g;
	is($noext, 1, 'a new database without dedup is probed exactly once');

	# once, unless the sweeper that DROP EXTENSION interrupted already found
	# the extension gone
	cmp_ok($dropext, '<=', 1,
		'the database whose extension was dropped is probed at most once more, then left alone'
	);
	is($plaindb, 0, 'a database known to lack dedup is not probed again');
	my @bad = $node->log_problems($offset);
	is(scalar @bad, 0,
		'no warning or error logged while sweeping every second')
	  or diag join("\n", @bad);
	my @about_noext = grep { !/^[^\n]*?\[\d+\] (?:\S+ )?DEBUG:  / }
	  $node->log_entries($offset, qr/noext/);
	is(scalar @about_noext, 0, 'nothing else is logged about noext')
	  or diag join("\n", @about_noext);
	@bad = $node->log_problems($dropext_offset);
	is(scalar @bad, 0, 'no error logged since DROP EXTENSION')
	  or diag join("\n", @bad);
}

$node->stop;
done_testing();
