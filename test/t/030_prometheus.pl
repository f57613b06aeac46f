#
# 030_prometheus.pl: dedup through prometheus-postgres-exporter.
#
#   1. The exporter, connected as a role that is only a member of
#      pg_monitor (no privilege on any dedup table), runs every query of
#      doc/examples/prometheus/dedup_queries.yaml without an error and exports the
#      exact claim counters, records, backlog and sizes of known claims,
#      claim and lock-wait times in seconds, failed claims by class;
#      a consumer whose claims are not counted gets no counters (no NaN).
#   2. No message id appears anywhere in what the exporter serves.
#   3. The metrics follow the server: a new duplicate, a sweep that deletes
#      the backlog (total_rows_deleted, seconds_since_last_sweep) and a
#      sweep that fails (last_sweep_failed).
#   4. Every metric the alerting rules use is one the exporter serves.
#   5. With --auto-discover-databases, a database without dedup costs a
#      scrape error but not the metrics of the database that has it, as
#      the queries file says.
#   6. promtool check rules / test rules on dedup_alerts.yml.
#   7. The recommended layout (CREATE SCHEMA dedup; CREATE EXTENSION dedup
#      SCHEMA dedup) with the install's GRANT USAGE ON SCHEMA dedup TO
#      pg_monitor: a plain pg_monitor member whose search_path is the
#      documented one (ALTER ROLE ... SET search_path = dedup, public) gets
#      the dedup metrics without a scrape error; without the grant it gets
#      none, and a scrape error.
#
use strict;
use warnings;

use Cwd qw(abs_path);
use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupNode;
use DedupProcess;
use DedupTools;
use HTTP::Tiny;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $exporter_bin = $ENV{POSTGRES_EXPORTER}
  // '/usr/bin/prometheus-postgres-exporter';
my $promtool    = $ENV{PROMTOOL} // '/usr/bin/promtool';
my $queries     = abs_path('doc/examples/prometheus/dedup_queries.yaml');
my $alerts      = 'doc/examples/prometheus/dedup_alerts.yml';
my $alerts_test = 'doc/examples/prometheus/dedup_alerts_test.yml';

require_tools(programs => [ $exporter_bin, $promtool ]);
die
  "doc/examples/prometheus/dedup_queries.yaml not found: run me from the source directory\n"
  unless defined $queries && -r $queries;

my @exporters;    # harnesses, killed at the end whatever happens

END
{
	for my $h (@exporters)
	{
		eval { $h->kill_kill if $h->pumpable };
	}
}

# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

# Start the exporter with DSN and extra flags on a free port; returns
# (harness, port, log file).
sub start_exporter
{
	my ($name, $dsn, @flags) = @_;
	my $port = free_port();
	my $log  = "$PostgreSQL::Test::Utils::tmp_check/exporter_$name.log";
	local $ENV{DATA_SOURCE_NAME} = $dsn;
	my $h = IPC::Run::start(
		[
			$exporter_bin,
			'--disable-default-metrics',
			'--disable-settings-metrics',
			"--extend.query-path=$queries",
			"--web.listen-address=127.0.0.1:$port",
			@flags
		],
		'<',
		\undef,
		'>', $log, '2>&1');
	push @exporters, $h;
	return ($h, $port, $log);
}

# GET /metrics until the exporter answers with the dedup metrics (or what
# $want matches); returns the body, or dies with the exporter's log.
sub scrape
{
	my ($port, $log, $want) = @_;
	$want //= qr/^dedup_storage_/m;
	my $http = HTTP::Tiny->new(timeout => test_timeout());
	my ($body, $last) = (undef, '');
	wait_until(
		sub {
			my $res = $http->get("http://127.0.0.1:$port/metrics");
			$last = "$res->{status} $res->{reason}";
			$body = $res->{content};
			return $res->{success} && $body =~ $want;
		},
		0.2)
	  or die
	  "no dedup metrics from the exporter on port $port (last answer: $last); its log:\n"
	  . read_file($log);
	return $body;
}

