#
# 021_sweeper_lifecycle.pl: the retention sweeper's life cycle.
#
#   1. Not preloaded: CREATE EXTENSION warns once, claims work, the view says
#      no sweeper runs, and reading the view logs nothing.
#   2. The dedup.* parameters cannot be set by SET, ALTER ROLE or ALTER
#      DATABASE, bad values are refused, and the "dedup" prefix is reserved.
#   3. The launcher and the sweepers as pg_stat_activity shows them.
#   4. SIGTERM of the launcher: it exits, is restarted by the postmaster (no
#      crash restart) and sweeps again; SIGKILL of the launcher: crash
#      restart, committed claims survive, the launcher is back and sweeps.
#   5. Hot standby: no launcher, rows go away only by replication of the
#      primary's sweep, no claims; once promoted it sweeps by itself.
#   6. DROP DATABASE and ALTER DATABASE RENAME (no FORCE) succeed while a
#      long sweep runs in that database: the sweeper steps aside.
#   7. A database without dedup is probed once, not at every sweep, and
#      nothing is logged over and over; while every sweep succeeds, the view
#      never reports a failed one.
#   8. DROP EXTENSION during a long sweep waits for one batch at most, and
#      the database is then left alone.
#   9. Binary-upgrade mode (postgres -b): the launcher is not even
#      registered, although the library is preloaded.
#
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

# psql with SQLSTATEs in the messages; returns ($ret, $stdout, $stderr)
sub psql_verbose
{
	my ($node, $db, $sql, %params) = @_;
	return $node->psql($db, "\\set VERBOSITY verbose\n$sql", %params);
}

# the statement must fail with one of the SQLSTATEs and a matching message
sub fails_like
{
	my ($node, $db, $sql, $re, $name, %params) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my ($ret, $out, $err) = psql_verbose($node, $db, $sql, %params);
	isnt($ret, 0, "$name: fails");
	like($err, $re, "$name: error message");
	return $err;
}

# The log entries (a line and its continuation lines) written since
# $offset that match $re, except the echo of our own statements
# (log_statement = all) and the STATEMENT lines that follow errors.
sub log_lines
{
	my ($node, $offset, $re) = @_;
	my @entries;
	for my $line (split /\n/, slurp_file($node->logfile, $offset))
	{
		if ($line =~ /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d/ || !@entries)
		{
			push @entries, $line;
		}
		else
		{
			$entries[-1] .= "\n$line";
		}
	}
	return grep { /$re/ }
	  grep { !/^[^\n]*?\[\d+\] (?:\S+ )?(?:LOG:  statement: |STATEMENT:  )/ }
	  @entries;
}

# the entries of log_lines() whose severity is WARNING or worse
sub log_problems
{
	my ($node, $offset) = @_;
	return log_lines($node, $offset,
		qr/^[^\n]*?\[\d+\] (?:\S+ )?(?:WARNING|ERROR|FATAL|PANIC):/);
}

# wait until the log since $offset has at least $n lines matching $re
sub wait_for_log_count
{
	my ($node, $offset, $re, $n) = @_;
	my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
	while (time < $deadline)
	{
		my $log = slurp_file($node->logfile, $offset);
		my $count = () = $log =~ /$re/g;
		return $count if $count >= $n;
		Time::HiRes::usleep(100_000);
	}
	return 0;
}

# ALTER SYSTEM SET name = value ...; reload; wait until new sessions see it
sub set_conf
{
	my ($node, %settings) = @_;
	my $sql = '';
	$sql .= "ALTER SYSTEM SET $_ = $settings{$_};\n" for sort keys %settings;
	$node->safe_psql('postgres', $sql . 'SELECT pg_reload_conf();');
	for my $name (sort keys %settings)
	{
		my $want = $node->safe_psql('postgres',
			"SELECT setting FROM pg_file_settings WHERE name = '$name' ORDER BY seqno DESC LIMIT 1"
		);
		next if $want eq '';
		$node->poll_query_until('postgres',
			"SELECT setting = '$want' OR current_setting('$name') = '$want' FROM pg_settings WHERE name = '$name'"
		) or die "setting $name was not reloaded";
	}
	return;
}

