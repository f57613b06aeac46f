#
# 032_stats_bounds.pl: the claim counters take a fixed amount of shared
# memory, however many consumers claim.
#
#   - with dedup.max_consumers = 10, claims of 3000 distinct consumers count
#     10 consumers exactly; the other claims are counted in a total that
#     dedup_stats shows in its counters column, and the filling up is
#     logged once, naming the first consumer left out and its database;
#   - the lock table can still grow to its full size: one transaction takes
#     more locks than the lock table has preallocated (the part it must
#     take from shared memory's spare space, which counters used to eat);
#   - a clean restart keeps the 10 consumers and the total; a smaller
#     dedup.max_consumers at restart restores no more consumers than it
#     allows, and says so; dedup_stats_reset() clears the total.
#
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('bounds');
$node->init;
# 64 locks per transaction for 32 backends (10 + 3 autovacuum workers + the
# launcher + 8 worker processes + 10 WAL senders): a lock table of 2048
# entries, of which 1024 are preallocated
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'dedup'
dedup.sweep_enabled = off
dedup.max_consumers = 10
max_connections = 10
max_locks_per_transaction = 64
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dedup');

my $counted = q{SELECT count(*), sum(claims) FROM dedup_stats WHERE claims IS NOT NULL};
my $status = q{SELECT dedup_counters_status()};

my $offset = -s $node->logfile;
is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FILTER (WHERE c) FROM
		  (SELECT dedup_claim('c' || g, 'm') AS c FROM generate_series(1, 3000) g) s}),
	'3000',
	'3000 distinct consumers claim');
is($node->safe_psql('postgres', $counted), '10|10', 'exactly 10 consumers are counted');
is( $node->safe_psql('postgres',
		q{SELECT DISTINCT counters FROM dedup_stats WHERE consumer IN ('c1', 'c2999')}),
	'on; 2990 claims of untracked consumers (dedup.max_consumers = 10 reached)',
	'the counters column tells how many claims were not counted');
$node->safe_psql('postgres', q{SELECT dedup_claim('c3000', 'm2')});
is( $node->safe_psql('postgres', $status),
	'on; 2991 claims of untracked consumers (dedup.max_consumers = 10 reached)',
	'... and goes on counting them');
my $log = slurp_file($node->logfile, $offset);
my $full =
  qr/LOG:  dedup claim counters are full: claims of consumer "c11" in database "postgres" are not counted/;
like($log, $full, 'the filling up is logged, naming the first consumer left out');
is(scalar(() = $log =~ /dedup claim counters are full/g), 1, '... once');
like($log, qr/HINT:  Raise dedup.max_consumers/, '... with the setting to raise');

# more locks than the lock table's preallocated 1024 entries
my ($ret, $out, $err) = $node->psql('postgres', q{
BEGIN;
SELECT count(*) FROM (SELECT pg_advisory_xact_lock(g) FROM generate_series(1, 1800) g) s;
COMMIT;});
is($ret, 0, 'a transaction can still take 1800 locks') or diag $err;
is($out, '1800', '... all of them');

# --- restarts ---------------------------------------------------------------

$node->restart;
is($node->safe_psql('postgres', $counted), '10|10',
	'after a clean restart, still 10 consumers counted');
is( $node->safe_psql('postgres', $status),
	'on; 2991 claims of untracked consumers (dedup.max_consumers = 10 reached)',
	'... and the total of untracked claims is kept');

$node->safe_psql('postgres', 'SELECT dedup_stats_reset()');
is($node->safe_psql('postgres', $counted), '0|',
	'dedup_stats_reset() forgets the counters');
is($node->safe_psql('postgres', $status), 'on',
	'... and the total of untracked claims');
$node->safe_psql('postgres', q{SELECT dedup_claim('again', 'm')});

$node->append_conf('postgresql.conf', 'dedup.max_consumers = 20');
$node->restart;
$node->safe_psql('postgres',
	q{SELECT dedup_claim('d' || g, 'm') FROM generate_series(1, 30) g});
is($node->safe_psql('postgres', $counted), '20|20',
	'dedup.max_consumers = 20: 20 consumers counted');
$node->append_conf('postgresql.conf', 'dedup.max_consumers = 10');
$offset = -s $node->logfile;
$node->restart;
is($node->safe_psql('postgres', $counted), '10|10',
	'restarted with dedup.max_consumers = 10: 10 consumers restored');
like(
	slurp_file($node->logfile, $offset),
	qr/LOG:  dedup: the counters of 10 consumers were not restored/,
	'... and the log says how many were not');

$node->stop;
done_testing();
