#
# 026_sweeper_settings.pl: dedup without preloading, in binary-upgrade mode,
# and its settings, which only the server's configuration may set.
#
#   1. Not preloaded: CREATE EXTENSION warns once, claims work, the view says
#      no sweeper runs, and reading the view logs nothing.
#   2. Binary-upgrade mode (postgres -b): the launcher is not even
#      registered, although the library is preloaded.
#   3. The dedup.* parameters (dedup.retention, dedup.sweep_busy_share,
#      dedup.sweep_vacuum_threshold) cannot be set by SET, ALTER ROLE or
#      ALTER DATABASE, bad values are refused, and the "dedup" prefix is
#      reserved.
#
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupNode;
use PostgreSQL::Test::Utils;
use Test::More;

# ===========================================================================
# 1. not preloaded
# ===========================================================================

my $node = DedupNode->create('plain', preload => 0);

{
	my ($ret, $out, $err) = $node->psql('postgres', 'CREATE EXTENSION dedup');
	is($ret, 0, 'not preloaded: CREATE EXTENSION succeeds');
	my $warnings = () = $err =~ /WARNING:/g;
	is($warnings, 1,
		'not preloaded: CREATE EXTENSION emits exactly one WARNING');
	like(
		$err,
		qr/WARNING:  dedup is not in shared_preload_libraries: processed_messages will not be swept/,
		'not preloaded: the WARNING says that nothing will be swept');
	unlike($err, qr/ERROR/, 'not preloaded: no ERROR');
}

is( $node->safe_psql(
		'postgres', q{SELECT dedup_claim('c', 'm1'), dedup_claim('c', 'm1')}),
	't|f',
	'not preloaded: claims work');
is( $node->safe_psql(
		'postgres',
		q{SELECT sweeper_running, database_state IS NULL, sweeper_pid IS NULL, next_sweep IS NULL FROM dedup_sweeper}
	),
	'f|t|t|t',
	'not preloaded: the view says no sweeper runs');
is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'dedup%'}
	),
	'0',
	'not preloaded: no dedup process');

{
	my $offset = -s $node->logfile;

	# many reads in one session, and one read in each of many sessions
	$node->safe_psql('postgres',
		join('', map { "SELECT * FROM dedup_sweeper;\n" } 1 .. 100));
	$node->safe_psql('postgres', 'SELECT sweeper_running FROM dedup_sweeper')
	  for 1 .. 10;

	# a marker, so that the server has written everything before it
	$node->safe_psql('postgres', q{SELECT 'view-reads-done'});
	$node->wait_log_count($offset, qr/view-reads-done/, 1);
	my @lines = $node->log_entries($offset, qr/dedup|WARNING|ERROR/);
	is(scalar @lines,
		0, 'not preloaded: reading the view 110 times logs nothing')
	  or diag join("\n", @lines);
}

# ===========================================================================
# 2. binary-upgrade mode, on the same node now preloading dedup
# ===========================================================================

$node->stop;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'dedup'\nlog_min_messages = debug1\ndedup.retention = '1h'"
);

{
	my $offset = -s $node->logfile;

	# PostgreSQL::Test::Cluster::start has no way to pass -b
	my $ret = system_log(
		'pg_ctl', '-w',           '-D', $node->data_dir,
		'-l',     $node->logfile, '-o', '-b',
		'start');
	is($ret, 0, 'binary upgrade: the server starts with -b');
	$node->_update_pid(1);

	is($node->safe_psql('postgres', 'SHOW dedup.max_databases'),
		'64',
		'binary upgrade: dedup is preloaded (dedup.max_databases exists)');
	my $log = slurp_file($node->logfile, $offset);

	# Where the logical replication launcher is registered in this mode, it
	# is started at the same time as ours would be (both are
	# BgWorkerStart_RecoveryFinished): once it runs, ours would run too.
	if ($log =~
		/registering background worker "logical replication launcher"/)
	{
		ok( $node->poll_query_until(
				'postgres',
				q{SELECT count(*) > 0 FROM pg_stat_activity WHERE backend_type = 'logical replication launcher'}
			),
			'binary upgrade: the logical replication launcher has started');
	}
	is( $node->safe_psql(
			'postgres',
			q{SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'dedup%'}
		),
		'0',
		'binary upgrade: no dedup process runs');

	# the registration is logged at DEBUG1 (see the control below)
	unlike(
		$log,
		qr/registering background worker "dedup sweeper launcher"/,
		'binary upgrade: the dedup launcher is not registered');
	is( $node->safe_psql(
			'postgres', 'SELECT sweeper_running FROM dedup_sweeper'),
		'f',
		'binary upgrade: the view says no sweeper runs');
	$node->stop;

	# the control: the same configuration without -b does start a launcher
	$offset = -s $node->logfile;
	$node->start;
	ok( $node->poll_query_until(
			'postgres',
			q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'dedup sweeper launcher'}
		),
		'normal start with the same configuration: the launcher runs');
	like(
		slurp_file($node->logfile, $offset),
		qr/registering background worker "dedup sweeper launcher"/,
		'normal start: the launcher is registered');
	$node->stop;
}

