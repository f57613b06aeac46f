#
# 032_stats_bounds.pl: the claim counters take a fixed amount of shared
# memory, however many consumers claim.
#
#   - with dedup.max_consumers = 10, claims of 3000 distinct consumers count
#     10 consumers exactly: each consumer that finds the table full evicts
#     the least used entry; the number of evicted entries is shown in
#     dedup_stats' counters column, and the first eviction is logged once,
#     naming the consumer that needed room and its database;
#   - the lock table can still grow to its full size: one transaction takes
#     more locks than the lock table has preallocated (the part it must
#     take from shared memory's spare space, which counters used to eat);
#   - a clean restart keeps the 10 consumers and the number of evictions; a
#     smaller dedup.max_consumers at restart restores no more consumers than
#     it allows, and says so; dedup_stats_reset() clears the number;
#   - one database cannot starve another's counters: a role that claims for
#     30 junk consumers in one database, in a transaction it rolls back,
#     fills the table, and a consumer of another database is still counted;
#     the least used entries give way (the least recently active among
#     equals), a consumer with many claims survives every flood; a failed
#     claim of a new consumer evicts too;
#   - usage counts calls, not keys: a flood of rolled-back calls that each
#     claim 10000 offsets, or a batch of 10000 copies of one id, for a new
#     junk consumer evicts the junk, and a consumer of another database
#     with 50 claims keeps its counters; one that claimed twice and then
#     stopped is evicted in time, as its calls age.
#
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupNode;
use PostgreSQL::Test::Utils;
use Test::More;

# 64 locks per transaction for 32 backends (10 + 3 autovacuum workers + the
# launcher + 8 worker processes + 10 WAL senders): a lock table of 2048
# entries, of which 1024 are preallocated
my $node = DedupNode->create(
	'bounds',
	sweeps => 'off',
	conf   => {
		'dedup.max_consumers'     => 10,
		max_connections           => 10,
		max_locks_per_transaction => 64,
	});
$node->safe_psql('postgres', 'CREATE EXTENSION dedup');

my $counted =
  q{SELECT count(*), sum(claims) FROM dedup_stats WHERE claims IS NOT NULL};
my $status = q{SELECT dedup_counters_status()};

my $offset = -s $node->logfile;
is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FILTER (WHERE c) FROM
		  (SELECT dedup_claim('c' || g, 'm') AS c FROM generate_series(1, 3000) g) s}
	),
	'3000',
	'3000 distinct consumers claim');
is($node->safe_psql('postgres', $counted),
	'10|10', 'exactly 10 consumers are counted');
is( $node->safe_psql(
		'postgres',
		q{SELECT DISTINCT counters FROM dedup_stats WHERE consumer IN ('c1', 'c2999')}
	),
	'on; 2990 entries evicted (dedup.max_consumers = 10 reached)',
	'the counters column tells how many entries were evicted');
$node->safe_psql('postgres', q{SELECT dedup_claim('c3001', 'm')});
is( $node->safe_psql('postgres', $status),
	'on; 2991 entries evicted (dedup.max_consumers = 10 reached)',
	'... and goes on counting them');
is( $node->safe_psql(
		'postgres',
		q{SELECT claims FROM dedup_stats WHERE consumer = 'c3001'}),
	'1',
	'... the newest consumer is counted');
my $log = slurp_file($node->logfile, $offset);
my $full =
  qr/LOG:  dedup claim counters are full: the counters of 1 least used consumer were evicted to count consumer 'c11' in database 'postgres'/;
like($log, $full,
	'the first eviction is logged, naming the consumer that needed room');
is(scalar(() = $log =~ /dedup claim counters are full/g), 1, '... once');
like(
	$log,
	qr/HINT:  Raise dedup.max_consumers/,
	'... with the setting to raise');

# more locks than the lock table's preallocated 1024 entries
my ($ret, $out, $err) = $node->psql(
	'postgres', q{
BEGIN;
SELECT count(*) FROM (SELECT pg_advisory_xact_lock(g) FROM generate_series(1, 1800) g) s;
COMMIT;});
is($ret, 0,      'a transaction can still take 1800 locks') or diag $err;
is($out, '1800', '... all of them');

# --- restarts ---------------------------------------------------------------

$node->restart;
is($node->safe_psql('postgres', $counted),
	'10|10', 'after a clean restart, still 10 consumers counted');
