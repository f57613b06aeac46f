#
# 052_rabbitmq_streams.pl: claims by offset end to end, with RabbitMQ
# stream queues (x-queue-type: stream) as the ordered log.
#
# Three streams of 120 messages each, consumed by doc/examples/stream_consumer.py
# as the README's "Ordered streams" section shows: seek to next_offset from
# dedup_stream_positions (x-stream-offset), then one transaction per record
# { dedup_claim_offset; if true: the work }, commit, ack.  Every message
# must be applied exactly once, none lost, when
#   - a consumer is killed (kill -9) inside a transaction, before its commit,
#     and restarts from dedup's position;
#   - a consumer is killed after a commit, before the ack, and restarts;
#   - the whole stream is replayed from offset 0: every record a replay;
#   - two consumers of the same group work the same stream at once (a
#     rebalance that briefly hands the partition to both).
#
use strict;
use warnings;

use Cwd qw(abs_path);
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupBroker;
use DedupNode;
use DedupTools;

my $python = require_tools(
	modules  => [ 'pika',                                  'psycopg' ],
	programs => [ '/usr/lib/rabbitmq/bin/rabbitmq-server', '/usr/bin/epmd' ]);
my $script = abs_path("$FindBin::Bin/../../doc/examples/stream_consumer.py");
my $count  = 120;
my $last   = $count - 1;

# preloaded for the counters of dedup_stream_stats
my $node = DedupNode->create('streams_rmq');
$node->safe_psql(
	'postgres', q{
CREATE EXTENSION dedup;
CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL);
INSERT INTO accounts SELECT g, 0 FROM generate_series(1, 5) g;
-- deliberately no unique key: a message applied twice is two rows
CREATE TABLE applied (message_id text NOT NULL, worker text NOT NULL,
					  stream text NOT NULL, stream_offset bigint NOT NULL);
});
my $dsn = 'host=' . $node->host . ' port=' . $node->port . ' dbname=postgres';

my $broker = DedupBroker->start(
	dir    => PostgreSQL::Test::Utils::tempdir . '/rabbitmq',
	python => $python);
BAIL_OUT($broker->{error}) if $broker->{error};
$broker->ready_ok;
my $port = $broker->{amqp_port};

# run doc/examples/stream_consumer.py: (exit status, stdout, stderr)
sub helper
{
	my @args = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ $python, $script, @args ],
		'<', \undef, '>', \$out, '2>', \$err,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	return ($?, $out, $err);
}

sub consume
{
	my ($stream, $worker, @options) = @_;
	return helper('consume', $port, $stream, $dsn, 'ledger', $worker, $last,
		@options);
}

# every message of $stream applied exactly once, and the position at its end
sub check_stream
{
	my ($stream, $label) = @_;
	is( $node->safe_psql(
			'postgres', qq{
SELECT count(*), count(DISTINCT stream_offset), min(stream_offset), max(stream_offset),
	   count(*) FILTER (WHERE message_id <> '$stream-' || stream_offset)
  FROM applied WHERE stream = '$stream'}),
		"$count|$count|0|$last|0",
		"$label: each of the $count messages applied exactly once, none lost"
	);
	is( $node->safe_psql(
			'postgres',
			qq{SELECT next_offset FROM dedup_stream_positions('ledger', '$stream')}
		),
		$count,
		"$label: the position is past the last record");
}

for my $stream ('crash-before', 'crash-after', 'shared')
{
	my ($rc, $out, $err) = helper('publish', $port, $stream, $count, $stream);
	is($rc, 0, "$stream: $count messages published") or diag($err);
}

# --- killed inside a transaction ------------------------------------------------

my ($rc, $out, $err) =
  consume('crash-before', 'w1', '--crash', 'before', '--at', 40);
is($rc & 127, 9, 'killed (SIGKILL) inside the transaction of offset 40');
like(
	$out,
	qr/"offset": 39, "claimed": true/,
	'... after committing offset 39');
is( $node->safe_psql(
		'postgres',
		q{SELECT next_offset FROM dedup_stream_positions('ledger', 'crash-before')}
	),
	'40',
	'the uncommitted claim of offset 40 is gone with its work');
($rc, $out, $err) = consume('crash-before', 'w2');
is($rc, 0, 'the restarted consumer finishes the stream') or diag($err);
like(
	$out,
	qr/\A\{"worker": "w2", "offset": 40, "claimed": true\}/,
	'... starting where dedup says, at offset 40');
check_stream('crash-before', 'killed before commit');

# --- killed after a commit, before the ack --------------------------------------

($rc, $out, $err) =
  consume('crash-after', 'w1', '--crash', 'after', '--at', 70);
is($rc & 127, 9,
	'killed (SIGKILL) after committing offset 70, before its ack');
($rc, $out, $err) = consume('crash-after', 'w2');
is($rc, 0, 'the restarted consumer finishes the stream') or diag($err);
like(
	$out,
	qr/\A\{"worker": "w2", "offset": 71, "claimed": true\}/,
	'... seeking past the committed offset 70, whose ack was lost');
check_stream('crash-after', 'killed after commit');

# --- a replay of the whole stream ------------------------------------------------

$node->safe_psql('postgres', q{SELECT dedup_stats_reset('ledger')});
($rc, $out, $err) = consume('crash-after', 'replayer', '--from', 'first');
is($rc, 0, 'a replay of the stream from offset 0 runs to its end')
  or diag($err);
is(scalar(() = $out =~ /"claimed": false/g),
	$count, '... every record of it a replay');
is(scalar(() = $out =~ /"claimed": true/g), 0, '... none claimed again');
check_stream('crash-after', 'after the replay');
is( $node->safe_psql(
		'postgres',
		q{SELECT claims || '/' || replays FROM dedup_stream_stats WHERE stream = 'crash-after'}
	),
	"0/$count",
	'dedup_stream_stats counts the replays');

# --- two consumers of the group on the same stream at once -----------------------

my @workers;
for my $worker ('a', 'b')
{
	my ($o, $e) = ('', '');
	push @workers,
	  [
		IPC::Run::start(
			[
				$python,  $script,     'consume', $port,
				'shared', $dsn,        'ledger',  $worker,
				$last,    '--work-ms', 5
			],
			'<',
			\undef,
			'>',
			\$o,
			'2>',
			\$e,
			IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default)),
		\$o,
		\$e
	  ];
}
for my $w (@workers)
{
	my ($h, $o, $e) = @$w;
	my $ok = eval { $h->finish; 1 };
	ok($ok && $h->result(0) == 0,
		'both consumers of the shared stream finish')
	  or diag($$e . ($@ // ''));
}
my $claimed = () =
  (${ $workers[0][1] } . ${ $workers[1][1] }) =~ /"claimed": true/g;
is($claimed, $count, 'between them, each record claimed once');
check_stream('shared', 'two consumers at once');

# message i credits i + 1 to account i % 5 + 1, in each of the three streams
my %balance;
$balance{ $_ % 5 + 1 } += 3 * ($_ + 1) for 0 .. $last;
is( $node->safe_psql(
		'postgres',
		q{SELECT string_agg(id || '=' || balance, ',' ORDER BY id) FROM accounts}
	),
	join(',', map { "$_=$balance{$_}" } 1 .. 5),
	'the balances are the sums of the three streams, each applied once');

$broker->stop_ok;
done_testing();
