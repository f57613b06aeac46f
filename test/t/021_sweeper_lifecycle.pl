#
# 021_sweeper_lifecycle.pl: the retention sweeper's launcher, from start to
# promotion.
#
#   1. The launcher as pg_stat_activity shows it (and PostgreSQL 18's list
#      of loaded modules).
#   2. SIGTERM of the launcher: it exits, is restarted by the postmaster (no
#      crash restart) and sweeps again; SIGKILL of the launcher: crash
#      restart, committed claims survive, the launcher is back and sweeps.
#   3. Hot standby: no launcher, rows go away only by replication of the
#      primary's sweep, no claims; once promoted it sweeps by itself.
#
# Sweeps come only when asked for (the next scheduled one is an hour away).
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
	'primary',
	sweeps => 'on request',
	init   => { allows_streaming => 1 },
	conf   => {
		shared_buffers      => '32MB',
		max_connections     => 20,
		restart_after_crash => 'on',
	});
$node->safe_psql('postgres', 'CREATE EXTENSION dedup');

# the claims add_expired() leaves out of a window of an hour
my $L       = DedupNode::LATEST_CLAIM;
my $expired = "processed_at < $L - interval '1 hour'";

# ===========================================================================
# 1. the launcher in pg_stat_activity
# ===========================================================================

# 18 and later report the module's name and version: the current version,
# dedup.control's default_version
SKIP:
{
	skip 'pg_get_loaded_modules() is new in PostgreSQL 18', 1
	  if $node->pg_version < 18;
	my ($current) =
	  slurp_file("$FindBin::Bin/../../dedup.control") =~
	  /^default_version\s*=\s*'([^']+)'/m;
	is( $node->safe_psql(
			'postgres', q{
SELECT module_name || ' ' || version FROM pg_get_loaded_modules()
 WHERE file_name = 'dedup.so'}),
		"dedup $current",
		'PG 18: the loaded module reports its name and version (PG_MODULE_MAGIC_EXT)'
	);
}

# 17 and later name the wait; before, an extension's waits are all "Extension"
my $launcher_wait =
  $node->pg_version >= 17 ? 'DedupLauncherMain' : 'Extension';
ok( $node->poll_query_until(
		'postgres', qq{
SELECT count(*) = 1 FROM pg_stat_activity
 WHERE backend_type = 'dedup sweeper launcher'
   AND wait_event_type = 'Extension' AND wait_event = '$launcher_wait'
   AND datname IS NULL}
	),
	"the launcher is in pg_stat_activity, waiting ($launcher_wait), in no database"
);
is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'dedup sweeper launcher'}
	),
	'1',
	'exactly one launcher');
is( $node->safe_psql('postgres', 'SELECT sweeper_running FROM dedup_sweeper'),
	't',
	'the view says the sweeper runs');

# ===========================================================================
# 2. SIGTERM and SIGKILL of the launcher
# ===========================================================================

{
	my $offset = -s $node->logfile;
	my $old    = $node->launcher_pid;

	# a session that a crash restart would kill
	my $bystander     = $node->background_psql('postgres');
	my $bystander_pid = $bystander->query_safe('SELECT pg_backend_pid()');

	my $t0 = time;
	is($node->safe_psql('postgres', "SELECT pg_terminate_backend($old)"),
		't', 'SIGTERM sent to the launcher');
	ok( $node->poll_query_until(
			'postgres',
			"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $old"),
		'SIGTERM: the launcher exits');
	my $exit_time = time - $t0;
	cmp_ok($exit_time, '<', 10,
		'SIGTERM: the launcher exits promptly, not after its hour of sleep (within bgw_restart_time, 10 s)'
	);
	is( $node->safe_psql(
			'postgres',
			'SELECT sweeper_running, dedup_sweeper_wake() FROM dedup_sweeper'
		),
		'f|f',
		'SIGTERM: while it is gone, the view and dedup_sweeper_wake() say so'
	);

	# claims made while no launcher runs are swept by the next one
	$node->add_expired('postgres', 'c4', 302);
	ok($node->wait_launcher($old),
		'SIGTERM: the postmaster starts a new launcher');
	my $restart_time = time - $t0;
	note sprintf('launcher back after %.1f s', $restart_time);
	cmp_ok($restart_time, '>=', 9,
		'SIGTERM: the new launcher waited for bgw_restart_time (10 s)');
	cmp_ok($restart_time, '<', 30, 'SIGTERM: ... and not much longer');
	ok( $node->poll_query_until(
			'postgres',
			"SELECT count(*) = 0 FROM processed_messages WHERE consumer_name = 'c4' AND $expired"
		),
		'SIGTERM: the new launcher sweeps what expired meanwhile');

	# and it answers wake-ups
	$node->add_expired('postgres', 'c4b', 302);
	is($node->safe_psql('postgres', 'SELECT dedup_sweeper_wake()'),
		't', 'SIGTERM: dedup_sweeper_wake() reaches the new launcher');
	ok( $node->poll_query_until(
			'postgres',
			"SELECT count(*) = 0 FROM processed_messages WHERE consumer_name = 'c4b' AND $expired"
		),
		'SIGTERM: a wake-up makes the new launcher sweep');
	is( $node->safe_psql(
			'postgres',
			q{SELECT count(*) FROM processed_messages WHERE consumer_name IN ('c4', 'c4b')}
		),
		'4',
		'SIGTERM: the claims in the window are kept');

	my ($out, $failed) = $bystander->query('SELECT pg_backend_pid()');
	is("$out|$failed", "$bystander_pid|0",
		'SIGTERM: no crash restart (another session lives on)');
	$bystander->quit;
	my $log = $node->log_since($offset);
	like(
		$log,
		qr/FATAL:  terminating background worker "dedup sweeper launcher" due to administrator command/,
		'SIGTERM: the launcher logs why it exits');
	unlike(
		$log,
		qr/terminating any other active server processes/,
		'SIGTERM: the postmaster does not reinitialize');
	my $starts = () = $log =~ /dedup sweeper launcher started/g;
	is($starts, 1, 'SIGTERM: exactly one new launcher started');
}