is( $node->safe_psql('postgres', $status),
	'on; 2991 entries evicted (dedup.max_consumers = 10 reached)',
	'... and the number of evicted entries is kept');

$node->safe_psql('postgres', 'SELECT dedup_stats_reset()');
is($node->safe_psql('postgres', $counted),
	'0|', 'dedup_stats_reset() forgets the counters');
is($node->safe_psql('postgres', $status),
	'on', '... and the number of evicted entries');
$node->safe_psql('postgres', q{SELECT dedup_claim('again', 'm')});

$node->append_conf('postgresql.conf', 'dedup.max_consumers = 20');
$node->restart;
$node->safe_psql('postgres',
	q{SELECT dedup_claim('d' || g, 'm') FROM generate_series(1, 30) g});
is($node->safe_psql('postgres', $counted),
	'20|20', 'dedup.max_consumers = 20: 20 consumers counted');
$node->append_conf('postgresql.conf', 'dedup.max_consumers = 10');
$offset = -s $node->logfile;
$node->restart;
is($node->safe_psql('postgres', $counted),
	'10|10',
	'restarted with dedup.max_consumers = 10: 10 consumers restored');
like(
	slurp_file($node->logfile, $offset),
	qr/LOG:  dedup: the counters of 10 consumers were not restored/,
	'... and the log says how many were not');

# --- one database cannot starve another's counters -------------------------------

# the table is empty again, and no eviction is counted
$node->safe_psql('postgres', 'SELECT dedup_stats_reset()');
is($node->safe_psql('postgres', $status), 'on', 'counters start from zero');
$node->safe_psql(
	'postgres', q{
CREATE DATABASE db1;
CREATE DATABASE db2;
CREATE ROLE flooder LOGIN;
});
$node->safe_psql(
	'db1', q{
CREATE EXTENSION dedup;
GRANT EXECUTE ON FUNCTION dedup_claim(text, text) TO flooder;
});
$node->safe_psql('db2', 'CREATE EXTENSION dedup');

# an established consumer in each database
$node->safe_psql('db1',
	q{SELECT dedup_claim('ledger', 'l-' || g) FROM generate_series(1, 20) g});
$node->safe_psql('db2',
	q{SELECT dedup_claim('orders', 'o-' || g) FROM generate_series(1, 5) g});

# 30 junk consumers, claimed and rolled back: 8 fill the table, 22 evict
my $flood = q{
BEGIN;
SELECT count(*) FROM (SELECT dedup_claim('junk-' || g, 'm') FROM generate_series(1, 30) g) s;
ROLLBACK;};
is($node->safe_psql('db1', $flood, extra_params => [ '-U', 'flooder' ]),
	'30', 'a role of db1 claims for 30 junk consumers and rolls back');
is( $node->safe_psql('db2', $status),
	'on; 22 entries evicted (dedup.max_consumers = 10 reached)',
	'db2 sees the evictions');

my $claims = q{SELECT claims FROM dedup_stats WHERE consumer = };
$node->safe_psql('db2', q{SELECT dedup_claim('payments', 'p-1')});
is($node->safe_psql('db2', $claims . q{'payments'}),
	'1', 'a new consumer of db2 is counted after the flood of db1');
is( $node->safe_psql('db2', $status),
	'on; 23 entries evicted (dedup.max_consumers = 10 reached)',
	'... by evicting one entry');
is($node->safe_psql('db2', $claims . q{'orders'}),
	'5', 'the established consumer of db2 kept its counters');
is($node->safe_psql('db1', $claims . q{'ledger'}),
	'20', '... and so did that of db1');

# among entries with one claim each, the least recently active give way:
# 7 more consumers of db2, one statement each, evict the 7 junk consumers
# left, not payments
$node->safe_psql('db2',
	join('', map { "SELECT dedup_claim('refunds-$_', 'r');\n" } 1 .. 7));
is( $node->safe_psql(
		'db2',
		q{SELECT string_agg(consumer || ':' || claims, ',' ORDER BY consumer)
		  FROM dedup_stats WHERE claims IS NOT NULL AND consumer NOT LIKE 'refunds-%'}
	),
	'orders:5,payments:1',
	'among equally used entries, the least recently active are evicted');
is( $node->safe_psql(
		'db1',
		q{SELECT count(*) FROM dedup_stats WHERE consumer LIKE 'junk-%' AND claims IS NOT NULL}
	),
	'0',
	'... the junk of the flood');

