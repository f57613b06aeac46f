#
# 051_stream_counters.pl: the counters of claims by offset, per consumer
# and stream, across restarts.
#
#   - they are written at a clean shutdown and read back at startup (counter
#     file version 6), with the consumer's own counters;
#   - a file that dedup 1.2 wrote (version 5: entries without their usage)
#     is still read, consumers and streams;
#   - a file that dedup 1.2 wrote before streams (version 4: keys without a
#     stream) is still read, its consumers' counters kept, none of them
#     taken for a stream.
#
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('stream_counters');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'dedup'
dedup.sweep_enabled = off
});
$node->start;

sub sql { return $node->safe_psql('postgres', $_[0]); }

sql(q{
CREATE EXTENSION dedup;
SELECT dedup_claim_offsets('orders-app', 'orders', 0, ARRAY[1, 2, 2, 3]);
SELECT dedup_claim_offset('orders-app', 'payments', 4, 9);
SELECT dedup_claim_offset('orders-app', 'payments', 4, 8);
});
my $streams = q{
SELECT string_agg(format('%s/%s:%s/%s', consumer, stream, claims, replays), ','
				  ORDER BY consumer, stream)
  FROM dedup_stream_stats};
my $consumers = q{
SELECT string_agg(format('%s:%s/%s', consumer, claims, duplicates), ',' ORDER BY consumer)
  FROM dedup_stats};
is( sql($streams),
	'orders-app/orders:3/1,orders-app/payments:1/1',
	'claims and replays counted per stream');
is(sql($consumers), 'orders-app:4/2', '... and per consumer');

$node->restart;
is( sql($streams),
	'orders-app/orders:3/1,orders-app/payments:1/1',
	'per-stream counters survive a clean restart');
is(sql($consumers), 'orders-app:4/2', '... as do the consumer\'s');

# a file of version 5, as dedup 1.2 wrote it: the number of evicted
# entries, then entries of a key (database OID, the consumer name and the
# stream, NUL-padded to 257 bytes each, 2 bytes of padding), 8 counters, 3
# times in ms and 4 timestamps (microseconds since 2000-01-01); no usage
my $dboid = sql(q{SELECT oid FROM pg_database WHERE datname = 'postgres'});
my $day   = 86400 * 1000000;
my $counters5 = pack('q8d3q4',
	5, 2, 0, 0, 0, 0, 0, 0, 1.5, 0.5, 0.0, 2 * $day, 3 * $day, $day,
	3 * $day);
my $v5 =
	pack('LLQq', 0x64656475, 5, 3, 2)
  . pack('La257a257x2', $dboid, 'from-1.2', '')
  . $counters5
  . pack('La257a257x2', $dboid, 'from-1.2', 'orders')
  . $counters5;
$node->stop('fast');
my $file = $node->data_dir . '/pg_stat/dedup.stat';
open(my $fh, '>:raw', $file) or die "could not write $file: $!";
print $fh $v5;
close($fh);
$node->start;
ok(!-f $file, 'a file of version 5 is removed at startup');
is(sql($consumers), 'from-1.2:5/2',
	'... after its consumers\' counters were read');
is( sql(q{SELECT claims || '/' || replays FROM dedup_stream_stats
		   WHERE consumer = 'from-1.2' AND stream = 'orders'}),
	'5/2',
	'... and those of their streams');
is( sql(q{SELECT dedup_counters_status()}),
	'on; 3 entries evicted (dedup.max_consumers = 1000 reached)',
	'... with its number of evicted entries');
is(sql(q{SELECT dedup_claim_offset('from-1.2', 'orders', 0, 1)}),
	't', 'the consumer claims by offset');
is(sql($consumers), 'from-1.2:6/2',
	'... counting on from the restored values');

# a file of version 4, as dedup 1.2 wrote it before streams: the number of
# evicted entries, then entries of a key (database OID, the consumer name
# NUL-padded to 257 bytes, 3 bytes of padding), 8 counters, 3 times in ms
# and 4 timestamps (microseconds since 2000-01-01)
my $v4 =
	pack('LLQq', 0x64656475, 4, 2, 1)
  . pack('La257x3', $dboid, 'before-streams')
  . pack('q8d3q4',
	7, 3, 1, 0, 0, 0, 0, 0, 12.5, 4.5, 2.0, 2 * $day, 3 * $day, $day,
	3 * $day);
$node->stop('fast');
open($fh, '>:raw', $file) or die "could not write $file: $!";
print $fh $v4;
close($fh);
$node->start;
ok(!-f $file, 'a file of version 4 is removed at startup');
is(sql($consumers), 'before-streams:7/3', '... after its counters were read');
is( sql(q{SELECT dedup_counters_status()}),
	'on; 2 entries evicted (dedup.max_consumers = 1000 reached)',
	'... with its number of evicted entries');
is(sql(q{SELECT count(*) FROM dedup_stream_counters()}),
	'0', '... and no stream among them');
is(sql(q{SELECT dedup_claim_offset('before-streams', 'orders', 0, 1)}),
	't', 'the consumer claims by offset');
is(sql($consumers), 'before-streams:8/3',
	'... counting on from the restored values');

done_testing();