$node->start;

# ===========================================================================
# 3. the dedup.* parameters are protected
# ===========================================================================

$node->safe_psql(
	'postgres', q{
CREATE ROLE alice LOGIN;
CREATE DATABASE alicedb OWNER alice;
});
my $alice = $node->connstr('alicedb') . ' user=alice';
my $cannot =
  qr/ERROR:  (?:55P02|42501): (?:parameter "dedup\.retention" cannot be changed now|permission denied)/;

$node->psql_fails_like(
	'alicedb', q{SET dedup.retention = '1s'},
	$cannot,
	'non-superuser SET',
	connstr => $alice);
$node->psql_fails_like(
	'alicedb', q{SELECT set_config('dedup.retention', '1s', false)},
	$cannot,
	'non-superuser set_config()',
	connstr => $alice);
$node->psql_fails_like(
	'alicedb', q{ALTER ROLE alice SET dedup.retention = '1s'},
	$cannot,
	'non-superuser ALTER ROLE self SET',
	connstr => $alice);
$node->psql_fails_like(
	'alicedb', q{ALTER DATABASE alicedb SET dedup.retention = '1s'},
	$cannot,
	'database owner ALTER DATABASE SET',
	connstr => $alice);
$node->psql_fails_like(
	'alicedb',
	q{ALTER SYSTEM SET dedup.retention = '1s'},
	qr/ERROR:  42501: (?:permission denied to set parameter "dedup\.retention"|must be superuser)/,
	'non-superuser ALTER SYSTEM',
	connstr => $alice);
$node->psql_fails_like(
	'postgres', q{SET dedup.retention = '1s'},
	$cannot,    'even a superuser cannot SET it');
$node->psql_fails_like(
	'postgres', q{ALTER DATABASE alicedb SET dedup.retention = '1s'},
	$cannot,    'even a superuser cannot ALTER DATABASE SET it');
$node->connect_fails(
	"$alice options='-c dedup.retention=1s'",
	'non-superuser connection option',
	expected_stderr => qr/parameter "dedup\.retention" cannot be changed now/
);
is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FROM pg_db_role_setting s, unnest(s.setconfig) c WHERE c LIKE 'dedup.%'}
	),
	'0',
	'no per-role or per-database dedup setting was stored');
is($node->safe_psql('alicedb', 'SHOW dedup.retention', connstr => $alice),
	'1h', 'dedup.retention is unchanged for alice');

# the same for dedup.sweep_busy_share: a role that could lower it could
# stall the sweep, one that could raise it could make it take a core; and
# for dedup.sweep_vacuum_threshold: one that could set it could turn the
# sweeper's VACUUM off, or make it vacuum after every sweep
for my $setting (
	[ 'sweep_busy_share',       '100', '1',     '10' ],
	[ 'sweep_vacuum_threshold', '0',   '0.001', '0.2' ])
{
	my ($name, $value, $other, $default) = @$setting;
	my $cannot =
	  qr/ERROR:  (?:55P02|42501): (?:parameter "dedup\.$name" cannot be changed now|permission denied)/;
	for my $sql (
		qq{SET dedup.$name = $value},
		qq{SELECT set_config('dedup.$name', '$other', false)},
		qq{ALTER ROLE alice SET dedup.$name = $value},
		qq{ALTER DATABASE alicedb SET dedup.$name = $value})
	{
		$node->psql_fails_like('alicedb', $sql, $cannot,
			"alice: $sql", connstr => $alice);
	}
	$node->psql_fails_like(
		'alicedb',
		qq{ALTER SYSTEM SET dedup.$name = $value},
		qr/ERROR:  42501: (?:permission denied to set parameter "dedup\.$name"|must be superuser)/,
		"alice: ALTER SYSTEM SET dedup.$name",
		connstr => $alice);
	$node->connect_fails(
		"$alice options='-c dedup.$name=$value'",
		"alice: dedup.$name as a connection option",
		expected_stderr => qr/parameter "dedup\.$name" cannot be changed now/
	);
	is($node->safe_psql('alicedb', "SHOW dedup.$name", connstr => $alice),
		$default, "dedup.$name is unchanged for alice");
}