# a later flood evicts the junk and the consumers with one claim, never the
# consumers with many
is($node->safe_psql('db1', $flood, extra_params => [ '-U', 'flooder' ]),
	'30', 'another flood of 30 junk consumers');
is($node->safe_psql('db1', $claims . q{'ledger'}),
	'20', 'the consumer with many claims survives it');
is($node->safe_psql('db2', $claims . q{'orders'}),
	'5', '... in both databases');
is( $node->safe_psql(
		'db1',
		q{SELECT count(*) FROM dedup_stats WHERE consumer LIKE 'junk-%' AND claims IS NOT NULL}
	),
	'8',
	'the junk holds the rest of the table');

# a claim that fails gets an entry too, evicting on its error path: a
# record inserted by hand (not counted) holds the key
my $holder = $node->background_psql('db2');
$holder->query_safe(
	q{BEGIN; INSERT INTO processed_messages (consumer_name, message_id) VALUES ('late', 'k')}
);
my ($ret2, $out2, $err2) = $node->psql('db2',
	q{SET lock_timeout = '10ms'; SELECT dedup_claim('late', 'k')});
like(
	$err2,
	qr/canceling statement due to lock timeout/,
	'a claim of a new consumer times out');
$holder->query_safe('ROLLBACK');
$holder->quit;
is( $node->safe_psql(
		'db2',
		q{SELECT claims || '/' || lock_timeouts FROM dedup_stats WHERE consumer = 'late'}
	),
	'0/1',
	'... and is counted, with an entry evicted for it');

# --- calls, not keys --------------------------------------------------------------

# one call that claims 10000 keys weighs what a claim of one key does, so
# rolled-back calls of that size for junk consumers of db1 evict each other,
# not a consumer of db2 that claims steadily, one key at a time
$node->safe_psql(
	'db1', q{
GRANT EXECUTE ON FUNCTION dedup_claim_offsets(text, text, integer, bigint[]) TO flooder;
GRANT EXECUTE ON FUNCTION dedup_claim_many(text, text[]) TO flooder;
});
$node->safe_psql($_, 'SELECT dedup_stats_reset()') for qw(postgres db1 db2);
$node->safe_psql('db2',
	q{SELECT dedup_claim('busy', 'b-' || g) FROM generate_series(1, 50) g});
$node->safe_psql('db2',
	q{SELECT dedup_claim('stopped', 's-' || g) FROM generate_series(1, 2) g});

# a claim by offset counts in two entries, the consumer's and its stream's:
# 120 for 60 calls, of which 8 fill the table
is( $node->safe_psql(
		'db1', q{
BEGIN;
SELECT count(*) FROM (SELECT dedup_claim_offsets('junk-' || i, 's', 0, array_fill(0::bigint, ARRAY[10000]))
						FROM generate_series(1, 60) i) s;
ROLLBACK;},
		extra_params => [ '-U', 'flooder' ]),
	'60',
	'a role of db1 claims 10000 offsets each for 60 junk consumers and rolls back'
);
is( $node->safe_psql('db2', $status),
	'on; 112 entries evicted (dedup.max_consumers = 10 reached)',
	'... evicting 112 entries');
is($node->safe_psql('db2', $claims . q{'busy'}),
	'50', 'the consumer of db2 with 50 claims keeps its counters');
is( $node->safe_psql('db2', $claims . q{'stopped'}),
	'',
	'... one with 2 claims and none since gives way: usage decays at every eviction'
);

$node->safe_psql('db2',
	q{SELECT dedup_claim('busy', 'b2-' || g) FROM generate_series(1, 10) g});
is( $node->safe_psql(
		'db1', q{
BEGIN;
SELECT count(*) FROM (SELECT dedup_claim_many('many-' || i, array_fill('x'::text, ARRAY[10000]))
						FROM generate_series(1, 60) i) s;
ROLLBACK;},
		extra_params => [ '-U', 'flooder' ]),
	'60',
	'a batch of 10000 copies of one id each for 60 more junk consumers, rolled back'
);
is($node->safe_psql('db2', $claims . q{'busy'}),
	'60', 'the consumer that goes on claiming keeps its counters');
is( $node->safe_psql(
		'db1',
		q{SELECT count(*) FROM dedup_stats WHERE consumer LIKE 'many-%' AND claims IS NOT NULL}
	),
	'9',
	'the newest junk holds the rest of the table');

$node->stop;
done_testing();
