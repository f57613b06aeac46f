#
# 050_stream_positions.pl: stream positions (claims by offset) outside one
# server's life: an upgrade from 1.1, a hot standby, pg_dump / pg_restore,
# and the audit trail of positions moved or removed on purpose.
#
#   - ALTER EXTENSION dedup UPDATE from 1.1 creates stream_positions, and
#     claims by offset work at once, beside the records claimed before;
#   - a standby answers dedup_stream_positions with what the primary
#     committed (where to seek after a failover), and refuses to claim or
#     move a position with SQLSTATE 25006;
#   - a dump restored elsewhere carries every position: a replay is still a
#     replay there, the next offset is new;
#   - dedup_set_stream_position and dedup_forget_stream_positions (also
#     through dedup_retire_consumer) each write one "dedup audit" LOG line
#     naming the caller, the consumer, the stream, the partition, the
#     offsets and the transaction, with hostile names as one-line literals.
#
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupNode;

# only dedup's own lines: the statements hold the hostile names below
my $primary = DedupNode->create(
	'streams',
	preload => 0,
	init    => { allows_streaming => 1 },
	conf    => { log_statement    => 'none' });

sub sql { return $primary->safe_psql('postgres', $_[0]); }

# --- an upgrade from 1.1 ---------------------------------------------------------

sql(q{
CREATE ROLE app LOGIN;
CREATE EXTENSION dedup VERSION '1.1';
SELECT dedup_claim('orders-app', 'evt-1');
});
is( sql(q{SELECT count(*) FROM pg_class WHERE relname = 'stream_positions'}),
	'0', '1.1 has no stream positions');
sql(q{ALTER EXTENSION dedup UPDATE TO '1.2'});
is( sql(q{
SELECT dedup_claim_offset('orders-app', 'orders', 0, 41)::text || ' '
    || dedup_claim_offset('orders-app', 'orders', 0, 41)::text || ' '
    || dedup_claim('orders-app', 'evt-1')::text}),
	'true false false',
	'after the update: an offset is claimed once, the 1.1 record is still a duplicate'
);
is( sql(q{
SELECT 'stream_positions'::regclass = ANY (extconfig) FROM pg_extension WHERE extname = 'dedup'}
	),
	't',
	'the positions are user data for pg_dump');

# a few partitions of two streams, some moved by batches
sql(q{
GRANT EXECUTE ON FUNCTION dedup_claim_offset(text, text, integer, bigint),
	dedup_stream_positions(text, text) TO app;
SELECT dedup_claim_offsets('orders-app', 'orders', p, ARRAY[10 * p, 10 * p + 1, 10 * p + 2])
  FROM generate_series(1, 3) p;
SELECT dedup_claim_offset('orders-app', 'payments', 0, 7);
SELECT dedup_claim_offset('audit-app', 'orders', 0, 3);
});
my $positions_query = q{
SELECT string_agg(format('%s/%s/%s/%s', consumer_name, stream, partition, committed_offset),
				  ' ' ORDER BY consumer_name, stream, partition)
  FROM stream_positions};
my $positions = sql($positions_query);
is( $positions,
	'audit-app/orders/0/3 orders-app/orders/0/41 orders-app/orders/1/12 '
	  . 'orders-app/orders/2/22 orders-app/orders/3/32 orders-app/payments/0/7',
	'one row per consumer, stream and partition');

# --- a hot standby ---------------------------------------------------------------

$primary->backup('bkp');
my $standby = DedupNode->new('streams_standby');
$standby->init_from_backup($primary, 'bkp', has_streaming => 1);
$standby->start;
sql(q{SELECT dedup_claim_offset('orders-app', 'orders', 0, 42)});
$primary->wait_for_catchup($standby);

is( $standby->safe_psql(
		'postgres', q{
SET ROLE app;
SELECT string_agg(format('%s/%s/%s', stream, partition, next_offset), ' ' ORDER BY stream, partition)
  FROM dedup_stream_positions('orders-app')}),
	'orders/0/43 orders/1/13 orders/2/23 orders/3/33 payments/0/8',
	'the standby tells an application where to seek, as of the primary\'s last commit'
);
is( $standby->safe_psql(
		'postgres',
		q{SELECT count(*) FROM dedup_stream_positions('orders-app', 'payments')}
	),
	'1',
	'one stream, on the standby');

