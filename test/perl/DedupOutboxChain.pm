#
# test/perl/DedupOutboxChain.pm: a chain of two services joined by the
# outbox and dedup_relay, with faults at every link, run by the TAP tests
# 085 (table mode) and 086 (WAL mode): every message's effect at the end of
# the chain happens exactly once, none lost, per-key order kept.
#
#   run_chain($mode)    the whole test ('table' or 'wal'), Test::More
#                       assertions
#
# The chain, on one PostgreSQL node and a private RabbitMQ node:
#   q1 -> service A (doc/examples/outbox_service.py, consumer svc_a: claim,
#         ledger update, dedup_publish('q2', ...) in one transaction)
#      -> the outbox (destination q2 in $mode) -> dedup_relay -> q2
#      -> service B (the same program, consumer svc_b: claim, update)
# Both services write "applied" (a row per application, in their
# transaction; seq gives the order of their commits) and "ledger".
#
# Six batches of 40 messages on five keys (each message's body carries its
# key and its number within the key); with each batch one fault, injected
# while the batch flows, and asserted to have done what it is for (from
# the services' logs: one JSON line per delivery, its claim and whether it
# was a redelivery):
#   1 kill -9 of A once it applied 8 of the batch and is held in the next
#     (see below; restarted): the new A gets redelivered what the killed
#     one had not acknowledged, and claims it (that transaction was lost);
#   2 the relay kills itself once its first batch is written to the
#     broker's socket, before the broker's confirm (test hook
#     DEDUP_RELAY_TEST_CRASH=after-publish; restarted without it): the
#     broker has it, the new relay sends it again, B's claims refuse at
#     least one copy;
#   3 the same right after the confirm, before it marks the batch sent or
#     confirms it to the slot (after-confirm): the same;
#   4 kill -9 of B once it applied 8 of the batch and is held in the next:
#     as for A;
#   5 a broker restart (clean shutdown, same data) once A applied 8 and is
#     held in the next: A commits that message, its ack is lost with the
#     connection, the message comes again and A's claim refuses it;
#   6 an immediate PostgreSQL restart (pg_ctl -m immediate) once A applied
#     8 and is held in the next: A reconnects and claims the message of its
#     lost transaction again (and in WAL mode the relay may resend what it
#     confirmed since the slot was last written to disk: noted).
# Before 2 and after 2 and 3 the chain is drained (B applied everything
# published, the relay stopped cleanly, q2 holds nothing unacknowledged),
# so the copies counted for 2 and 3 are theirs.
# Held: the batch's first 8 messages go to q1 alone; once the service
# applied them, a session of the test locks the service's ledger rows
# (SELECT ... FOR UPDATE), the other 32 follow, and the fault comes once
# the service's backend waits for that lock, its claim of the next message
# taken and not committed; the lock goes after the fault (ROLLBACK, or
# with the restarted server).  A state, not a time: each fault asserts the
# batch was still flowing when it hit.  At the end:
# A and B each applied every one of the 240 messages exactly once (none
# lost, none twice), their ledgers are the sums, each key's messages were
# applied in order by both, the relay that saw the broker and the database
# go away logged each outage once (and its end), and its lag lines; in
# table mode every outbox row is sent, B's message ids are exactly the
# outbox's, and the resent rows show more than one attempt.
#
# Paths (one place to change): $SERVICE, $RELAY.
#
package DedupOutboxChain;

use strict;
use warnings;

use Cwd qw(abs_path);
use Exporter 'import';
use File::Basename qw(dirname);
use POSIX          qw(WNOHANG);
use Test::More;

use DedupBroker;
use DedupNode;
use DedupProcess;
use DedupTools;
use PostgreSQL::Test::Utils ();

our @EXPORT = qw(run_chain);

my $top = abs_path(dirname(__FILE__) . '/../..');
our $SERVICE = "$top/doc/examples/outbox_service.py";
our $RELAY   = "$top/src/relay/dedup_relay";

my $BATCH = 40;
my @KEYS  = map { "k$_" } 1 .. 5;

