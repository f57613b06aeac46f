#
# 089_outbox_trust.pl: what dedup_relay sends is what dedup_publish()
# wrote, whatever other roles do, with a real RabbitMQ node and the relay
# run to completion (--exit-when-idle).
#
#   1. WAL mode, forgeries: a role with nothing but LOGIN writes messages
#      under the prefix 'dedup' with pg_logical_emit_message (PUBLIC may):
#      1.4's unsigned JSON, a made-up signature, junk, a non-transactional
#      message, and a message dedup_publish() signed copied into a
#      transaction of its own.  The relay sends the two real messages and
#      nothing else, says why it skipped each of the five (a WARNING each),
#      and its slot is confirmed past them all.
#   2. Table mode, a database owner who is not a superuser: look-alikes of
#      dedup's functions in public, first on a search_path set for the
#      database, and settings for the database and the relay's role that
#      would stop or mislead it (read-only transactions, a 1 ms statement
#      timeout, another IntervalStyle and client_encoding), and a
#      search_path set for the relay's role.  The relay runs none of the
#      owner's code, reports its lag, and sends every message in order.
#   3. A destination without a queue: the broker returns its message; the
#      relay names the destination and the reason, the other destination's
#      messages go on meanwhile, and at the dedup.outbox_max_attempts-th
#      lease (3 here) the message is moved to the dead letters, with the
#      reason, where dedup_outbox_backlog counts it.  Once the queue
#      exists, dedup_outbox_retry() sends it.
#   4. The same in WAL mode: the relay counts the refusals (the slot has no
#      room for them), and at the third dedup_outbox_refused_wal() makes
#      the message a dead letter, without a seq; the relay confirms the
#      slot past it, and the other destination's messages go on.
#
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupBroker;
use DedupNode;
use DedupProcess;
use DedupTools;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;

my $python = require_tools(
	modules  => [ 'pika',                                  'psycopg2' ],
	programs => [ '/usr/lib/rabbitmq/bin/rabbitmq-server', '/usr/bin/epmd' ]);
my $relay_bin = "$FindBin::Bin/../../src/relay/dedup_relay";
my $tmp       = PostgreSQL::Test::Utils::tempdir();

my $broker = DedupBroker->start(dir => "$tmp/rabbitmq", python => $python);
BAIL_OUT($broker->{error}) if $broker->{error};
my $node = DedupNode->create(
	'trust',
	init => { allows_streaming            => 'logical' },
	conf => { 'dedup.outbox_max_attempts' => 3 });
$broker->ready_ok;
my $amqp = "amqp://guest:guest\@127.0.0.1:$broker->{amqp_port}/%2F";

# A queue's messages, taken off it: "message_id|payload|headers" lines
my $take = <<'EOF';
import json, sys, pika
conn = pika.BlockingConnection(pika.URLParameters(sys.argv[1]))
ch = conn.channel()
for queue in sys.argv[2:]:
    ch.queue_declare(queue, durable=True)
    while True:
        method, props, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            break
        print("%s|%s|%s" % (props.message_id, body.decode(),
                            json.dumps(props.headers, sort_keys=True)))
conn.close()
EOF

sub take
{
	my (@queues) = @_;
	my ($out, $err);
	IPC::Run::run([ $python, '-c', $take, $amqp, @queues ],
		'>', \$out, '2>', \$err)
	  or die "taking @queues: $err";
	return $out;
}

# run the relay until nothing is left: (exit status, its log)
sub relay
{
	my ($db, $user, @args) = @_;
	my $dsn = sprintf('host=%s port=%d dbname=%s user=%s',
		$node->host, $node->port, $db, $user);
	my ($out, $err);
	IPC::Run::run(
		[
			$python,            $relay_bin, '--dsn',          $dsn,
			'--amqp',           $amqp,      '--poll',         0.05,
			'--max-backoff',    0.2,        '--report-every', 0.1,
			'--exit-when-idle', @args
		],
		'>',
		\$out,
		'2>',
		\$err,
		IPC::Run::timeout(test_timeout()));
	return ($? >> 8, $err);
}

###############################################################################
note('1. WAL mode: forged messages');

$node->safe_psql(
	'postgres', q{
CREATE ROLE mallory LOGIN;
CREATE ROLE relay_wal LOGIN REPLICATION;
CREATE SCHEMA dedup;
CREATE EXTENSION dedup SCHEMA dedup;
GRANT USAGE ON SCHEMA dedup TO relay_wal;
GRANT SELECT ON dedup.dedup_outbox_signing_key TO relay_wal;
SELECT dedup.dedup_add_destination('q', 'wal');
CREATE PUBLICATION dedup_outbox;
SELECT pg_create_logical_replication_slot('dedup_relay', 'pgoutput');
SELECT pg_create_logical_replication_slot('peek', 'test_decoding');
});
take('q');    # declared, empty

$node->safe_psql('postgres',
	q{SELECT dedup.dedup_publish('q', 'real 1', 'k1')});