sub launcher_pid
{
	my ($node) = @_;
	return $node->safe_psql('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'dedup sweeper launcher'}
	);
}

# expired claims of a consumer (2 hours old with dedup.retention = 1h) and a
# fresh one that anchors the consumer's window
sub add_expired
{
	my ($node, $db, $consumer, $n) = @_;
	$node->safe_psql(
		$db, qq{
INSERT INTO processed_messages (consumer_name, message_id, processed_at)
SELECT '$consumer', 'old-' || g, now() - interval '2 hours' - g * interval '1 ms'
  FROM generate_series(1, $n) g;
SELECT dedup_claim('$consumer', 'fresh');
});
	return;
}

sub count_expired
{
	my ($node, $db, $consumer) = @_;
	return $node->safe_psql($db,
		"SELECT count(*) FROM processed_messages WHERE consumer_name = '$consumer' AND message_id LIKE 'old-%'"
	);
}

# ===========================================================================
# 1. not preloaded
# ===========================================================================

my $plain = PostgreSQL::Test::Cluster->new('plain');
$plain->init;
$plain->start;

{
	my ($ret, $out, $err) = $plain->psql('postgres', 'CREATE EXTENSION dedup');
	is($ret, 0, 'not preloaded: CREATE EXTENSION succeeds');
	my $warnings = () = $err =~ /WARNING:/g;
	is($warnings, 1, 'not preloaded: CREATE EXTENSION emits exactly one WARNING');
	like(
		$err,
		qr/WARNING:  dedup is not in shared_preload_libraries: processed_messages will not be swept/,
		'not preloaded: the WARNING says that nothing will be swept');
	unlike($err, qr/ERROR/, 'not preloaded: no ERROR');
}

is( $plain->safe_psql(
		'postgres', q{SELECT dedup_claim('c', 'm1'), dedup_claim('c', 'm1')}),
	't|f',
	'not preloaded: claims work');
is( $plain->safe_psql(
		'postgres',
		q{SELECT sweeper_running, database_state IS NULL, sweeper_pid IS NULL, next_sweep IS NULL FROM dedup_sweeper}
	),
	'f|t|t|t',
	'not preloaded: the view says no sweeper runs');
