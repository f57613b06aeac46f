#
# 040_pgbouncer.pl: RabbitMQ consumers claiming through pgbouncer in
# transaction pooling mode.
#
# Real parts: a private RabbitMQ node, Debian's pgbouncer (1.18) with
# pool_mode = transaction and a pool of 2 server connections, the consumers
# of 014 (doc/examples/rabbitmq_consumer.py, pika) on psycopg 3 (prepare_threshold =
# None, which pgbouncer < 1.21 needs) and on psycopg2, all as role "app",
# calling dedup.dedup_claim schema-qualified (the extension lives in schema
# "dedup", as the README recommends behind a pooler).  Every application of
# a message records, by column defaults evaluated in its transaction, the
# server backend (pg_backend_pid()), the search_path it ran with and what an
# unqualified dedup_claim(text, text) would have resolved to.
#
# Phase A, server_reset_query_always = 0: role "app" has search_path =
# hostile for the database (ALTER ROLE ... IN DATABASE ... SET), so every
# server connection of the pool starts with it, and the pooler hands it to
# its clients on every PostgreSQL version (18 reports search_path, and a
# pgbouncer that tracks it, such as Debian sid's, gives each client the
# value its server connection started with: hostile); another client of the
# same pool (same database and role) sets search_path = hostile and
# noise.planted = hostile over and over, session settings that a pool
# without DISCARD ALL leaves on the server connection for the next client
# (search_path before 18 only; noise.planted, which the server never
# reports, on every version); schema "hostile" has a dedup_claim that
# always says true and look-alike accounts, applied and processed_messages
# tables.  The consumers fail like 014's: one commits 5 messages and dies
# before acking, one dies inside a transaction (pgbouncer must not hand
# that transaction to anybody), one nacks committed messages, two run
# steadily, all at once.  Asserted: every message applied exactly once (150
# messages, 5 published twice), balances, claims = messages; the
# duplicates are exactly the extra copies + the committed-unacked + the
# nacked deliveries; each concurrent consumer's transactions ran on more
# than one server backend, and all of them on at most 2 (the pool); every
# application ran with search_path = hostile (rows show it, and that an
# unqualified call would have gone to hostile.dedup_claim), and some with
# the noisy client's noise.planted, yet nothing was misdirected: hostile.*
# stayed empty and its function was never called.
#
# Phase B, server_reset_query_always = 1 (DISCARD ALL after every
# transaction), the role's search_path reset: the same noise, two
# consumers; every message applied once, no consumer transaction ran with
# the hostile search_path or noise.planted, and the noisy client's own next
# transaction never had noise.planted (nor, before 18, the search_path,
# which a pgbouncer that tracks it sets again for the client that set it).
#
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupBroker;
use DedupConsumers;
use DedupNode;
use DedupPgbouncer;
use DedupTools;
use PostgreSQL::Test::Utils;
use Test::More;

my $python = require_tools(
	modules  => [ 'pika', 'psycopg2', 'psycopg' ],
	programs =>
	  [ '/usr/sbin/pgbouncer', '/usr/lib/rabbitmq/bin/rabbitmq-server' ]);
my $tmp = PostgreSQL::Test::Utils::tempdir;

my $broker = DedupBroker->start(dir => "$tmp/rabbitmq", python => $python);
BAIL_OUT($broker->{error}) if $broker->{error};

my $node = DedupNode->create('bouncer', conf => { max_connections => 40 });
my $db   = 'bank';
$node->safe_psql('postgres', "CREATE DATABASE $db");

