#
# 087_outbox_slot.pl: dedup_relay's confirmation of its slot in WAL mode:
# how far it confirms and what a restart resends.  Copies are counted at the
# broker: the relay's queue has no consumer, so its depth is every copy the
# broker confirmed.  Transaction ends are read from a second slot (probe,
# test_decoding, only peeked): the lsn of a COMMIT row is the end of the
# transaction, the position the relay reports as flushed.
#
#   1. Idle: once the relay sent three transactions with messages (and one
#      without), the slot's confirmed_flush_lsn reaches the end of the last
#      transaction that carried a message (polled, bounded by the test's
#      timeout), and the queue holds each message once.
#   2. A relay restart once everything is confirmed resends nothing: after a
#      clean stop (SIGTERM) and after a kill -9, the next message is the
#      only one the broker gets (zero copies: the server keeps the
#      confirmed position).
#   3. A server restart resends what was confirmed after the slot was last
#      written to disk (its state file, read before the restart): a
#      transaction held open holds the slot's restart position and catalog
#      xmin back, so that no confirmation writes the slot (the server writes
#      it when they move, two checkpoints make them move to that
#      transaction first); then five messages confirmed, and an immediate
#      restart (a crash): the relay sends again exactly the messages of the
#      transactions that ended after the position on disk, the five at
#      least.  A fast (clean) restart does the same before PostgreSQL 17;
#      17 writes the confirmed position at the shutdown checkpoint: nothing
#      again there.
#
use strict;
use warnings;

use Cwd qw(abs_path);
use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupBroker;
use DedupNode;
use DedupProcess;
use DedupTools;
use PostgreSQL::Test::Utils;
use Test::More;

my $python = require_tools(
	modules  => [ 'pika',                                  'psycopg2' ],
	programs => [ '/usr/lib/rabbitmq/bin/rabbitmq-server', '/usr/bin/epmd' ]);
my $relay_program = abs_path("$FindBin::Bin/../../src/relay/dedup_relay");
my $tmp           = PostgreSQL::Test::Utils::tempdir();

my $broker = DedupBroker->start(dir => "$tmp/rabbitmq", python => $python);
BAIL_OUT($broker->{error}) if $broker->{error};
my $node =
  DedupNode->create('slot', init => { allows_streaming => 'logical' });
my $db = 'slot';
$node->safe_psql('postgres', "CREATE DATABASE $db");
$node->safe_psql(
	$db, q{
CREATE EXTENSION dedup;
CREATE TABLE pin (i int);
SELECT dedup_add_destination('q', 'wal');
CREATE PUBLICATION dedup_outbox;
SELECT pg_create_logical_replication_slot('dedup_relay', 'pgoutput');
SELECT pg_create_logical_replication_slot('probe', 'test_decoding');
});
$broker->ready_ok;
is($broker->publish('q', []), 0, 'queue q declared');

my $dsn = sprintf('host=%s port=%d dbname=%s', $node->host, $node->port, $db);
my @relay = (
	$python,  $relay_program, '--mode', 'wal', '--dsn', $dsn,
	'--amqp', "amqp://guest:guest\@127.0.0.1:$broker->{amqp_port}/%2F",
	'--poll', 0.05, '--max-backoff', 1);
my ($relay, $generation);

sub start_relay
{
	my $log = "$tmp/relay-" . ++$generation . '.log';
	$relay = spawn_session($log, {}, @relay);
	stop_at_exit($relay, 10);
	wait_until(sub { read_file($log) =~ /relaying/ })
	  or die 'the relay did not start: ' . read_file($log);
	return;
}

# publish $n messages, each in a transaction of its own
my $published = 0;

sub publish
{
	my ($n) = @_;
	$node->safe_psql($db,
		"SELECT dedup_publish('q', '{\"n\": " . ++$published . '}\')')
	  for 1 .. $n;
	return;
}

# the end of the last committed transaction that carried a message
sub last_message_end
{
	return $node->safe_psql(
		$db, q{
WITH c AS (SELECT * FROM pg_logical_slot_peek_changes('probe', NULL, NULL))
SELECT max(lsn) FROM c
 WHERE data LIKE 'COMMIT%'
   AND xid IN (SELECT xid FROM c WHERE data LIKE 'message: transactional: 1 prefix: dedup,%')}
	);
}

# true once the relay's slot confirmed the last transaction with a message
sub confirmed_ok
{
	my ($name) = @_;
	my $end = last_message_end();
	ok( $node->poll_query_until(
			$db, qq{
SELECT confirmed_flush_lsn >= '$end' AND confirmed_flush_lsn <= pg_current_wal_lsn()
  FROM pg_replication_slots WHERE slot_name = 'dedup_relay'}),
		"$name: the slot confirmed the end of the last transaction with a message ($end)"
	  )
	  or diag(
		$node->safe_psql(
			$db,
			"SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'dedup_relay'"
		));
	return;
}