is( $plain->safe_psql(
		'postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'dedup%'}),
	'0',
	'not preloaded: no dedup process');

{
	my $offset = -s $plain->logfile;
	# many reads in one session, and one read in each of many sessions
	$plain->safe_psql('postgres',
		join('', map { "SELECT * FROM dedup_sweeper;\n" } 1 .. 100));
	$plain->safe_psql('postgres', 'SELECT sweeper_running FROM dedup_sweeper')
	  for 1 .. 10;
	# a marker, so that the server has written everything before it
	$plain->safe_psql('postgres', q{SELECT 'view-reads-done'});
	wait_for_log_count($plain, $offset, qr/view-reads-done/, 1);
	my @lines = log_lines($plain, $offset, qr/dedup|WARNING|ERROR/);
	is(scalar @lines, 0,
		'not preloaded: reading the view 110 times logs nothing')
	  or diag join("\n", @lines);
}

# ===========================================================================
# 9. binary-upgrade mode, on the same node now preloading dedup
# ===========================================================================

$plain->stop;
$plain->append_conf('postgresql.conf',
	"shared_preload_libraries = 'dedup'\nlog_min_messages = debug1");

{
	my $offset = -s $plain->logfile;
	# PostgreSQL::Test::Cluster::start has no way to pass -b
	my $ret = system_log('pg_ctl', '-w', '-D', $plain->data_dir, '-l',
		$plain->logfile, '-o', '-b', 'start');
	is($ret, 0, 'binary upgrade: the server starts with -b');
	$plain->_update_pid(1);

	is($plain->safe_psql('postgres', 'SHOW dedup.max_databases'),
		'64', 'binary upgrade: dedup is preloaded (dedup.max_databases exists)');
	my $log = slurp_file($plain->logfile, $offset);
	# Where the logical replication launcher is registered in this mode, it
	# is started at the same time as ours would be (both are
	# BgWorkerStart_RecoveryFinished): once it runs, ours would run too.
	if ($log =~ /registering background worker "logical replication launcher"/)
	{
		ok( $plain->poll_query_until(
				'postgres',
				q{SELECT count(*) > 0 FROM pg_stat_activity WHERE backend_type = 'logical replication launcher'}
			),
			'binary upgrade: the logical replication launcher has started');
	}
	is( $plain->safe_psql(
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
	is($plain->safe_psql('postgres', 'SELECT sweeper_running FROM dedup_sweeper'),
		'f', 'binary upgrade: the view says no sweeper runs');
	$plain->stop;

	# the control: the same configuration without -b does start a launcher
	$offset = -s $plain->logfile;
	$plain->start;
	ok( $plain->poll_query_until(
			'postgres',
			q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'dedup sweeper launcher'}
		),
		'normal start with the same configuration: the launcher runs');
	like(
		slurp_file($plain->logfile, $offset),
		qr/registering background worker "dedup sweeper launcher"/,
		'normal start: the launcher is registered');
	$plain->stop;
}

# ===========================================================================
# the preloaded primary used by parts 2 to 8
# ===========================================================================

my $node = PostgreSQL::Test::Cluster->new('primary');
$node->init(allows_streaming => 1);
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'dedup'
shared_buffers = 32MB
max_connections = 20
restart_after_crash = on
dedup.retention = '1h'
dedup.sweep_interval = '1h'
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dedup');

# ===========================================================================
# 3. the launcher in pg_stat_activity
# ===========================================================================

# 18 and later report the module's name and version
SKIP:
{
	skip 'pg_get_loaded_modules() is new in PostgreSQL 18', 1
	  if $node->safe_psql('postgres', 'SHOW server_version_num') < 180000;
	is( $node->safe_psql(
			'postgres', q{
SELECT module_name || ' ' || version FROM pg_get_loaded_modules()
 WHERE file_name = 'dedup.so'}),
		'dedup 1.2',
		'PG 18: the loaded module reports its name and version (PG_MODULE_MAGIC_EXT)');
}

# 17 and later name the wait; before, an extension's waits are all "Extension"
my $launcher_wait =
  $node->safe_psql('postgres', 'SHOW server_version_num') >= 170000
  ? 'DedupLauncherMain'
  : 'Extension';
ok( $node->poll_query_until(
		'postgres', qq{
SELECT count(*) = 1 FROM pg_stat_activity
 WHERE backend_type = 'dedup sweeper launcher'
   AND wait_event_type = 'Extension' AND wait_event = '$launcher_wait'
   AND datname IS NULL}
	),
	"the launcher is in pg_stat_activity, waiting ($launcher_wait), in no database");
is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'dedup sweeper launcher'}
	),
	'1',
	'exactly one launcher');
is($node->safe_psql('postgres', 'SELECT sweeper_running FROM dedup_sweeper'),
	't', 'the view says the sweeper runs');

# ===========================================================================
# 2. the dedup.* parameters are protected
# ===========================================================================

$node->safe_psql(
	'postgres', q{
CREATE ROLE alice LOGIN;
CREATE DATABASE alicedb OWNER alice;
});
my $alice = $node->connstr('alicedb') . ' user=alice';
my $cannot = qr/ERROR:  (?:55P02|42501): (?:parameter "dedup\.retention" cannot be changed now|permission denied)/;

fails_like($node, 'alicedb', q{SET dedup.retention = '1s'},
	$cannot, 'non-superuser SET', connstr => $alice);
fails_like($node, 'alicedb', q{SELECT set_config('dedup.retention', '1s', false)},
	$cannot, 'non-superuser set_config()', connstr => $alice);
fails_like($node, 'alicedb', q{ALTER ROLE alice SET dedup.retention = '1s'},
	$cannot, 'non-superuser ALTER ROLE self SET', connstr => $alice);
fails_like($node, 'alicedb', q{ALTER DATABASE alicedb SET dedup.retention = '1s'},
	$cannot, 'database owner ALTER DATABASE SET', connstr => $alice);
fails_like(
	$node, 'alicedb',
	q{ALTER SYSTEM SET dedup.retention = '1s'},
	qr/ERROR:  42501: (?:permission denied to set parameter "dedup\.retention"|must be superuser)/,
	'non-superuser ALTER SYSTEM',
	connstr => $alice);