# "applied" also records, per application, the server connection, its
# search_path and what an unqualified dedup_claim would have been there
$node->safe_psql(
	$db,
	consumer_tables_sql(
		'backend int NOT NULL DEFAULT pg_backend_pid()',
		q{search_path text NOT NULL DEFAULT current_setting('search_path')},
		q{unqualified oid DEFAULT to_regprocedure('dedup_claim(text, text)')},
		q{planted text DEFAULT current_setting('noise.planted', true)})
	  . q{
CREATE SCHEMA dedup;
CREATE EXTENSION dedup SCHEMA dedup;
CREATE ROLE app LOGIN;
GRANT USAGE ON SCHEMA dedup TO app;
GRANT EXECUTE ON FUNCTION dedup.dedup_claim(text, text) TO app;
GRANT SELECT, UPDATE ON accounts TO app;
GRANT INSERT ON applied TO app;
-- what a hostile search_path would find first
CREATE SCHEMA hostile;
CREATE TABLE hostile.calls (message_id text);
CREATE TABLE hostile.accounts (LIKE public.accounts);
INSERT INTO hostile.accounts SELECT g, 0 FROM generate_series(1, 5) g;
CREATE TABLE hostile.applied (LIKE public.applied);
CREATE TABLE hostile.processed_messages (consumer_name text, message_id text);
CREATE FUNCTION hostile.dedup_claim(c text, m text) RETURNS boolean
  LANGUAGE sql AS $$ INSERT INTO hostile.calls VALUES (m) RETURNING true $$;
GRANT USAGE ON SCHEMA hostile TO app;
GRANT ALL ON ALL TABLES IN SCHEMA hostile TO app;
});
my $default_path = $node->safe_psql($db, q{SHOW search_path});

# phase A's server connections start with the hostile search_path
$node->safe_psql($db,
	qq{ALTER ROLE app IN DATABASE $db SET search_path = hostile});

$broker->ready_ok;

sub pgbouncer
{
	my ($name, $reset_always) = @_;
	my $b = start_pgbouncer(
		dir      => "$tmp/$name",
		host     => $node->host,
		port     => $node->port,
		dbname   => $db,
		users    => [ 'postgres', 'app' ],
		settings => {
			default_pool_size         => 2,
			server_round_robin        => 1,
			server_reset_query        => 'DISCARD ALL',
			server_reset_query_always => $reset_always,
			max_client_conn           => 100,
		});
	ok($b->{ready},
		"$name: pgbouncer (server_reset_query_always = $reset_always) listens on port $b->{port}"
	) or BAIL_OUT($b->{error});
	return $b;
}

# the consumers of a pool, as role "app", calling dedup.dedup_claim
sub consumers_of
{
	my ($bouncer) = @_;
	return DedupConsumers->new(
		python => $python,
		dir    => $tmp,
		broker => $broker,
		node   => $node,
		db     => $db,
		host   => '127.0.0.1',
		port   => $bouncer->{port});
}
my @as_app = ('--user', 'app', '--qualify', 'dedup', '--work-ms', 2);

# $n messages, published (every $twice_every-th one twice: a producer retry)
my %balance;

sub publish
{
	my ($queue, $prefix, $n, $twice_every) = @_;
	my @messages = payments($prefix, $n);
	my @copies   = map {
		(   $_,
			$twice_every
			  && $_->{message_id} =~ /(\d+)$/
			  && $1 % $twice_every == 0 ? $_ : ())
	} @messages;
	my $sums = balances(@messages);
	$balance{$_} += $sums->{$_} for keys %$sums;
	$broker->publish_ok($queue, \@copies,
			"$queue: "
		  . scalar(@copies)
		  . " copies of $n messages published and confirmed");
	return (\@messages, \@copies);
}

sub finish_noise
{
	my ($consumers, $h, $worker) = @_;
	my ($code) = $consumers->stop($h);
	is($code, 0, "$worker stopped cleanly")
	  or diag($consumers->stderr_of($worker));
	my ($r) = $consumers->records($worker);
	return $r // {};
}

# ---------------------------------------------------------------------------
# phase A: a pool that keeps session settings (server_reset_query_always = 0)
# ---------------------------------------------------------------------------

my $pa = pgbouncer('pgbouncer-a', 0);
my $ca = consumers_of($pa);
my ($msgs_a, $copies_a) = publish('payments-a', 'a', 150, 30);
my $ctl_a = $ca->control('control-a');
signal($ctl_a, 'go');
my $noise_a = $ca->start_noise('noise-a', $ctl_a, '--user', 'app');
ok( $node->poll_query_until(
		$db,
		q{SELECT count(*) > 0 FROM pg_stat_activity WHERE query LIKE 'SELECT current_setting%'}
	),
	'phase A: the noisy client runs through the pool');

for my $crash (
	[ 'crash-after-commit',  'die-after-commit',  'psycopg3', 3 ],
	[ 'crash-before-commit', 'die-before-commit', 'psycopg2', 4 ])
{
	my ($worker, $behaviour, $driver, $code) = @$crash;
	is( $ca->run(
			$worker,    'payments-a', $behaviour, $ctl_a,
			'--driver', $driver,      @as_app),
		$code,
		"phase A: $worker ($driver) died as planned (exit code $code)"
	) or diag($ca->stderr_of($worker));
}