# bad values, even from a superuser
$node->psql_fails_like(
	'postgres',
	q{ALTER SYSTEM SET dedup.retention = '-5s'},
	qr/ERROR:  22023: -5 s is outside the valid range for parameter "dedup\.retention" \(-1( s)? \.\. 2147483647( s)?\)/,
	'ALTER SYSTEM dedup.retention = -5s');
$node->psql_fails_like(
	'postgres',
	q{ALTER SYSTEM SET dedup.retention = 'abc'},
	qr/ERROR:  22023: invalid value for parameter "dedup\.retention": "abc"/,
	'ALTER SYSTEM dedup.retention = abc');
$node->psql_fails_like(
	'postgres',
	q{ALTER SYSTEM SET dedup.sweep_batch_size = 0},
	qr/ERROR:  22023: 0 is outside the valid range for parameter "dedup\.sweep_batch_size" \(1 \.\. 1000000\)/,
	'ALTER SYSTEM dedup.sweep_batch_size = 0');
$node->psql_fails_like(
	'postgres',
	q{ALTER SYSTEM SET dedup.sweep_interval = 0},
	qr/ERROR:  22023: 0 s? ?is outside the valid range for parameter "dedup\.sweep_interval"/,
	'ALTER SYSTEM dedup.sweep_interval = 0');
$node->psql_fails_like(
	'postgres',
	q{ALTER SYSTEM SET dedup.sweep_busy_share = 0},
	qr/ERROR:  22023: 0 is outside the valid range for parameter "dedup\.sweep_busy_share" \(1 \.\. 100\)/,
	'ALTER SYSTEM dedup.sweep_busy_share = 0');
$node->psql_fails_like(
	'postgres',
	q{ALTER SYSTEM SET dedup.sweep_busy_share = 101},
	qr/ERROR:  22023: 101 is outside the valid range for parameter "dedup\.sweep_busy_share" \(1 \.\. 100\)/,
	'ALTER SYSTEM dedup.sweep_busy_share = 101');
$node->psql_fails_like(
	'postgres',
	q{ALTER SYSTEM SET dedup.sweep_vacuum_threshold = -0.1},
	qr/ERROR:  22023: -0\.1 is outside the valid range for parameter "dedup\.sweep_vacuum_threshold" \(0 \.\. 100\)/,
	'ALTER SYSTEM dedup.sweep_vacuum_threshold = -0.1');
my $err = $node->psql_fails_like(
	'postgres',
	q{ALTER SYSTEM SET dedup.databases = 'a,,b'},
	qr/ERROR:  22023: invalid value for parameter "dedup\.databases": "a,,b"/,
	'ALTER SYSTEM dedup.databases = a,,b');
like(
	$err,
	qr/DETAIL:  List syntax is invalid\./,
	'ALTER SYSTEM dedup.databases = a,,b: the detail says why');
unlike(slurp_file($node->data_dir . '/postgresql.auto.conf'),
	qr/dedup/, 'nothing was written to postgresql.auto.conf');

# the prefix is reserved: no placeholder can be made for a misspelt name
my $reserved =
  qr/ERROR:  42602: invalid configuration parameter name "dedup\.nonexistent"\nDETAIL:  "dedup" is a reserved prefix\./;
$node->psql_fails_like(
	'alicedb', 'SET dedup.nonexistent = 1',
	$reserved,
	'non-superuser SET dedup.nonexistent',
	connstr => $alice);
$node->psql_fails_like(
	'postgres', 'SET dedup.nonexistent = 1',
	$reserved,  'superuser SET dedup.nonexistent');
$node->psql_fails_like(
	'postgres',
	'ALTER ROLE alice SET dedup.nonexistent = 1',
	qr/ERROR:  42602: invalid configuration parameter name "dedup\.nonexistent"/,
	'ALTER ROLE SET dedup.nonexistent');

$node->stop;
done_testing();