fails_like($node, 'postgres', q{SET dedup.retention = '1s'},
	$cannot, 'even a superuser cannot SET it');
fails_like($node, 'postgres', q{ALTER DATABASE alicedb SET dedup.retention = '1s'},
	$cannot, 'even a superuser cannot ALTER DATABASE SET it');
$node->connect_fails(
	"$alice options='-c dedup.retention=1s'",
	'non-superuser connection option',
	expected_stderr => qr/parameter "dedup\.retention" cannot be changed now/);
is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FROM pg_db_role_setting s, unnest(s.setconfig) c WHERE c LIKE 'dedup.%'}
	),
	'0',
	'no per-role or per-database dedup setting was stored');
is( $node->safe_psql(
		'alicedb', 'SHOW dedup.retention',
		connstr => $alice),
	'1h',
	'dedup.retention is unchanged for alice');

# bad values, even from a superuser
fails_like($node, 'postgres', q{ALTER SYSTEM SET dedup.retention = '-5s'},
	qr/ERROR:  22023: -5 s is outside the valid range for parameter "dedup\.retention" \(-1( s)? \.\. 2147483647( s)?\)/,
	'ALTER SYSTEM dedup.retention = -5s');
fails_like($node, 'postgres', q{ALTER SYSTEM SET dedup.retention = 'abc'},
	qr/ERROR:  22023: invalid value for parameter "dedup\.retention": "abc"/,
	'ALTER SYSTEM dedup.retention = abc');
fails_like($node, 'postgres', q{ALTER SYSTEM SET dedup.sweep_batch_size = 0},
	qr/ERROR:  22023: 0 is outside the valid range for parameter "dedup\.sweep_batch_size" \(1 \.\. 1000000\)/,
	'ALTER SYSTEM dedup.sweep_batch_size = 0');
fails_like($node, 'postgres', q{ALTER SYSTEM SET dedup.sweep_interval = 0},
	qr/ERROR:  22023: 0 s? ?is outside the valid range for parameter "dedup\.sweep_interval"/,
	'ALTER SYSTEM dedup.sweep_interval = 0');
my $err = fails_like($node, 'postgres', q{ALTER SYSTEM SET dedup.databases = 'a,,b'},
	qr/ERROR:  22023: invalid value for parameter "dedup\.databases": "a,,b"/,
	'ALTER SYSTEM dedup.databases = a,,b');
like($err, qr/DETAIL:  List syntax is invalid\./,
	'ALTER SYSTEM dedup.databases = a,,b: the detail says why');
unlike(slurp_file($node->data_dir . '/postgresql.auto.conf'),
	qr/dedup/, 'nothing was written to postgresql.auto.conf');

# the prefix is reserved: no placeholder can be made for a misspelt name
my $reserved = qr/ERROR:  42602: invalid configuration parameter name "dedup\.nonexistent"\nDETAIL:  "dedup" is a reserved prefix\./;
fails_like($node, 'alicedb', 'SET dedup.nonexistent = 1',
	$reserved, 'non-superuser SET dedup.nonexistent', connstr => $alice);
fails_like($node, 'postgres', 'SET dedup.nonexistent = 1',
	$reserved, 'superuser SET dedup.nonexistent');
fails_like($node, 'postgres', 'ALTER ROLE alice SET dedup.nonexistent = 1',
	qr/ERROR:  42602: invalid configuration parameter name "dedup\.nonexistent"/,
	'ALTER ROLE SET dedup.nonexistent');

# ===========================================================================
# 6. DROP DATABASE and ALTER DATABASE RENAME during a long sweep
# ===========================================================================

# Long sweeps: 200000 expired claims deleted 5 at a time, with a 1 ms pause
# between batches, take about 40000 transactions and at least 40 s, longer
# than DROP DATABASE waits for other sessions to leave (5 s) and than the
# lock_timeout of DROP EXTENSION below: if the sweeper did not step aside,
# those would fail.  (Without the pause, a fast machine deleted more than
# half of them before the checks below could look.)
set_conf($node, 'dedup.sweep_batch_size' => 5, 'dedup.sweep_batch_delay' => "'1ms'");

my $many = 200_000;