my $ctl_c      = $ca->control('control-a-concurrent');
my @concurrent = (
	[ 'nacker',   'nack',   'psycopg3' ],
	[ 'steady-1', 'steady', 'psycopg2' ],
	[ 'steady-2', 'steady', 'psycopg3' ]);
my @h = map {
	$ca->start($_->[0], 'payments-a', $_->[1], $ctl_c, '--driver', $_->[2],
		@as_app)
} @concurrent;
ok($ca->wait_ready(map { $_->[0] } @concurrent),
	'phase A: three concurrent consumers connected through pgbouncer');
signal($ctl_c, 'go');
my @workers_a =
  ('crash-after-commit', 'crash-before-commit', map { $_->[0] } @concurrent);
ok($ca->wait_drained('payments-a', scalar(@$copies_a), @workers_a),
	'phase A: queue drained, every copy acked');
signal($ctl_c, 'stop');
signal($ctl_a, 'stop');
is(join(',', $ca->stop(@h)),
	'0,0,0', 'phase A: concurrent consumers stopped cleanly');
my $noise_res = finish_noise($ca, $noise_a, 'noise-a');
cmp_ok($noise_res->{sets} // 0, '>', 0,
	"phase A: the noisy client set search_path and noise.planted = hostile $noise_res->{sets} times"
);

my @d    = $ca->deliveries(@workers_a);
my $acks = grep { $_->{action} eq 'ack' } @d;
is($acks, scalar(@$copies_a), 'phase A: each copy acked exactly once');
my $false   = grep { !$_->{claim} && exists $_->{claim} } @d;
my $unacked = grep { $_->{action} eq 'commit-no-ack' } @d;
my $nacked  = grep { $_->{action} eq 'nack' } @d;
my $died    = grep { $_->{action} eq 'die-before-commit' } @d;
is($unacked, 5, 'phase A: 5 committed and never acked (crash-after-commit)');
is($died, 1,
	'phase A: 1 claimed and died before its commit (crash-before-commit)');
cmp_ok($nacked, '>=', 1, "phase A: $nacked committed and nacked");
is( $false,
	@$copies_a - @$msgs_a + $unacked + $nacked,
	"phase A: duplicates suppressed ($false) = producer retries (5) + committed-unacked (5) + nacked ($nacked)"
);
$ca->check_exactly_once(
	like     => 'a-%',
	messages => $msgs_a,
	records  => 'dedup.processed_messages',
	balances => \%balance,
	label    => 'phase A');

# pooling: transactions of one client on several server connections, all on
# the pool's two
for my $w (map { $_->[0] } @concurrent)
{
	my ($distinct, $switches) = split /\|/, $node->safe_psql(
		$db, qq{
SELECT count(DISTINCT backend),
       count(*) FILTER (WHERE backend <> prev)
  FROM (SELECT backend, lag(backend) OVER (ORDER BY split_part(split_part(attempt, ':', 2), '.', 1)::int) AS prev
          FROM applied WHERE worker = '$w' AND message_id LIKE 'a-%') s});
	cmp_ok($distinct, '>', 1,
		"phase A: $w\'s transactions ran on $distinct server backends ($switches switches between successive ones)"
	);
}
my $all = $node->safe_psql($db,
	q{SELECT count(DISTINCT backend) FROM applied WHERE worker IN ('nacker', 'steady-1', 'steady-2')}
);
cmp_ok($all, '<=', 2,
	"phase A: three consumers and the noisy client shared $all server connections (pool size 2)"
);

# the hostile search_path reached the consumers, and misdirected nothing
my ($applications, $leaked, $would, $planted) = split /\|/, $node->safe_psql(
	$db, q{
SELECT count(*), count(*) FILTER (WHERE search_path = 'hostile'),
       count(*) FILTER (WHERE unqualified = 'hostile.dedup_claim(text, text)'::regprocedure),
       count(*) FILTER (WHERE planted = 'hostile')
  FROM applied WHERE message_id LIKE 'a-%'});