# copies at the broker beyond $expected, once the next message is confirmed
# (everything before it was: the relay confirms in commit order)
sub resent_after
{
	my ($expected) = @_;
	publish(1);
	confirmed_ok('a message after the restart');
	return $broker->depth('q') - $expected - 1;
}

# the slot's confirmed_flush as last written to disk: in its state file
# (ReplicationSlotOnDisk: magic, checksum, version, length, then the
# persistent data, whose confirmed_flush is at byte 112 since PostgreSQL 13)
sub slot_on_disk
{
	my ($magic, $lsn) = split(
		/\|/,
		$node->safe_psql(
			$db, q{
SELECT encode(pg_read_binary_file('pg_replslot/dedup_relay/state', 0, 4), 'hex'),
       encode(pg_read_binary_file('pg_replslot/dedup_relay/state', 112, 8), 'hex')}
		));
	$magic = unpack('L', pack('H*', $magic));
	$lsn   = unpack('Q', pack('H*', $lsn));
	is($magic, 0x1051CA1, 'the slot\'s state file has the known layout');
	return sprintf('%X/%X', $lsn >> 32, $lsn & 0xffffffff);
}

###############################################################################
note('1. the slot confirmed once the relay is idle');

start_relay();
publish(2);
$node->safe_psql($db,
		'BEGIN; SELECT dedup_publish(\'q\', \'{"n": "x"}\'); '
	  . 'SELECT dedup_publish(\'q\', \'{"n": "y"}\'); COMMIT');
$published += 2;
$node->safe_psql($db, 'INSERT INTO pin VALUES (0)');   # a transaction without
confirmed_ok('idle');
is($broker->depth('q'), $published,
	"the queue holds the $published messages");

###############################################################################
note('2. a relay restart once everything is confirmed');

is(stop_group($relay, test_timeout()), 0, 'relay stopped cleanly on SIGTERM');
forget_pid($relay);
start_relay();
is(resent_after($published),
	0, 'after a clean stop: nothing sent again (only the next message)');

kill('KILL', $relay);
waitpid($relay, 0);
forget_pid($relay);
is($? & 127, 9, 'relay killed with SIGKILL');
start_relay();
is(resent_after($published),
	0, 'after a kill -9: nothing sent again (only the next message)');

###############################################################################
note('3. a server restart: what was confirmed since the slot was written');

my $version      = $node->safe_psql($db, 'SHOW server_version_num');
my $resent_total = 0;
for my $mode ('immediate', 'fast')
{
	# a transaction that stays open holds the slot's restart position and
	# catalog xmin back: a confirmation writes the slot to disk only when
	# they move; the checkpoints' snapshots of running transactions make
	# them move to it now, each confirmed by the next message
	my $holder = $node->background_psql($db);
	$holder->query_safe('BEGIN; INSERT INTO pin VALUES (1)');
	for (1 .. 2)
	{
		$node->safe_psql($db, 'CHECKPOINT');
		publish(1);
		confirmed_ok("$mode restart, settling");
	}
	publish(5);
	confirmed_ok("$mode restart, five messages");
	my $depth = $broker->depth('q');
	is( $depth,
		$published + $resent_total,
		"the queue holds the $published messages and the copies so far");
	my $on_disk = slot_on_disk();
	my $want =
	  $mode eq 'fast' && $version >= 170000
	  ? 0
	  : $node->safe_psql(
		$db, qq{
WITH c AS (SELECT * FROM pg_logical_slot_peek_changes('probe', NULL, NULL))
SELECT count(*) FROM c m JOIN c e ON e.xid = m.xid AND e.data LIKE 'COMMIT%'
 WHERE m.data LIKE 'message: transactional: 1 prefix: dedup,%' AND e.lsn > '$on_disk'}
	  );
	cmp_ok($want, '>=', 5,
		"$mode restart: the five messages confirmed after the slot's last write ($on_disk)"
	) unless $mode eq 'fast' && $version >= 170000;
	$node->stop($mode);
	$node->start;
	$holder->quit;
	my $resent = resent_after($depth);
	$resent_total += $resent;
	is($resent, $want,
		"$mode restart: the relay sent again the $want messages confirmed since the slot was written to disk"
	);
	note("$mode restart of PostgreSQL $version: $resent messages sent again");
}
like(
	read_file("$tmp/relay-$generation.log"),
	qr/database back after/,
	'the relay reconnected after the restarts');

is(stop_group($relay, test_timeout()), 0, 'relay stopped cleanly on SIGTERM');
forget_pid($relay);
$broker->stop_ok;
$node->stop;
done_testing();