# Create a database with $many expired claims, start its sweep, and return the
# sweeper's pid once it is deleting.
sub start_long_sweep
{
	my ($db) = @_;
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION dedup');
	# the sweep that CREATE EXTENSION asked for is over
	$node->poll_query_until($db,
		q{SELECT sweeper_pid IS NULL AND last_sweep_end IS NOT NULL FROM dedup_sweeper})
	  or die "first sweep of $db did not end";
	add_expired($node, $db, 'c', $many);
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
		"$db: a 'dedup sweeper' connected to $db is deleting, as the table's owner");
	return $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'dedup sweeper' AND datname = '$db'"
	);
}

{
	my $offset = -s $node->logfile;
	my $launcher = launcher_pid($node);
	my $sweeper = start_long_sweep('dropme');
	my $t0 = time;
	my ($ret, $out, $err) = psql_verbose(
		$node, 'postgres', qq{
SELECT count(*) FROM pg_stat_activity WHERE pid = $sweeper;
DROP DATABASE dropme;
SELECT count(*) FROM pg_stat_activity WHERE pid = $sweeper;
SELECT count(*) FROM pg_database WHERE datname = 'dropme';
});
	my $elapsed = time - $t0;
	is($ret, 0, 'DROP DATABASE during a sweep succeeds') or diag $err;
	is($out, "1\n0\n0",
		'DROP DATABASE: the sweeper ran when it started, had left when it ended');
	note sprintf('DROP DATABASE took %.2f s', $elapsed);
	cmp_ok($elapsed, '<', 4,
		'DROP DATABASE: the sweeper stepped aside at once, not after its sweep');
	is(launcher_pid($node), $launcher, 'DROP DATABASE: the launcher lives on');
	my @lines = (log_problems($node, $offset),
		log_lines($node, $offset, qr/terminated by signal|exited with exit code [1-9]/));
	is(scalar @lines, 0, 'DROP DATABASE: no error logged') or diag join("\n", @lines);
}

{
	my $sweeper = start_long_sweep('renameme');
	my ($ret, $out, $err) = psql_verbose(
		$node, 'postgres', qq{
SELECT count(*) FROM pg_stat_activity WHERE pid = $sweeper;
ALTER DATABASE renameme RENAME TO renamed;
SELECT count(*) FROM pg_stat_activity WHERE pid = $sweeper;
});
	is($ret, 0, 'ALTER DATABASE RENAME during a sweep succeeds') or diag $err;
	is($out, "1\n0",
		'ALTER DATABASE RENAME: the sweeper ran when it started, had left when it ended');
	is( $node->safe_psql(
			'renamed', q{
SELECT last_sweep_outcome, last_error IS NULL, last_sweep_rows BETWEEN 1 AND 99999
  FROM dedup_sweeper}
		),
		'partial|t|t',
		'ALTER DATABASE RENAME: the sweep stopped early (most rows left), without error');
	cmp_ok(count_expired($node, 'renamed', 'c'),
		'>', 0, 'ALTER DATABASE RENAME: expired claims are left for later');

	# the renamed database is swept to the end at the next sweep
	set_conf($node, 'dedup.sweep_batch_size' => 10000);
	$node->safe_psql('renamed', 'SELECT dedup_sweeper_wake()');
	ok( $node->poll_query_until(
			'renamed', q{
SELECT last_sweep_outcome = 'done' AND total_rows_deleted = 200000
  FROM dedup_sweeper}
		),
		'renamed database: the next sweep finishes the job');
	is(count_expired($node, 'renamed', 'c'),
		'0', 'renamed database: no expired claim left');
	is( $node->safe_psql(
			'renamed', q{SELECT count(*) FROM processed_messages WHERE message_id = 'fresh'}),
		'1',
		'renamed database: the fresh claim is kept');
	set_conf($node, 'dedup.sweep_batch_size' => 5);
}

# ===========================================================================
# 8. DROP EXTENSION during a long sweep
# ===========================================================================