my $signed = $node->safe_psql(
	'postgres', q{
SELECT substring(data FROM '^message: transactional: 1 prefix: dedup, sz: \d+ content:(.*)$')
  FROM pg_logical_slot_get_changes('peek', NULL, NULL) WHERE data LIKE 'message:%'}
);
like(
	$signed,
	qr/^dedup-v1 [0-9a-f]{64}\n\{"id": /,
	'what dedup_publish() wrote is signed');
$node->safe_psql('postgres', q{SELECT pg_drop_replication_slot('peek')});

my $forged =
  q{{"id": "forged", "destination": "q", "key": null, "headers": null, "payload": "forged"}};
$node->safe_psql(
	'postgres', qq{
SELECT pg_logical_emit_message(true, 'dedup', \$\$$forged\$\$);
SELECT pg_logical_emit_message(true, 'dedup', 'dedup-v1 ' || repeat('0', 64) || E'\\n' || \$\$$forged\$\$);
SELECT pg_logical_emit_message(true, 'dedup', 'not even JSON');
SELECT pg_logical_emit_message(false, 'dedup', \$\$$forged\$\$);
SELECT pg_logical_emit_message(true, 'dedup', \$\$$signed\$\$);
},
	extra_params => [ '-U', 'mallory' ]);

# a position inside the last transaction: its end, which the relay
# confirms, is past it
my $last_message = $node->safe_psql(
	'postgres', q{
BEGIN;
SELECT dedup.dedup_publish('q', 'real 2') IS NULL;
SELECT pg_current_wal_insert_lsn();
COMMIT;});
$last_message = (split /\n/, $last_message)[-1];

my ($rc, $log) = relay('postgres', 'relay_wal', '--mode', 'wal');
is($rc, 0, 'the relay ran to the end') or diag($log);
my @sent = map { (split /\|/)[1] } split /\n/, take('q');
is_deeply(
	\@sent,
	[ 'real 1', 'real 2' ],
	'it sent the two messages of dedup_publish(), nothing forged');
my @skipped = $log =~ /WARNING: (WAL message at \S+ skipped.*)/g;
is(scalar(@skipped), 5, 'it skipped five messages, a WARNING each')
  or diag($log);
like(
	join("\n", @skipped),
	qr/MAC does not verify \(for transaction \d+\)/,
	'the copied message: its signature is not for the transaction it came in'
);
unlike($log, qr/forged/, 'no WARNING repeats what a forger wrote');
ok( $node->poll_query_until(
		'postgres', qq{
SELECT confirmed_flush_lsn > '$last_message'::pg_lsn
  FROM pg_replication_slots WHERE slot_name = 'dedup_relay'}),
	'the slot is confirmed past the forgeries and the last message')
  or diag(
	$node->safe_psql(
		'postgres',
		"SELECT confirmed_flush_lsn, '$last_message' FROM pg_replication_slots"
	));

###############################################################################
note('2. table mode: a database owner plants code and settings');

$node->safe_psql(
	'postgres', q{
CREATE ROLE shop_owner LOGIN;
CREATE ROLE relay_table LOGIN;
CREATE DATABASE shop OWNER shop_owner;
});
$node->safe_psql(
	'shop', q{
CREATE SCHEMA dedup;
CREATE EXTENSION dedup SCHEMA dedup;
GRANT USAGE ON SCHEMA dedup TO relay_table;
GRANT EXECUTE ON FUNCTION dedup.dedup_outbox_lease(text, integer, interval, text[]),
	dedup.dedup_outbox_sent(text, bigint[]), dedup.dedup_outbox_release(text, bigint[]),
	dedup.dedup_outbox_refused(text, bigint[], text) TO relay_table;
SELECT dedup.dedup_add_destination('orders');
SELECT dedup.dedup_add_destination('nowhere');
});

# a setting for the relay's role (a superuser's, or a CREATEROLE admin's);
# and, before the owner's settings below, the test's own sessions spared
# them (a 1 ms statement timeout is met by a busy machine's ALTER ROLE)
$node->safe_psql(
	'shop', q{
ALTER ROLE relay_table IN DATABASE shop SET search_path = public;
ALTER ROLE CURRENT_USER IN DATABASE shop SET default_transaction_read_only = off;
ALTER ROLE CURRENT_USER IN DATABASE shop SET statement_timeout = 0;
});

# the owner's look-alikes, each recording that it ran
$node->safe_psql(
	'shop', q{
CREATE TABLE public.ran (what text);
GRANT INSERT ON public.ran TO PUBLIC;
CREATE FUNCTION public.dedup_outbox_lease(relay text, max_messages integer, lease interval, destinations text[])
RETURNS TABLE (seq bigint, message_id text, destination text, key text, headers jsonb, payload text)
LANGUAGE sql AS $$ INSERT INTO public.ran VALUES ('lease') RETURNING 1::bigint, 'x', 'orders', NULL::text, NULL::jsonb, 'planted' $$;
CREATE FUNCTION public.dedup_outbox_sent(relay text, seqs bigint[]) RETURNS bigint
LANGUAGE sql AS $$ INSERT INTO public.ran VALUES ('sent') RETURNING 0::bigint $$;
ALTER DATABASE shop SET search_path = public, dedup;
ALTER DATABASE shop SET default_transaction_read_only = on;
ALTER DATABASE shop SET statement_timeout = '1ms';
ALTER DATABASE shop SET IntervalStyle = 'iso_8601';
ALTER DATABASE shop SET client_encoding = 'LATIN1';
},
	extra_params => [ '-U', 'shop_owner' ]);


$node->safe_psql(
	'shop', q{
SET default_transaction_read_only = off;
SET statement_timeout = 0;
SELECT dedup.dedup_publish('orders', 'order ' || i, 'k') FROM generate_series(1, 3) AS i;
SELECT dedup.dedup_publish('nowhere', 'lost in transit', 'k');
SELECT dedup.dedup_publish('orders', 'order 4', 'k');
});
take('orders');

($rc, $log) =
  relay('shop', 'relay_table', '--mode', 'table', '--name', 'trust');
is($rc, 0, 'the relay ran to the end') or diag($log);
is( join(',', map { (split /\|/)[1] } split /\n/, take('orders')),
	'order 1,order 2,order 3,order 4',
	'it sent every message of orders, in order');
is($node->safe_psql('shop', 'SELECT count(*) FROM public.ran'),
	'0', 'none of the owner\'s look-alikes ran');

###############################################################################
note('3. a destination without a queue: refused, moved aside, retried');

like(
	$log,
	qr/destination nowhere refused: returned by the broker: 312 NO_ROUTE/,
	'the relay names the destination and why the broker refused it');
like(
	$log,
	qr/1 of 1 messages refused \(returned by the broker: 312 NO_ROUTE\) moved to dedup_outbox_dead_letters/,
	'and says when it moved the message aside');
is( $node->safe_psql(
		'shop', q{
SET statement_timeout = 0;
SELECT d.destination, d.payload, d.attempts, d.reason, b.unsent, b.dead_letters
  FROM dedup.dedup_outbox_dead_letters d
  JOIN dedup.dedup_outbox_backlog b USING (destination)}),
	'nowhere|lost in transit|3|returned by the broker: 312 NO_ROUTE|0|1',
	'a dead letter after 3 leases, with the reason; the backlog counts it');

take('nowhere');    # the queue exists now
$node->safe_psql(
	'shop', q{
SET default_transaction_read_only = off;
SET statement_timeout = 0;
SELECT dedup.dedup_outbox_retry(message_id) FROM dedup.dedup_outbox_dead_letters;
});
($rc, $log) =
  relay('shop', 'relay_table', '--mode', 'table', '--name', 'trust');
is($rc, 0, 'the relay ran to the end again') or diag($log);
like(
	take('nowhere'),
	qr/^[0-9a-f-]{36}\|lost in transit\|\{"dedup-key": "k"\}$/,
	'the retried message is sent, with its id and key');

###############################################################################
note('4. WAL mode: a destination without a queue, moved aside');

$node->safe_psql(
	'postgres', q{
GRANT EXECUTE ON FUNCTION dedup.dedup_outbox_refused_wal(text, text, text, text, jsonb, text, integer, text)
	TO relay_wal;
SELECT dedup.dedup_add_destination('nowhere-wal', 'wal');
SELECT dedup.dedup_publish('nowhere-wal', 'never routed', 'k9');
SELECT dedup.dedup_publish('q', 'real 3', 'k9');
});
$last_message = $node->safe_psql(
	'postgres', q{
BEGIN;
SELECT dedup.dedup_publish('q', 'real 4') IS NULL;
SELECT pg_current_wal_insert_lsn();
COMMIT;});
$last_message = (split /\n/, $last_message)[-1];
($rc, $log) = relay('postgres', 'relay_wal', '--mode', 'wal');
is($rc, 0, 'the relay ran to the end') or diag($log);
like(
	$log,
	qr/message \S+ of destination nowhere-wal refused 3 times \(returned by the broker: 312 NO_ROUTE\) moved to dedup_outbox_dead_letters/,
	'at its third refusal the message is moved aside, the relay says so');

# WAL mode reads again from the slot after a refusal: the messages behind
# the refused one are sent again with it, at most once per reading
my @payloads = map { (split /\|/)[1] } split /\n/, take('q');
my %seen;
is( join(',', grep { !$seen{$_}++ } @payloads),
	'real 3,real 4',
	'the other destination\'s messages were sent, in order');
cmp_ok(scalar(@payloads), '<=', 2 * 4,
	'each at most once per reading of the slot (three refusals, then past it)'
);
is( $node->safe_psql(
		'postgres', q{
SELECT destination, seq IS NULL, payload, attempts, reason FROM dedup.dedup_outbox_dead_letters}
	),
	'nowhere-wal|t|never routed|3|returned by the broker: 312 NO_ROUTE',
	'the dead letter, without a seq (it was never a row)');
ok( $node->poll_query_until(
		'postgres', qq{
SELECT confirmed_flush_lsn > '$last_message'::pg_lsn
  FROM pg_replication_slots WHERE slot_name = 'dedup_relay'}),
	'the slot is confirmed past it');

$broker->stop_ok;
done_testing();