is($leaked, $applications,
	"phase A: all $applications applications ran with search_path = hostile, the role's setting the pool passed on"
);
cmp_ok($planted, '>', 0,
	"phase A: $planted applications ran on a server connection left with noise.planted = hostile by another client"
);
is($would, $applications,
	'phase A: ... where an unqualified dedup_claim would have been hostile.dedup_claim'
);
is( $node->safe_psql(
		$db,
		q{SELECT (SELECT count(*) FROM hostile.calls) + (SELECT count(*) FROM hostile.applied)
  + (SELECT count(*) FROM hostile.processed_messages) + (SELECT sum(balance) FROM hostile.accounts)}
	),
	'0',
	'phase A: nothing misdirected: hostile.dedup_claim never called, hostile tables untouched'
);
my $stats = $node->safe_psql($db,
	q{SELECT claims, duplicates FROM dedup.dedup_stats WHERE consumer = 'ledger'}
);
is( $stats,
	(@$msgs_a + $died) . "|$false",
	'phase A: dedup_stats: claims = 150 + 1 rolled back, duplicates = those the consumers saw'
);
ok(defined stop_pgbouncer($pa), 'phase A: pgbouncer stopped on SIGTERM');
$node->safe_psql($db, qq{ALTER ROLE app IN DATABASE $db RESET search_path});

# ---------------------------------------------------------------------------
# phase B: server_reset_query_always = 1
# ---------------------------------------------------------------------------

my $pb = pgbouncer('pgbouncer-b', 1);
my ($msgs_b, $copies_b) = publish('payments-b', 'b', 100, 0);
my $cb      = consumers_of($pb);
my $ctl_b   = $cb->control('control-b');
my $noise_b = $cb->start_noise('noise-b', $ctl_b, '--user', 'app');
my @hb      = (
	$cb->start(
		'reset-1',  'payments-b', 'steady', $ctl_b,
		'--driver', 'psycopg3',   @as_app),
	$cb->start(
		'reset-2',  'payments-b', 'steady', $ctl_b,
		'--driver', 'psycopg2',   @as_app));
ok($cb->wait_ready('reset-1', 'reset-2'), 'phase B: two consumers connected');
signal($ctl_b, 'go');
ok( $cb->wait_drained('payments-b', scalar(@$copies_b), 'reset-1', 'reset-2'),
	'phase B: queue drained');
signal($ctl_b, 'stop');
is(join(',', $cb->stop(@hb)), '0,0', 'phase B: consumers stopped cleanly');
$noise_res = finish_noise($cb, $noise_b, 'noise-b');
cmp_ok($noise_res->{sets} // 0, '>', 0,
	"phase B: the noisy client set search_path and noise.planted = hostile $noise_res->{sets} times"
);
is($noise_res->{saw_planted}, 0,
	'phase B: ... and its next transaction never had noise.planted (DISCARD ALL after each transaction)'
);

# PostgreSQL 18 reports search_path to clients, and pgbouncer then gives the
# noisy client the search_path it set back at each of its transactions
if ($node->pg_version >= 18)
{
	is($noise_res->{saw_hostile}, $noise_res->{statements},
		'phase B: PostgreSQL 18: ... while pgbouncer set the search_path it had set again for each of its transactions'
	);
}
else
{
	is($noise_res->{saw_hostile}, 0,
		'phase B: ... nor the search_path (DISCARD ALL after each transaction)'
	);
}
$cb->check_exactly_once(
	like     => 'b-%',
	messages => $msgs_b,
	records  => 'dedup.processed_messages',
	balances => \%balance,
	label    => 'phase B');
is( $node->safe_psql(
		$db,
		qq{SELECT count(*) FROM applied WHERE message_id LIKE 'b-%' AND (search_path <> '$default_path' OR planted = 'hostile')}
	),
	'0',
	"phase B: every consumer transaction ran with search_path = $default_path and without noise.planted"
);
cmp_ok(
	$node->safe_psql(
		$db,
		q{SELECT min(n) FROM (SELECT count(DISTINCT backend) n FROM applied WHERE message_id LIKE 'b-%' GROUP BY worker) s}
	),
	'>', 1,
	'phase B: each consumer still used several server backends');
ok(defined stop_pgbouncer($pb), 'phase B: pgbouncer stopped on SIGTERM');

$broker->stop_ok;
$node->stop;
done_testing();