my $dropext_offset;
{
	my $sweeper = start_long_sweep('dropext');
	$dropext_offset = -s $node->logfile;
	my $t0 = time;
	my ($ret, $out, $err) = psql_verbose(
		$node, 'dropext', qq{
SELECT count(*) FROM pg_stat_activity WHERE pid = $sweeper;
SELECT count(*) > 100000 FROM processed_messages;
SET lock_timeout = '2s';
DROP EXTENSION dedup;
});
	my $elapsed = time - $t0;
	is($ret, 0, 'DROP EXTENSION during a sweep succeeds') or diag $err;
	is($out, "1\nt",
		'DROP EXTENSION: the sweeper was running, with most of the work ahead');
	note sprintf('DROP EXTENSION took %.2f s', $elapsed);
	ok( $node->poll_query_until(
			'postgres',
			"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $sweeper"),
		'DROP EXTENSION: the sweeper exits');
	is( $node->safe_psql(
			'dropext', q{SELECT count(*) FROM pg_class WHERE relname = 'processed_messages'}),
		'0',
		'DROP EXTENSION: processed_messages is gone');
}

# ===========================================================================
# 7. log hygiene: sweep every second for a while; databases without dedup
#    are probed once, nothing is logged again and again
# ===========================================================================

{
	set_conf($node,
		'dedup.sweep_interval' => q{'1s'},
		'log_min_messages'     => 'debug1');
	my $offset = -s $node->logfile;
	$node->safe_psql('postgres', 'CREATE DATABASE noext');

	# Meanwhile, read the view of postgres (swept every second, always
	# successfully) as often as possible for 3 seconds: it must never say
	# that a sweep failed.
	my $samples = $node->safe_psql(
		'postgres', q{
SET log_statement = none;
CREATE TEMP TABLE samples (failed bigint, total bigint, first_start timestamptz, last_start timestamptz);
DO $$
DECLARE
	t_end timestamptz := clock_timestamp() + interval '3 s';
	r record;
	n_failed bigint := 0;
	n_total bigint := 0;
	first_start timestamptz;
BEGIN
	WHILE clock_timestamp() < t_end LOOP
		SELECT last_sweep_outcome, last_sweep_start INTO r FROM dedup_sweeper;
		first_start := coalesce(first_start, r.last_sweep_start);
		n_total := n_total + 1;
		IF r.last_sweep_outcome = 'failed' THEN
			n_failed := n_failed + 1;
		END IF;
	END LOOP;
	INSERT INTO samples VALUES (n_failed, n_total, first_start, r.last_sweep_start);
END
$$;
SELECT failed, total > 1000, last_start > first_start, total,
       (SELECT last_error IS NULL FROM dedup_sweeper) FROM samples;
});
	my ($failed, $many_samples, $swept, $total, $no_error) = split /\|/, $samples;
	is("$many_samples|$swept|$no_error", 't|t|t',
		'view sampling: many reads, during which postgres was swept without error');
	is($failed, 0,
		"view sampling: last_sweep_outcome never says 'failed' while every sweep succeeds")
	  or diag "$failed of $total reads said 'failed'";
	my $start = 'starting background worker process "dedup sweeper for database';
	ok( wait_for_log_count(
			$node, $offset, qr/\Q$start\E postgres"/, 8),
		'dedup.sweep_interval = 1s: postgres is swept again and again');
	my $log = slurp_file($node->logfile, $offset);
	my $noext = () = $log =~ /\Q$start\E noext"/g;
	my $dropext = () = $log =~ /\Q$start\E dropext"/g;
	my $alicedb = () = $log =~ /\Q$start\E alicedb"/g;
	is($noext, 1, 'a new database without dedup is probed exactly once');
	# once, unless the sweeper that DROP EXTENSION interrupted already found
	# the extension gone
	cmp_ok($dropext, '<=', 1,
		'the database whose extension was dropped is probed at most once more, then left alone');
	is($alicedb, 0, 'a database known to lack dedup is not probed again');
	my @bad = log_problems($node, $offset);
	is(scalar @bad, 0, 'no warning or error logged while sweeping every second')
	  or diag join("\n", @bad);
	my @about_noext = grep { !/^[^\n]*?\[\d+\] (?:\S+ )?DEBUG:  / }
	  log_lines($node, $offset, qr/noext/);
	is(scalar @about_noext, 0, 'nothing else is logged about noext')
	  or diag join("\n", @about_noext);
	@bad = log_problems($node, $dropext_offset);
	is(scalar @bad, 0, 'no error logged since DROP EXTENSION')
	  or diag join("\n", @bad);
	set_conf($node, 'dedup.sweep_interval' => q{'1h'});
	$node->safe_psql('postgres', 'ALTER SYSTEM RESET log_min_messages; SELECT pg_reload_conf()');
}

# ===========================================================================
# 4. SIGTERM and SIGKILL of the launcher
# ===========================================================================

set_conf($node, 'dedup.sweep_batch_size' => 1000, 'dedup.sweep_batch_delay' => 0);

{
	my $offset = -s $node->logfile;
	my $old = launcher_pid($node);
	# a session that a crash restart would kill
	my $bystander = $node->background_psql('postgres');
	my $bystander_pid = $bystander->query_safe('SELECT pg_backend_pid()');

	my $t0 = time;
	is($node->safe_psql('postgres', "SELECT pg_terminate_backend($old)"),
		't', 'SIGTERM sent to the launcher');
	ok( $node->poll_query_until(
			'postgres', "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $old"),
		'SIGTERM: the launcher exits');
	my $exit_time = time - $t0;
	cmp_ok($exit_time, '<', 5, 'SIGTERM: the launcher exits promptly');
	is($node->safe_psql('postgres', 'SELECT sweeper_running, dedup_sweeper_wake() FROM dedup_sweeper'),
		'f|f', 'SIGTERM: while it is gone, the view and dedup_sweeper_wake() say so');

	# claims made while no launcher runs are swept by the next one
	add_expired($node, 'postgres', 'c4', 300);
	ok( $node->poll_query_until(
			'postgres', qq{
SELECT count(*) = 1 FROM pg_stat_activity
 WHERE backend_type = 'dedup sweeper launcher' AND pid <> $old}
		),
		'SIGTERM: the postmaster starts a new launcher');
	my $restart_time = time - $t0;
	note sprintf('launcher back after %.1f s', $restart_time);
	cmp_ok($restart_time, '>=', 9,
		'SIGTERM: the new launcher waited for bgw_restart_time (10 s)');
	cmp_ok($restart_time, '<', 30, 'SIGTERM: ... and not much longer');
	ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM processed_messages WHERE consumer_name = 'c4' AND message_id LIKE 'old-%'"),
		'SIGTERM: the new launcher sweeps what expired meanwhile');
	# and it answers wake-ups
	add_expired($node, 'postgres', 'c4b', 300);
	is($node->safe_psql('postgres', 'SELECT dedup_sweeper_wake()'),
		't', 'SIGTERM: dedup_sweeper_wake() reaches the new launcher');
	ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM processed_messages WHERE consumer_name = 'c4b' AND message_id LIKE 'old-%'"),
		'SIGTERM: a wake-up makes the new launcher sweep');
	is( $node->safe_psql(
			'postgres',
			q{SELECT count(*) FROM processed_messages WHERE consumer_name IN ('c4', 'c4b') AND message_id = 'fresh'}
		),
		'2',
		'SIGTERM: fresh claims are kept');

	my ($out, $failed) = $bystander->query('SELECT pg_backend_pid()');
	is("$out|$failed", "$bystander_pid|0",
		'SIGTERM: no crash restart (another session lives on)');
	$bystander->quit;
	my $log = slurp_file($node->logfile, $offset);
	like($log,
		qr/FATAL:  terminating background worker "dedup sweeper launcher" due to administrator command/,
		'SIGTERM: the launcher logs why it exits');
	unlike($log, qr/terminating any other active server processes/,
		'SIGTERM: the postmaster does not reinitialize');
	my $starts = () = $log =~ /dedup sweeper launcher started/g;
	is($starts, 1, 'SIGTERM: exactly one new launcher started');
}