foreach my $call (
	q{SELECT dedup_claim_offset('orders-app', 'orders', 0, 50)},
	q{SELECT dedup_claim_offsets('orders-app', 'orders', 0, ARRAY[50])},
	q{SELECT dedup_set_stream_position('orders-app', 'orders', 0, 0)},
	q{SELECT dedup_forget_stream_positions('orders-app')})
{
	my ($ret, $out, $err) =
	  $standby->psql('postgres', "\\set VERBOSITY verbose\n$call");
	like(
		$err,
		qr/ERROR:  25006: cannot execute dedup_\w+\(\) during recovery/,
		"standby refuses: $call");
	is($out, '', "no answer on the standby: $call");
}
$standby->stop;

# --- pg_dump / pg_restore -------------------------------------------------------

$positions = sql($positions_query);
my $tmpdir = PostgreSQL::Test::Utils::tempdir;
my @conn   = ('-h', $primary->host, '-p', $primary->port);
$primary->command_ok(
	[ 'pg_dump', @conn, '-Fc', '-f', "$tmpdir/streams.dump", 'postgres' ],
	'pg_dump of a database with stream positions');
sql('CREATE DATABASE restored');
$primary->command_ok(
	[ 'pg_restore', @conn, '-d', 'restored', "$tmpdir/streams.dump" ],
	'pg_restore');
is($primary->safe_psql('restored', $positions_query),
	$positions, 'every position restored');
is( $primary->safe_psql(
		'restored', q{
SELECT dedup_claim_offsets('orders-app', 'orders', 0, ARRAY[42, 43])::text || ' '
    || dedup_claim_offset('orders-app', 'orders', 2, 22)::text}),
	'{f,t} false',
	'in the restored copy, replays are still replays and the next offset is new'
);
is( $primary->safe_psql(
		'restored', q{
SELECT has_function_privilege('app', 'dedup_claim_offset(text, text, integer, bigint)', 'EXECUTE')::text
    || ' ' || has_function_privilege('app', 'dedup_claim_offsets(text, text, integer, bigint[])', 'EXECUTE')::text}
	),
	'true false',
	'the grants travel with the dump, and nothing more');

# --- the audit trail -------------------------------------------------------------

sql(q{
CREATE ROLE operator LOGIN;
GRANT EXECUTE ON FUNCTION dedup_set_stream_position(text, text, integer, bigint),
	dedup_forget_stream_positions(text, text), dedup_retire_consumer(text) TO operator;
});
my $offset = -s $primary->logfile;
my $xid    = $primary->safe_psql(
	'postgres', q{
SET ROLE operator;
BEGIN;
SELECT dedup_set_stream_position('orders-app', 'orders', 1, 5);
SELECT txid_current();
COMMIT;
}, extra_params => ['-tA']);
($xid) = $xid =~ /(\d+)\s*$/;
my $log = $primary->log_since($offset);
like(
	$log,
	qr/LOG:  dedup audit: role 'operator' \(session user 'postgres'\) set the position of consumer 'orders-app' in partition 1 of stream 'orders' to next offset 5 \(it was 13\) in transaction $xid\n/,
	'a position moved on purpose is in the log: who, which, from, to, transaction'
);
is(sql(q{SELECT dedup_claim_offset('orders-app', 'orders', 1, 5)}),
	't', 'and the partition is replayed from there');

$offset = -s $primary->logfile;
$primary->safe_psql(
	'postgres', q{
SET ROLE operator;
SELECT dedup_set_stream_position(E'evil\nLOG:  dedup audit: forged', E'it''s', 0, 9);
SELECT dedup_forget_stream_positions('orders-app', 'payments');
SELECT dedup_retire_consumer('audit-app');
});
$log = $primary->log_since($offset);
like(
	$log,
	qr/dedup audit: role 'operator' \(session user 'postgres'\) set the position of consumer E'evil\\nLOG:  dedup audit: forged' in partition 0 of stream 'it''s' to next offset 9 \(it was unset\) in transaction \d+\n/,
	'hostile names are one-line literals');
is($primary->log_count($offset, qr/^[^']*LOG:  dedup audit: forged/m),
	0, 'no forged line of its own');
like(
	$log,
	qr/dedup audit: role 'operator' \(session user 'postgres'\) deleted 1 stream position of consumer 'orders-app' in stream 'payments' in transaction \d+\n/,
	'forgetting the positions of one stream is in the log');
like(
	$log,
	qr/dedup audit: role 'operator' \(session user 'postgres'\) deleted 1 stream position of consumer 'audit-app' in transaction \d+\n/,
	'so is retiring a consumer with positions, under the caller\'s name');
is( sql(q{SELECT count(*) FROM stream_positions WHERE consumer_name = 'audit-app'}
	),
	'0',
	'the retired consumer has no position left');

done_testing();
