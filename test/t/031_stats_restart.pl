#
# 031_stats_restart.pl: the claim counters across restarts, and the
# observability views without shared_preload_libraries.
#
#   - a clean restart keeps the counters (written to pg_stat/dedup.stat at
#     shutdown, read back at startup);
#   - after a crash they start from zero: counters that may have missed
#     updates are not presented as complete;
#   - without preloading, dedup_stats still answers what the table holds and
#     says why there are no counters, and dedup_stats_reset() refuses with a
#     clear error.
#
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('stats');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'dedup'
dedup.sweep_enabled = off
restart_after_crash = on
});
$node->start;

$node->safe_psql('postgres', q{
CREATE EXTENSION dedup;
SELECT dedup_claim('orders', 'o-' || g) FROM generate_series(1, 4) g;
SELECT dedup_claim('orders', 'o-1');
SELECT dedup_claim('billing', 'b-1');
});

my $counters = q{SELECT string_agg(consumer || ':' || claims || '/' || duplicates, ',' ORDER BY consumer)
  FROM dedup_stats WHERE claims IS NOT NULL};
is($node->safe_psql('postgres', $counters), 'billing:1/0,orders:4/1',
	'counters before the restart');
my $since = $node->safe_psql('postgres',
	q{SELECT counters_since FROM dedup_stats WHERE consumer = 'orders'});

# --- clean restart -----------------------------------------------------------------

$node->stop('fast');
ok(-f $node->data_dir . '/pg_stat/dedup.stat',
	'a clean shutdown writes the counters to pg_stat/dedup.stat');
$node->start;
ok(!-f $node->data_dir . '/pg_stat/dedup.stat',
	'the file is removed once read, so a later crash cannot bring it back');
is($node->safe_psql('postgres', $counters), 'billing:1/0,orders:4/1',
	'a clean restart keeps the counters');
is( $node->safe_psql(
		'postgres',
		q{SELECT counters_since FROM dedup_stats WHERE consumer = 'orders'}),
	$since,
	'... and when they started');
$node->safe_psql('postgres', q{SELECT dedup_claim('orders', 'o-1')});
is($node->safe_psql('postgres', $counters), 'billing:1/0,orders:4/2',
	'counting goes on from the restored values');

# --- crash ----------------------------------------------------------------------

# a process with shared memory access dies by SIGKILL: the postmaster
# reinitializes shared memory, as after any crash
my $launcher = $node->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'dedup sweeper launcher'});
like($launcher, qr/^\d+$/, 'the launcher runs');
kill 'KILL', $launcher;
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'dedup sweeper launcher'
	  AND pid <> } . $launcher)
  or die 'the server did not come back after the crash';
like(slurp_file($node->logfile), qr/all server processes terminated; reinitializing/,
	'the server went through crash recovery');
is($node->safe_psql('postgres', $counters), '',
	'after a crash the counters start from zero');
is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FROM processed_messages}),
	'5',
	'the claims themselves survive the crash');
$node->safe_psql('postgres', q{SELECT dedup_claim('orders', 'o-1')});
is($node->safe_psql('postgres', $counters), 'orders:0/1',
	'and counting starts again');

# --- not preloaded ---------------------------------------------------------------

$node->stop('fast');
$node->append_conf('postgresql.conf', qq{shared_preload_libraries = ''});
$node->start;
$node->safe_psql('postgres', q{SELECT dedup_claim('orders', 'o-new')});
is( $node->safe_psql(
		'postgres',
		q{SELECT consumer, claims IS NULL, counters FROM dedup_stats ORDER BY 1}),
	"billing|t|unavailable: dedup is not in shared_preload_libraries\n"
	  . "orders|t|unavailable: dedup is not in shared_preload_libraries",
	'without preloading, the view lists the consumers and says why there are no counters');
is( $node->safe_psql(
		'postgres',
		q{SELECT consumers, sweeper_running FROM dedup_storage}),
	'2|f',
	'dedup_storage answers from the table, and shows no sweeper');
my ($ret, $out, $err) = $node->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT dedup_stats_reset()");
like($err, qr/ERROR:  55000: dedup claim counters are not available/,
	'dedup_stats_reset() refuses clearly without preloading');

$node->stop;
done_testing();