{
	$node->safe_psql('postgres', q{SELECT dedup_claim('c4', 'before-crash')});
	my $offset = -s $node->logfile;
	my $old = launcher_pid($node);
	is(kill('KILL', $old), 1, 'SIGKILL sent to the launcher');
	ok( wait_for_log_count(
			$node, $offset,
			qr/background worker "dedup sweeper launcher" \(PID $old\) was terminated by signal 9/,
			1),
		'SIGKILL: the postmaster notices');
	ok(wait_for_log_count($node, $offset, qr/all server processes terminated; reinitializing/, 1),
		'SIGKILL: the postmaster restarts the cluster');
	ok( $node->poll_query_until(
			'postgres', qq{
SELECT count(*) = 1 FROM pg_stat_activity
 WHERE backend_type = 'dedup sweeper launcher' AND pid <> $old}
		),
		'SIGKILL: after the crash restart the launcher is back');
	is( $node->safe_psql(
			'postgres',
			q{SELECT dedup_claim('c4', 'before-crash'), dedup_claim('c4', 'after-crash')}
		),
		'f|t',
		'SIGKILL: a claim committed before the crash is still a duplicate');
	add_expired($node, 'postgres', 'c4c', 300);
	$node->safe_psql('postgres', 'SELECT dedup_sweeper_wake()');
	ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM processed_messages WHERE consumer_name = 'c4c' AND message_id LIKE 'old-%'"),
		'SIGKILL: the launcher sweeps after the crash restart');
	ok( $node->poll_query_until(
			'postgres',
			q{SELECT last_sweep_outcome = 'done' AND last_error IS NULL FROM dedup_sweeper}),
		'SIGKILL: the view shows a clean sweep');
}