{
	$node->safe_psql('postgres', q{SELECT dedup_claim('c4', 'before-crash')});
	my $offset = -s $node->logfile;
	my $old    = $node->launcher_pid;
	is(kill('KILL', $old), 1, 'SIGKILL sent to the launcher');
	ok( $node->wait_log_count(
			$offset,
			qr/background worker "dedup sweeper launcher" \(PID $old\) was terminated by signal 9/,
			1),
		'SIGKILL: the postmaster notices');
	ok( $node->wait_log_count(
			$offset, qr/all server processes terminated; reinitializing/, 1),
		'SIGKILL: the postmaster restarts the cluster');
	ok($node->wait_launcher($old),
		'SIGKILL: after the crash restart the launcher is back');
	is( $node->safe_psql(
			'postgres',
			q{SELECT dedup_claim('c4', 'before-crash'), dedup_claim('c4', 'after-crash')}
		),
		'f|t',
		'SIGKILL: a claim committed before the crash is still a duplicate');
	$node->add_expired('postgres', 'c4c', 302);
	$node->safe_psql('postgres', 'SELECT dedup_sweeper_wake()');
	ok( $node->poll_query_until(
			'postgres',
			"SELECT count(*) = 0 FROM processed_messages WHERE consumer_name = 'c4c' AND $expired"
		),
		'SIGKILL: the launcher sweeps after the crash restart');
	ok( $node->poll_query_until(
			'postgres',
			q{SELECT last_sweep_outcome = 'done' AND last_error IS NULL FROM dedup_sweeper}
		),
		'SIGKILL: the view shows a clean sweep');
}

# ===========================================================================
# 3. hot standby, then promotion
# ===========================================================================

$node->backup('bkp');
my $standby = DedupNode->new('standby');
$standby->init_from_backup($node, 'bkp', has_streaming => 1);
$standby->start;

$node->add_expired('postgres', 'c5', 202);
$node->wait_for_catchup($standby);
is($standby->count_of('postgres', 'c5', $expired),
	'200', 'standby: the expired claims are replicated');
is( $standby->safe_psql(
		'postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'dedup%'}
	),
	'0',
	'standby: no launcher, no sweeper');
is( $standby->safe_psql(
		'postgres',
		'SELECT sweeper_running, dedup_sweeper_wake() FROM dedup_sweeper'),
	'f|f',
	'standby: the view and dedup_sweeper_wake() say no sweeper runs');
{
	my ($ret, $out, $err) = $standby->psql_verbose('postgres',
		q{SELECT dedup_claim('c5', 'on-standby')});
	like($err, qr/ERROR:  25006: /, 'standby: dedup_claim fails with 25006');
}
is($standby->count_of('postgres', 'c5', $expired),
	'200', 'standby: the expired claims are still there after a wake-up');

# the primary's sweep reaches the standby through WAL
is($node->safe_psql('postgres', 'SELECT dedup_sweeper_wake()'),
	't', 'primary: wake-up');
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) = 0 FROM processed_messages WHERE consumer_name = 'c5' AND $expired"
	),
	'primary: the expired claims are swept');
$node->wait_for_catchup($standby);
is($standby->count_of('postgres', 'c5', $expired),
	'0', 'standby: the sweep is replicated');
is( $standby->safe_psql(
		'postgres',
		q{SELECT count(*) FROM processed_messages WHERE consumer_name = 'c5'}
	),
	'2',
	'standby: the claims in the window are replicated and kept');

# expired claims that the primary does not sweep (next sweep in an hour) are
# swept by the standby once it is promoted
$node->add_expired('postgres', 'c5b', 102);
$node->wait_for_catchup($standby);
is($standby->count_of('postgres', 'c5b', $expired),
	'100', 'standby: more expired claims are replicated');
is( $standby->safe_psql(
		'postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'dedup%'}
	),
	'0',
	'standby: still no dedup process');
unlike(
	slurp_file($standby->logfile),
	qr/dedup sweeper launcher started/,
	'standby: no launcher ever started');

$standby->promote;
ok( $standby->poll_query_until(
		'postgres',
		q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'dedup sweeper launcher'}
	),
	'promoted: a launcher starts');
ok( $standby->poll_query_until(
		'postgres', q{
SELECT last_sweep_outcome = 'done' AND total_rows_deleted = 100 AND sweeper_running
  FROM dedup_sweeper}
	),
	'promoted: it sweeps the expired claims');
is($standby->count_of('postgres', 'c5b', $expired),
	'0', 'promoted: no expired claim left');
is( $standby->safe_psql(
		'postgres',
		q{SELECT dedup_claim('c5b', 'm0'), dedup_claim('c5b', 'new')}),
	'f|t',
	'promoted: claims work, the latest claim is kept');
is( $node->count_of('postgres', 'c5b', $expired),
	'100',
	'old primary: its claims were not swept there (the promoted node swept itself)'
);

$standby->stop;
$node->stop;
done_testing();