# the samples of an exposition: [name, {labels}, value as text]
sub parse_metrics
{
	my ($text) = @_;
	my @samples;
	for my $line (split /\n/, $text)
	{
		next if $line =~ /^#/ || $line !~ /\S/;
		$line =~
		  /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$/
		  or die "unparsable exposition line: $line";
		my ($name, $labels, $value) = ($1, $2 // '', $3);
		my %labels;
		while ($labels =~ /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?/g)
		{
			$labels{$1} = $2;
		}
		push @samples, [ $name, \%labels, $value ];
	}
	return \@samples;
}

# The value (text) of the one sample of $name whose labels include %want;
# undef if there is none, dies if there are several.
sub value_of
{
	my ($samples, $name, %want) = @_;
	my @hits = grep {
		my $s = $_;
		$s->[0] eq $name
		  && !grep { ($s->[1]{$_} // "\0") ne $want{$_} }
		  keys %want
	} @$samples;
	die "several samples of $name with "
	  . join(',', map { "$_=$want{$_}" } sort keys %want)
	  if @hits > 1;
	return @hits ? $hits[0][2] : undef;
}

# the metric must be there, with exactly this value (compared as numbers,
# or as text for NaN and +Inf)
sub metric_is
{
	my ($samples, $name, $labels, $expected, $what) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $got = value_of($samples, $name, %$labels);
	my $id  = "$name\{"
	  . join(',', map { "$_=\"$labels->{$_}\"" } sort keys %$labels) . '}';
	return fail("$what: $id is exported") if !defined $got;
	return is($got, $expected, "$what: $id = $expected")
	  if $expected =~ /^(?:NaN|[+-]Inf)$/;
	return cmp_ok($got, '==', $expected, "$what: $id = $expected");
}

# the metric must be there, and $low <= value <= $high
sub metric_between
{
	my ($samples, $name, $labels, $low, $high, $what) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $got = value_of($samples, $name, %$labels);
	my $id  = "$name\{"
	  . join(',', map { "$_=\"$labels->{$_}\"" } sort keys %$labels) . '}';
	ok( defined $got
		  && $got =~ /^[-+]?[0-9.]+(?:e[-+]?\d+)?$/i
		  && $got >= $low
		  && $got <= $high,
		"$what: $low <= $id <= $high") or diag("got " . ($got // 'nothing'));
	return;
}

# what the sweeper and the server log say, when a check about it failed
sub sweeper_diag
{
	my ($node) = @_;
	diag(
		$node->safe_psql(
			'postgres',
			'SELECT * FROM dedup_sweeper',
			extra_params => ['-x']));
	diag(
		join "\n",
		grep { /dedup/ && !/statement:/ } split /\n/,
		slurp_file($node->logfile));
	return;
}

# ---------------------------------------------------------------------------
# a server with known claims
# ---------------------------------------------------------------------------

# The sweeper runs but does not sweep yet, so that the backlog stays put;
# later each sweep is one the test asks for (the next one is an hour away),
# so that no scrape finds one running.
my $node = DedupNode->create(
	'main',
	sweeps => 'off',
	conf   => { 'dedup.sweep_interval' => '1h' });

my $t0 = time;
$node->safe_psql(
	'postgres', q{
CREATE EXTENSION dedup;
CREATE ROLE exporter LOGIN;
GRANT pg_monitor TO exporter;
});

# orders: 3 first deliveries and 2 duplicates; billing: 1; archive: rows
# written without dedup_claim (not counted), 4 of them past the default
# window of 7 days counted back from its latest row
$node->safe_psql(
	'postgres', q{
SELECT dedup_claim('orders', 'secret-evt-1');
SELECT dedup_claim('orders', 'secret-evt-2');
SELECT dedup_claim('orders', 'secret-evt-3');
SELECT dedup_claim('orders', 'secret-evt-1');
SELECT dedup_claim('orders', 'secret-evt-2');
SELECT dedup_claim('billing', 'secret-bill-1');
INSERT INTO processed_messages (consumer_name, message_id, processed_at)
SELECT 'archive', 'secret-old-' || g, now() - interval '10 days' - g * interval '1 minute'
  FROM generate_series(1, 4) g;
INSERT INTO processed_messages (consumer_name, message_id, processed_at)
VALUES ('archive', 'secret-new-1', now());
SELECT dedup_keep_forever('billing');
ANALYZE processed_messages;
});

# payments: a claim that waits for another session's claim of the same
# message until its lock_timeout (the first claim rolls back)
my $holder = $node->background_psql('postgres');
$holder->query_safe(q{BEGIN; SELECT dedup_claim('payments', 'secret-held')});
my ($ret, $out, $err) = $node->psql('postgres',
	q{SET lock_timeout = '10ms'; SELECT dedup_claim('payments', 'secret-held')}
);
like(
	$err,
	qr/canceling statement due to lock timeout/,
	'a claim gives up waiting');
$holder->query_safe('ROLLBACK');
$holder->quit;

# what the exporter's role may do: read the views, not the table
($ret, $out, $err) = $node->psql(
	'postgres',
	'SELECT count(*) FROM processed_messages',
	extra_params => [ '-U', 'exporter' ]);
like(
	$err,
	qr/permission denied for table processed_messages/,
	'the exporter role cannot read processed_messages itself');

# ---------------------------------------------------------------------------
# 1, 2: the first scrape
# ---------------------------------------------------------------------------

my $dsn =
  sprintf('host=%s port=%d user=exporter dbname=postgres sslmode=disable',
	$node->host, $node->port);
my ($exporter, $port, $log) = start_exporter('main', $dsn);
my $body     = scrape($port, $log);
my $m        = parse_metrics($body);
my %orders   = (datname => 'postgres', consumer => 'orders');
my %billing  = (datname => 'postgres', consumer => 'billing');
my %archive  = (datname => 'postgres', consumer => 'archive');
my %payments = (datname => 'postgres', consumer => 'payments');
my %db       = (datname => 'postgres');

metric_is($m, 'pg_up', {}, 1, 'exporter connected');
metric_is($m, 'pg_exporter_last_scrape_error',
	{}, 0, 'every query runs with pg_monitor alone');

metric_is($m, 'dedup_consumer_claims',     \%orders,  3, 'counters');
metric_is($m, 'dedup_consumer_duplicates', \%orders,  2, 'counters');
metric_is($m, 'dedup_consumer_claims',     \%billing, 1, 'counters');
metric_is($m, 'dedup_consumer_duplicates', \%billing, 0, 'counters');
metric_is($m, 'dedup_consumer_lock_waits', \%orders,  0, 'counters');
metric_is($m, 'dedup_consumer_serialization_failures',
	\%orders, 0, 'counters');
is(value_of($m, 'dedup_consumer_claims', %archive),
	undef, 'counters: none for a consumer whose claims are not counted');
metric_between(
	$m,       'dedup_consumer_counters_since_timestamp_seconds',
	\%orders, int($t0) - 1,
	time + 1, 'counters');
metric_between($m, 'dedup_consumer_seconds_since_last_duplicate',
	\%orders, 0, time - $t0 + 1, 'counters');
metric_is($m, 'dedup_consumer_seconds_since_last_duplicate',
	\%billing, 'NaN', 'counters: never a duplicate');

# times, in seconds: only bounds (a claim takes well under a second)
my $elapsed = time - $t0 + 1;
metric_between($m, 'dedup_consumer_claim_seconds',
	\%orders, 1e-9, $elapsed, 'times');
metric_between(
	$m,       'dedup_consumer_max_claim_seconds',
	\%orders, 1e-9,
	value_of($m, 'dedup_consumer_claim_seconds', %orders) // 0,
	'times: max <= total');
metric_is($m, 'dedup_consumer_lock_wait_seconds',
	\%orders, 0, 'times: no wait');
metric_is($m, 'dedup_consumer_claims',     \%payments, 1, 'payments');
metric_is($m, 'dedup_consumer_lock_waits', \%payments, 1, 'payments');
metric_between($m, 'dedup_consumer_lock_wait_seconds',
	\%payments, 0.01, $elapsed,
	'payments: the wait until lock_timeout (10ms)');

for my $class (qw(serialization_failure deadlock lock_timeout cancel other))
{
	metric_is(
		$m, 'dedup_consumer_claim_errors',
		{ %payments, class => $class },
		$class eq 'lock_timeout' ? 1 : 0,
		'failed claims');
	metric_is($m, 'dedup_consumer_claim_errors', { %orders, class => $class },
		0, 'failed claims');
}
is( value_of($m, 'dedup_consumer_claim_errors', %archive, class => 'other'),
	undef,
	'failed claims: none for a consumer whose claims are not counted');

metric_is($m, 'dedup_consumer_records_estimate', \%orders,  3, 'records');
metric_is($m, 'dedup_consumer_records_estimate', \%billing, 1, 'records');
metric_is($m, 'dedup_consumer_records_estimate', \%archive, 5, 'records');
metric_is($m, 'dedup_consumer_records_expired_backlog',
	\%archive, 4, 'records');
metric_is($m, 'dedup_consumer_records_expired_backlog',
	\%orders, 0, 'records');
metric_is($m, 'dedup_consumer_records_retention_seconds',
	\%orders, 7 * 86400, 'records: dedup.retention');
metric_is($m, 'dedup_consumer_records_retention_seconds',
	\%billing, '+Inf', 'records: kept forever');
metric_between(
	$m, 'dedup_consumer_records_oldest_age_seconds',
	\%archive,
	10 * 86400 + 4 * 60,
	10 * 86400 + 4 * 60 + time - $t0 + 1, 'records');
metric_between($m, 'dedup_consumer_records_latest_age_seconds',
	\%archive, 0, time - $t0 + 1, 'records');

metric_is($m, 'dedup_storage_rows_estimate',   \%db, 9, 'storage');
metric_is($m, 'dedup_storage_consumers',       \%db, 3, 'storage');
metric_is($m, 'dedup_storage_expired_backlog', \%db, 4, 'storage');
metric_between($m, 'dedup_storage_table_bytes', \%db, 1, 1e9, 'storage');
metric_between($m, 'dedup_storage_index_bytes', \%db, 1, 1e9, 'storage');
cmp_ok(
	value_of($m, 'dedup_storage_total_bytes', %db) // 0,
	'>=',
	(value_of($m, 'dedup_storage_table_bytes', %db)   // 1) +
	  (value_of($m, 'dedup_storage_index_bytes', %db) // 1),
	'storage: total_bytes >= table_bytes + index_bytes');
metric_is($m, 'dedup_storage_sweeper_running', \%db, 1, 'storage');
metric_is($m, 'dedup_storage_sweep_enabled',   \%db, 0, 'storage');
metric_is($m, 'dedup_storage_in_recovery',     \%db, 0, 'storage');
metric_is($m, 'dedup_storage_last_sweep_failed',
	\%db, 0, 'storage: never swept');
metric_is($m, 'dedup_storage_seconds_since_last_sweep',
	\%db, 'NaN', 'storage: never swept');
metric_is($m, 'dedup_storage_total_rows_deleted', \%db, 0, 'storage');

my @types = $body =~ /^# TYPE (dedup_\S+) (\S+)$/mg;
my %type  = @types;
is($type{dedup_consumer_claims}, 'counter', 'claims is a counter');
is($type{dedup_consumer_claim_seconds},
	'counter', 'claim_seconds is a counter');
is($type{dedup_consumer_lock_wait_seconds},
	'counter', 'lock_wait_seconds is a counter');
is($type{dedup_consumer_max_claim_seconds},
	'gauge', 'max_claim_seconds is a gauge');
is($type{dedup_consumer_claim_errors}, 'counter',
	'claim_errors is a counter');
is($type{dedup_storage_total_rows_deleted},
	'counter', 'total_rows_deleted is a counter');
is($type{dedup_storage_expired_backlog},
	'gauge', 'expired_backlog is a gauge');

unlike($body, qr/secret/, 'no message id in the scrape');

# ---------------------------------------------------------------------------
# 4: the alerting rules use only metrics the exporter serves
# ---------------------------------------------------------------------------

my %served = map { $_->[0] => 1 } @$m;
my %used =
  map { $_ => 1 } slurp_file($alerts) =~ /\b(dedup_[a-z_]+)(?=[\[\s{)]|$)/mg;
delete $used{$_} for grep { !/^dedup_(?:consumer|storage)_/ } keys %used;
ok(scalar(keys %used) >= 5, 'the alerting rules use dedup metrics')
  or diag(join ' ', sort keys %used);
for my $name (sort keys %used)
{
	ok($served{$name}, "the alerting rules' $name is served");
}

# ---------------------------------------------------------------------------
# 3: the metrics follow the server
# ---------------------------------------------------------------------------

# a duplicate, and a sweep that deletes the 4 expired rows: CREATE
# EXTENSION asked for one, which the launcher starts once it sees
# dedup.sweep_enabled = on
my $since = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
$node->safe_psql(
	'postgres', q{
SELECT dedup_claim('orders', 'secret-evt-3');
ALTER SYSTEM SET dedup.sweep_enabled = on;
SELECT pg_reload_conf();
});
is($node->wait_sweep_after('postgres', $since),
	'done', 'a sweep deletes the backlog')
  or sweeper_diag($node);

$body = scrape($port, $log);
$m    = parse_metrics($body);
metric_is($m, 'dedup_consumer_duplicates', \%orders, 3, 'after a duplicate');
metric_is($m, 'dedup_consumer_claims',     \%orders, 3, 'after a duplicate');
metric_is($m, 'dedup_storage_expired_backlog', \%db, 0, 'after a sweep');
metric_is($m, 'dedup_consumer_records_expired_backlog',
	\%archive, 0, 'after a sweep');
metric_is($m, 'dedup_storage_total_rows_deleted', \%db, 4, 'after a sweep');
metric_is($m, 'dedup_storage_sweep_enabled',      \%db, 1, 'after a sweep');
metric_is($m, 'dedup_storage_last_sweep_failed',  \%db, 0, 'after a sweep')
  or sweeper_diag($node);
metric_between(
	$m,   'dedup_storage_seconds_since_last_sweep',
	\%db, 0,
	time - $t0 + 1,
	'after a sweep');

# a sweep that fails: its role does not exist (until the launcher has
# reloaded its configuration, a sweep asked for may still succeed: ask again)
$node->safe_psql(
	'postgres', q{
ALTER SYSTEM SET dedup.sweep_role = 'no_such_role';
SELECT pg_reload_conf();
});
ok( $node->sweep_until('postgres', 'failed'),
	'a sweep as a role that does not exist fails') or sweeper_diag($node);

$body = scrape($port, $log);
$m    = parse_metrics($body);
metric_is($m, 'dedup_storage_last_sweep_failed',
	\%db, 1, 'after a failed sweep');
metric_is($m, 'dedup_storage_sweeper_running',
	\%db, 1, 'after a failed sweep');
metric_is($m, 'pg_exporter_last_scrape_error', {}, 0, 'after a failed sweep');
unlike($body, qr/secret/, 'no message id in the scrape, after sweeps');

$exporter->kill_kill;
ok(!$exporter->pumpable, 'exporter stopped');

# ---------------------------------------------------------------------------
# 5: --auto-discover-databases with a database without dedup
# ---------------------------------------------------------------------------

$node->safe_psql('postgres', 'CREATE DATABASE without_dedup');
my ($discover, $dport, $dlog) =
  start_exporter('discover', $dsn, '--auto-discover-databases');
$body = scrape($dport, $dlog);
$m    = parse_metrics($body);
metric_is($m, 'dedup_consumer_claims', \%orders, 3,
	'auto-discovery: the database with dedup is exported');
is(value_of($m, 'dedup_storage_total_bytes', datname => 'without_dedup'),
	undef, 'auto-discovery: nothing for the database without dedup');
metric_is($m, 'pg_exporter_last_scrape_error',
	{}, 1, 'auto-discovery: the database without dedup is a scrape error');
$discover->kill_kill;
like(
	slurp_file($dlog),
	qr/Error running query on database \\"[^"]*\\": dedup_consumer pq: relation \\"dedup_stats\\" does not exist/,
	'auto-discovery: the exporter logs the error the queries file quotes');

# ---------------------------------------------------------------------------
# 7: the recommended layout, as the README installs it
# ---------------------------------------------------------------------------

$node->safe_psql('postgres', 'CREATE DATABASE layout');
$node->safe_psql(
	'layout', q{
CREATE SCHEMA dedup;
CREATE EXTENSION dedup SCHEMA dedup;
CREATE ROLE monitor LOGIN IN ROLE pg_monitor;
ALTER ROLE monitor SET search_path = dedup, public;
SELECT dedup.dedup_claim('layout', 'l-1'), dedup.dedup_claim('layout', 'l-1');
});
my %layout = (datname => 'layout', consumer => 'layout');
my $ldsn =
  sprintf('host=%s port=%d user=monitor dbname=layout sslmode=disable',
	$node->host, $node->port);
my ($lexporter, $lport, $llog) = start_exporter('layout', $ldsn);
$m = parse_metrics(
	scrape($lport, $llog, qr/^pg_exporter_last_scrape_error 1$/m));
is(value_of($m, 'dedup_consumer_claims', %layout),
	undef, 'schema dedup without the grant: no dedup metrics for pg_monitor');
like(
	slurp_file($llog),
	qr/dedup_consumer pq: relation \\"dedup_stats\\" does not exist/,
	'... the exporter logs that it finds no view (a search_path skips a schema without USAGE)'
);

# the install's grant
$node->safe_psql('layout', 'GRANT USAGE ON SCHEMA dedup TO pg_monitor');
$m = parse_metrics(scrape($lport, $llog));
metric_is($m, 'pg_exporter_last_scrape_error', {}, 0,
	'schema dedup with GRANT USAGE ON SCHEMA dedup TO pg_monitor: no scrape error'
);
metric_is($m, 'dedup_consumer_claims', \%layout, 1, 'schema dedup: counters');
metric_is($m, 'dedup_consumer_duplicates', \%layout, 1,
	'schema dedup: counters');
metric_is(
	$m,
	'dedup_storage_sweeper_running',
	{ datname => 'layout' },
	1, 'schema dedup: the sweeper');
is( $node->safe_psql(
		'layout', q{SELECT rolsuper OR rolcreaterole OR rolcreatedb
  FROM pg_roles WHERE rolname = 'monitor'}),
	'f',
	'the role is a plain one');
is( $node->safe_psql(
		'layout', q{SELECT string_agg(b.rolname, ',')
  FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.member
  JOIN pg_roles b ON b.oid = m.roleid WHERE r.rolname = 'monitor'}),
	'pg_monitor',
	'... a member of pg_monitor alone');
$lexporter->kill_kill;

# ---------------------------------------------------------------------------
# 6: promtool
# ---------------------------------------------------------------------------

my ($stdout, $stderr) = ('', '');
ok( IPC::Run::run(
		[ $promtool, 'check', 'rules', $alerts ],
		'>', \$stdout, '2>', \$stderr),
	'promtool check rules dedup_alerts.yml') or diag("$stdout$stderr");
($stdout, $stderr) = ('', '');
ok( IPC::Run::run(
		[ $promtool, 'test', 'rules', $alerts_test ],
		'>', \$stdout, '2>', \$stderr),
	'promtool test rules dedup_alerts_test.yml') or diag("$stdout$stderr");

$node->stop;
done_testing();