# ===========================================================================
# 5. hot standby, then promotion
# ===========================================================================

$node->backup('bkp');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($node, 'bkp', has_streaming => 1);
$standby->start;

add_expired($node, 'postgres', 'c5', 200);
$node->wait_for_catchup($standby);
is(count_expired($standby, 'postgres', 'c5'),
	'200', 'standby: the expired claims are replicated');
is( $standby->safe_psql(
		'postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'dedup%'}),
	'0',
	'standby: no launcher, no sweeper');
is( $standby->safe_psql(
		'postgres', 'SELECT sweeper_running, dedup_sweeper_wake() FROM dedup_sweeper'),
	'f|f',
	'standby: the view and dedup_sweeper_wake() say no sweeper runs');
{
	my ($ret, $out, $err) = psql_verbose($standby, 'postgres',
		q{SELECT dedup_claim('c5', 'on-standby')});
	like($err, qr/ERROR:  25006: /, 'standby: dedup_claim fails with 25006');
}
is(count_expired($standby, 'postgres', 'c5'),
	'200', 'standby: the expired claims are still there after a wake-up');

# the primary's sweep reaches the standby through WAL
is($node->safe_psql('postgres', 'SELECT dedup_sweeper_wake()'),
	't', 'primary: wake-up');
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) = 0 FROM processed_messages WHERE consumer_name = 'c5' AND message_id LIKE 'old-%'"
	),
	'primary: the expired claims are swept');
$node->wait_for_catchup($standby);
is(count_expired($standby, 'postgres', 'c5'),
	'0', 'standby: the sweep is replicated');
is( $standby->safe_psql(
		'postgres', q{SELECT count(*) FROM processed_messages WHERE consumer_name = 'c5'}),
	'1',
	'standby: the fresh claim is replicated and kept');

# expired claims that the primary does not sweep (next sweep in an hour) are
# swept by the standby once it is promoted
add_expired($node, 'postgres', 'c5b', 100);
$node->wait_for_catchup($standby);
is(count_expired($standby, 'postgres', 'c5b'),
	'100', 'standby: more expired claims are replicated');
is( $standby->safe_psql(
		'postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'dedup%'}),
	'0',
	'standby: still no dedup process');
unlike(slurp_file($standby->logfile),
	qr/dedup sweeper launcher started/, 'standby: no launcher ever started');

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
is(count_expired($standby, 'postgres', 'c5b'),
	'0', 'promoted: no expired claim left');
is( $standby->safe_psql(
		'postgres', q{SELECT dedup_claim('c5b', 'fresh'), dedup_claim('c5b', 'new')}),
	'f|t',
	'promoted: claims work, the fresh claim is kept');
is(count_expired($node, 'postgres', 'c5b'),
	'100', 'old primary: its claims were not swept there (the promoted node swept itself)');

$standby->stop;
$node->stop;
done_testing();
