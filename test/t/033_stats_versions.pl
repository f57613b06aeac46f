#
# 033_stats_versions.pl: the claim counters under both SQL definitions of
# dedup_claim_counters() served by one library.
#
#   - a database still on the 1.0 SQL objects (CREATE EXTENSION dedup
#     VERSION '1.0') reads dedup_stats through the 1.0 definition (8
#     columns, C symbol dedup_claim_counters) with the 1.1 library, with the
#     1.0 meaning: a deadlock is counted as a serialization failure;
#   - after ALTER EXTENSION dedup UPDATE, the same counters show through the
#     1.1 definition (dedup_claim_counters_1_1): deadlocks apart, times, and
#     pg_monitor may still read them;
#   - a definition whose columns do not match the C function it names is an
#     error, not a crash.
#
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupNode;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = DedupNode->create(
	'versions',
	sweeps => 'off',
	conf   => { deadlock_timeout => '50ms' });

$node->safe_psql(
	'postgres', q{
CREATE EXTENSION dedup VERSION '1.0';
CREATE ROLE monitor LOGIN;
GRANT pg_monitor TO monitor;
});
is( $node->safe_psql(
		'postgres',
		q{SELECT extversion FROM pg_extension WHERE extname = 'dedup'}),
	'1.0',
	'the 1.0 SQL objects are installed');

# two sessions claim x and y in opposite orders: one claim is cancelled by
# the deadlock detector, the other waits and then claims
my $s1 = $node->background_psql('postgres', on_error_stop => 0);
my $s2 = $node->background_psql('postgres', on_error_stop => 0);
$s1->query_safe(q{BEGIN; SELECT dedup_claim('versions', 'x')});
$s2->query_safe(q{BEGIN; SELECT dedup_claim('versions', 'y')});
$s2->query_until(qr/sent/,
	"\\echo sent\nSELECT dedup_claim('versions', 'x');\n");
$s1->query(q{SELECT dedup_claim('versions', 'y')});
$s1->query('ROLLBACK');
$s2->query('ROLLBACK');
$s1->quit;
$s2->quit;
like(
	slurp_file($node->logfile),
	qr/ERROR:  deadlock detected/,
	'the two sessions deadlocked');

my $v10 =
  q{SELECT claims || '/' || duplicates || '/' || lock_waits || '/' || serialization_failures
  FROM dedup_stats WHERE consumer = 'versions'};
is( $node->safe_psql('postgres', $v10),
	'3/0/2/1',
	'1.0: claims, duplicates, lock waits, and the deadlock as a serialization failure'
);
is( $node->safe_psql(
		'postgres',
		q{SELECT pg_catalog.array_length(proallargtypes, 1) || ' ' || prosrc
		    FROM pg_proc WHERE proname = 'dedup_claim_counters'}),
	'8 dedup_claim_counters',
	'1.0: the 8-column definition, C symbol dedup_claim_counters');
is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FROM pg_attribute
		   WHERE attrelid = 'dedup_stats'::regclass AND attname = 'total_claim_time'}
	),
	'0',
	'1.0: dedup_stats has no claim times');
is($node->safe_psql('postgres', $v10, extra_params => [ '-U', 'monitor' ]),
	'3/0/2/1', '1.0: pg_monitor reads dedup_stats');

# --- the update -------------------------------------------------------------

$node->safe_psql('postgres', q{ALTER EXTENSION dedup UPDATE TO '1.1'});
is( $node->safe_psql(
		'postgres',
		q{SELECT extversion FROM pg_extension WHERE extname = 'dedup'}),
	'1.1',
	'updated to 1.1');
is( $node->safe_psql(
		'postgres',
		q{SELECT pg_catalog.array_length(proallargtypes, 1) || ' ' || prosrc
		    FROM pg_proc WHERE proname = 'dedup_claim_counters'}),
	'15 dedup_claim_counters_1_1',
	'1.1: the 15-column definition, C symbol dedup_claim_counters_1_1');

my $v11 =
  q{SELECT claims || '/' || duplicates || '/' || lock_waits || '/' || serialization_failures
       || '/' || deadlocks || '/' || lock_timeouts || '/' || cancels || '/' || other_errors
       || ' ' || (total_claim_time > 0) || ' ' || (max_claim_time >= mean_claim_time)
       || ' ' || (total_lock_wait_time > 0)
  FROM dedup_stats WHERE consumer = 'versions'};
is( $node->safe_psql('postgres', $v11),
	'3/0/2/0/1/0/0/0 true true true',
	'1.1: the same counters, the deadlock apart, with times');
is( $node->safe_psql('postgres', $v11, extra_params => [ '-U', 'monitor' ]),
	'3/0/2/0/1/0/0/0 true true true',
	'1.1: pg_monitor reads dedup_stats');
is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FROM dedup_claim_counters()},
		extra_params => [ '-U', 'monitor' ]),
	'1',
	'1.1: pg_monitor may call dedup_claim_counters()');

# --- definitions that do not match their C function -----------------------

$node->safe_psql(
	'postgres', q{
CREATE FUNCTION counters_8_as_1_1(
	OUT consumer text, OUT claims bigint, OUT duplicates bigint, OUT lock_waits bigint,
	OUT serialization_failures bigint, OUT last_claim_at timestamptz,
	OUT last_duplicate_at timestamptz, OUT counters_since timestamptz)
RETURNS SETOF record AS '$libdir/dedup', 'dedup_claim_counters_1_1' LANGUAGE C;
CREATE FUNCTION counters_9_as_1_0(
	OUT consumer text, OUT claims bigint, OUT duplicates bigint, OUT lock_waits bigint,
	OUT serialization_failures bigint, OUT last_claim_at timestamptz,
	OUT last_duplicate_at timestamptz, OUT counters_since timestamptz, OUT deadlocks bigint)
RETURNS SETOF record AS '$libdir/dedup', 'dedup_claim_counters' LANGUAGE C;
});
for my $f (qw(counters_8_as_1_1 counters_9_as_1_0))
{
	my ($ret, $out, $err) = $node->psql('postgres', "SELECT * FROM $f()");
	like(
		$err,
		qr/ERROR:  incorrect number of output arguments/,
		"$f: a mismatched definition is an error");
}
is($node->safe_psql('postgres', 'SELECT 1'), '1', 'the server is still up');

$node->stop;
done_testing();