sub run_chain
{
	my ($mode) = @_;
	my $python = require_tools(
		modules  => [ 'pika', 'psycopg2' ],
		programs =>
		  [ '/usr/lib/rabbitmq/bin/rabbitmq-server', '/usr/bin/epmd' ]);
	my $tmp = PostgreSQL::Test::Utils::tempdir();

	my $broker =
	  DedupBroker->start(dir => "$tmp/rabbitmq", python => $python);
	BAIL_OUT($broker->{error}) if $broker->{error};
	my $node = DedupNode->create("chain_$mode",
		init => $mode eq 'wal' ? { allows_streaming => 'logical' } : {});
	my $db = 'chain';
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql(
		$db, qq{
CREATE EXTENSION dedup;
CREATE TABLE ledger (service text, key text, total bigint NOT NULL, PRIMARY KEY (service, key));
CREATE TABLE applied (seq bigserial PRIMARY KEY, service text NOT NULL, message_id text NOT NULL,
                      origin text NOT NULL, key text, n integer, amount bigint);
SELECT dedup_add_destination('q2', '$mode');
});
	if ($mode eq 'wal')
	{
		# the slot before the first message: it streams what commits after it
		$node->safe_psql(
			$db, q{
CREATE PUBLICATION dedup_outbox;
SELECT pg_create_logical_replication_slot('dedup_relay', 'pgoutput');
});
	}
	$broker->ready_ok;

	my $dsn =
	  sprintf('host=%s port=%d dbname=%s', $node->host, $node->port, $db);
	my $amqp = "amqp://guest:guest\@127.0.0.1:$broker->{amqp_port}/%2F";

	# the processes of the chain, each generation with a log of its own
	my %proc;
	my %cmd = (
		a => [
			$python,      $SERVICE, '--amqp',    $amqp,
			'--dsn',      $dsn,     '--queue',   'q1',
			'--consumer', 'svc_a',  '--publish', 'q2',
			'--work-ms',  20
		],
		b => [
			$python,      $SERVICE, '--amqp',    $amqp,
			'--dsn',      $dsn,     '--queue',   'q2',
			'--consumer', 'svc_b',  '--work-ms', 10
		],
		relay => [
			$python,             $RELAY, '--mode',         $mode,
			'--dsn',             $dsn,   '--amqp',         $amqp,
			'--batch',           20,     '--lease',        10,
			'--confirm-timeout', 4,      '--poll',         0.05,
			'--max-backoff',     1,      '--report-every', 1
		]);
	my $start = sub {
		my ($name, %env) = @_;
		my $p = $proc{$name} //= { gen => 0 };
		$p->{gen}++;
		$p->{log} = "$tmp/$name-$p->{gen}.log";
		$p->{pid} = spawn_session($p->{log}, \%env, @{ $cmd{$name} });
		stop_at_exit($p->{pid}, 10);

		# up (its signal handlers in place) before anything else happens
		wait_until(sub { read_file($p->{log}) =~ /"event": "ready"|relaying/ }
		) or die "$name did not start: " . read_file($p->{log});
	};

	# wait for it to end by itself: its wait status, undef after the timeout
	my $reap = sub {
		my ($name) = @_;
		my $p = $proc{$name};
		my $status;
		wait_until(
			sub {
				waitpid($p->{pid}, WNOHANG) == $p->{pid} and $status = $?;
				defined $status;
			}) or return undef;
		forget_pid($p->{pid});
		return $status;
	};
	my $kill9 = sub {
		my ($name) = @_;
		kill('KILL', $proc{$name}{pid});
		my $status = $reap->($name);
		return defined $status && ($status & 127) == 9;
	};
	my $stop = sub {
		my ($name) = @_;
		my $status = stop_group($proc{$name}{pid}, test_timeout());
		forget_pid($proc{$name}{pid});
		return $status;
	};
	my $applied = sub {
		my ($service) = @_;
		return $node->safe_psql($db,
			"SELECT count(*) FROM applied WHERE service = '$service'");
	};
	my $wait_applied = sub {
		my ($service, $n) = @_;
		$node->poll_query_until($db,
			"SELECT count(*) >= $n FROM applied WHERE service = '$service'")
		  or die "$service did not apply $n messages";
		return $applied->($service);
	};

	# the messages: numbered within their key
	my (@messages, %n);
	my $new_batch = sub {
		my @batch = map {
			my $i   = @messages + $_;
			my $key = $KEYS[ $i % @KEYS ];
			{
				message_id => sprintf('in-%04d', $i),
				key        => $key,
				n          => ++$n{$key},
				amount     => 1 + ($i * 37) % 100
			}
		} 1 .. $BATCH;
		push @messages, @batch;
		return @batch;
	};
	my $publish_batch = sub {
		my ($what) = @_;
		$broker->publish_ok(
			'q1',
			[ $new_batch->() ],
			"batch for $what: $BATCH messages published to q1");
		return scalar(@messages) - $BATCH;    # applied by A before it
	};

	# publish a batch and run $fault while $service is held in it (see the
	# header); $restarts: the fault ends the lock's session.  Returns the
	# messages before the batch and what $service had applied at the fault.
	my $held_fault = sub {
		my ($what, $service, $fault, $restarts) = @_;
		my $from  = @messages;        # it applies all of them, then 8 more
		my @batch = $new_batch->();
		$broker->publish_ok(
			'q1',
			[ @batch[ 0 .. 7 ] ],
			"batch for $what: its first 8 messages published to q1");
		$wait_applied->($service, $from + 8);
		my $holder     = $node->background_psql($db);
		my $holder_pid = $holder->query_safe('SELECT pg_backend_pid()');
		$holder->query_safe(
			qq{BEGIN;
SELECT count(*) FROM (SELECT FROM ledger WHERE service = '$service' FOR UPDATE) l}
		);
		$broker->publish_ok(
			'q1',
			[ @batch[ 8 .. $#batch ] ],
			'... and the other ' . (@batch - 8));
		ok( $node->poll_query_until(
				$db, qq{
SELECT count(*) > 0 FROM pg_stat_activity
 WHERE application_name = '$service' AND wait_event_type = 'Lock'
   AND $holder_pid = ANY (pg_blocking_pids(pid))}),
			"$service waits for the test's lock on its ledger rows");
		my $at = $applied->($service);
		$fault->();
		$holder->query_safe('ROLLBACK') unless $restarts;
		$holder->quit;
		return ($from, $at);
	};

	# the batch was still flowing when the fault hit
	my $flowing = sub {
		my ($what, $at, $before) = @_;
		cmp_ok($at, '<', $before + $BATCH,
				"$what hit while the batch flowed ($at of "
			  . ($before + $BATCH)
			  . ' applied)');
	};

	# the fault took effect: $re matches what $name logged since $mark
	my $took = sub {
		my ($name, $mark, $re, $what) = @_;
		ok(wait_until(sub { log_since(\%proc, $name, $mark) =~ $re }), $what);
	};

	# a redelivery of message $id and its claim's answer, in a service's log
	my $redelivered = sub {
		my ($claim, $id) = @_;
		return qr/"claim": $claim, "id": "\Q$id\E", "redelivered": true/;
	};

	# the message a service was held in (see the header): the batch's 9th
	my $held = sub { $messages[ $_[0] + 8 ]{message_id} };

	# nothing more to come to B: every message applied, the relay stopped
	# cleanly (what it sent is confirmed), q2 empty with nothing unacked
	my $drain = sub {
		my ($why) = @_;
		$node->poll_query_until($db,
				'SELECT count(DISTINCT origin) >= '
			  . scalar(@messages)
			  . " FROM applied WHERE service = 'svc_b'")
		  or die 'B did not apply ' . scalar(@messages) . " messages ($why)";
		is($stop->('relay'), 0, "relay stopped cleanly on SIGTERM $why");
		ok( wait_until(
				sub {
					my ($out) =
					  $broker->ctl(qw(-q list_queues name messages));
					$out =~ /^q2\s+0\s*$/m;
				}),
			"q2 holds nothing, nothing unacknowledged ($why)");
	};

	$start->('b');
	$start->('a');
	$start->('relay');

	# 1: kill -9 of A
	my $mark = log_mark(\%proc, 'a');
	my ($before, $at) = $held_fault->(
		'kill -9 of A',
		'svc_a', sub { ok($kill9->('a'), 'A killed with SIGKILL') });
	$flowing->('kill -9 of A', $at, $before);
	$start->('a');
	$took->(
		'a', $mark, $redelivered->('true', $held->($before)),
		'the new A got again the message the killed one was held in, and claimed it (not committed)'
	);

	# 2, 3: the relay dies between its publish and the broker's confirm, then
	# between the confirm and marking it sent
	# (each with nothing in flight before it: its copies are its own)
	$drain->('before the after-publish crash');
	for my $point ('after-publish', 'after-confirm')
	{
		$start->('relay', DEDUP_RELAY_TEST_CRASH => $point);
		$mark   = log_mark(\%proc, 'b');
		$before = $publish_batch->("the relay dying $point");
		my $status = $reap->('relay');
		ok( defined $status && ($status & 127) == 9,
			"the relay killed itself $point (SIGKILL)");
		like(
			read_file($proc{relay}{log}),
			qr/test hook: killing myself $point/,
			"its log says where ($point)");
		$start->('relay');
		$drain->("after the $point crash");
		my $copies = () = log_since(\%proc, 'b', $mark) =~ /"claim": false/g;
		cmp_ok($copies, '>', 0,
			"the relay dying $point: B got copies of what it had sent, and its claims refused them ($copies)"
		);
	}
	$start->('relay');

	# 4: kill -9 of B
	$mark = log_mark(\%proc, 'b');
	($before, $at) = $held_fault->(
		'kill -9 of B',
		'svc_b', sub { ok($kill9->('b'), 'B killed with SIGKILL') });
	cmp_ok($at, '<', scalar(@messages),
			"kill -9 of B hit while messages flowed ($at of "
		  . scalar(@messages)
		  . ' applied)');
	$start->('b');
	my $b_held = $node->poll_value($db,
		"SELECT message_id FROM applied WHERE service = 'svc_b' AND origin = '"
		  . $held->($before)
		  . "'");
	$took->(
		'b', $mark, $redelivered->('true', $b_held // 'none'),
		'the new B got again the message the killed one was held in, and claimed it (not committed)'
	);

	# 5: a broker restart
	$mark = log_mark(\%proc, 'a');
	($before, $at) = $held_fault->(
		'a broker restart',
		'svc_a',
		sub {
			is($broker->restart, 0,
				'RabbitMQ stopped cleanly (SIGTERM) for a restart');
		});
	$flowing->('the broker restart', $at, $before);
	$broker->ready_ok;
	my $committed = $held->($before);
	$took->(
		'a', $mark, qr/"claim": false, "id": "\Q$committed\E"/,
		'A committed the message it was held in, lost its ack with the broker, got it again and its claim refused it'
	);
	my $relay_at_broker_restart = $proc{relay}{log};

	# 6: an immediate PostgreSQL restart
	$mark = log_mark(\%proc, 'a');
	my $b_mark = log_mark(\%proc, 'b');
	($before, $at) = $held_fault->(
		'an immediate PostgreSQL restart', 'svc_a',
		sub { $node->stop('immediate') },  1);
	$flowing->('the PostgreSQL restart', $at, $before);
	$node->start;
	my $claimed_again = $redelivered->('true', $held->($before));
	$took->(
		'a', $mark, qr/"event": "reconnect".*$claimed_again/s,
		'A reconnected, got again the message of its lost transaction and claimed it'
	);

	# the end: everything through the chain, then stop it cleanly
	my $total = @messages;
	ok( $node->poll_query_until(
			$db,
			"SELECT count(DISTINCT origin) = $total FROM applied WHERE service = 'svc_b'"
		),
		"B applied all $total messages")
	  or diag(
		'B applied '
		  . $node->safe_psql(
			$db,
			"SELECT count(DISTINCT origin) FROM applied WHERE service = 'svc_b'"
		  ));
	if ($mode eq 'table')
	{
		ok( $node->poll_query_until(
				$db,
				'SELECT count(*) = 0 FROM dedup_outbox WHERE sent_at IS NULL'
			),
			'every outbox row marked sent');
	}
	ok( wait_until(
			sub { $broker->depth('q1') == 0 && $broker->depth('q2') == 0 }),
		'q1 and q2 are empty');
	is($stop->($_), 0, "$_ stopped cleanly on SIGTERM") for qw(relay a b);

	# exactly once at each service, none lost, in order per key
	my %want = map { $_->{message_id} => 1 } @messages;
	for my $service ('svc_a', 'svc_b')
	{
		my %got = map { split /\|/ } split /\n/,
		  $node->safe_psql($db,
			"SELECT origin, count(*) FROM applied WHERE service = '$service' GROUP BY 1"
		  );
		my @wrong = grep { ($got{$_} // 0) != ($want{$_} // 0) }
		  sort(keys %{ { %want, %got } });
		is(scalar(@wrong), 0,
			"$service applied each of the $total messages exactly once, none lost, none extra"
		  )
		  or diag(
			join(', ',
				map { "$_ applied " . ($got{$_} // 0) . ' times' }
				  @wrong[ 0 .. ($#wrong < 9 ? $#wrong : 9) ]));
		my %sum;
		$sum{ $_->{key} } += $_->{amount} for @messages;
		is( $node->safe_psql(
				$db,
				"SELECT string_agg(key || '=' || total, ',' ORDER BY key) FROM ledger WHERE service = '$service'"
			),
			join(',', map { "$_=$sum{$_}" } sort keys %sum),
			"$service: its ledger holds the sums");
		is( $node->safe_psql(
				$db, qq{
SELECT count(*) FROM (SELECT n, lag(n) OVER (PARTITION BY key ORDER BY seq) AS prev
                        FROM applied WHERE service = '$service') a
 WHERE n <> prev + 1}),
			'0',
			"$service applied each key's messages in order");
	}
	note('copies at B since the PostgreSQL restart: '
		  . (() = log_since(\%proc, 'b', $b_mark) =~ /"claim": false/g));
	is( $node->safe_psql(
			$db,
			"SELECT count(*), count(DISTINCT message_id) FROM processed_messages WHERE consumer_name = 'svc_b'"
		),
		"$total|$total",
		"svc_b's claims: one per message A published");

	my $relay_log = read_file($relay_at_broker_restart);
	is(scalar(() = $relay_log =~ /broker unavailable/g),
		1, 'the relay logged the broker outage once');
	like($relay_log, qr/broker back after/, '... and its end');
	$relay_log = read_file($proc{relay}{log});
	is(scalar(() = $relay_log =~ /database unavailable/g),
		1, 'the relay logged the database outage once');
	like($relay_log, qr/database back after/, '... and its end');
	like(
		$relay_log,
		$mode eq 'table'
		? qr/lag: \d+ unsent, the oldest/
		: qr/lag: slot dedup_relay \d+ bytes behind/,
		'the relay reports its lag');

	if ($mode eq 'table')
	{
		is( $node->safe_psql(
				$db, q{
SELECT count(*) FROM dedup_outbox o FULL JOIN (SELECT message_id FROM applied WHERE service = 'svc_b') b USING (message_id)
 WHERE o.message_id IS NULL OR b.message_id IS NULL}),
			'0',
			"B applied exactly the outbox's message ids");
		cmp_ok(
			$node->safe_psql(
				$db, 'SELECT count(*) FROM dedup_outbox WHERE attempts > 1'),
			'>', 0,
			'the messages of the crashed batches were leased again');
	}
	else
	{
		is( $node->safe_psql(
				$db, q{
SELECT pg_current_wal_lsn() >= confirmed_flush_lsn AND confirmed_flush_lsn IS NOT NULL
  FROM pg_replication_slots WHERE slot_name = 'dedup_relay'}),
			't',
			'the slot confirmed no further than the server wrote');
	}

	$broker->stop_ok;
	$node->stop;
	return;
}

# where a process's log is now (its generation, the length of its log)
sub log_mark
{
	my ($proc, $name) = @_;
	my $p = $proc->{$name};
	return [ $p->{gen}, length(read_file($p->{log})) ];
}

# what it logged since $mark, over all of its generations since
sub log_since
{
	my ($proc, $name, $mark) = @_;
	my ($from, $offset) = @$mark;
	my $text = '';
	for my $gen ($from .. $proc->{$name}{gen})
	{
		(my $log = $proc->{$name}{log}) =~ s/-\d+\.log$/-$gen.log/;
		$text .= substr(read_file($log), $gen == $from ? $offset : 0);
	}
	return $text;
}

1;
