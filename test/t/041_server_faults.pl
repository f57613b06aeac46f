#
# 041_server_faults.pl: the database fails under RabbitMQ consumers while
# messages flow.
#
# A private RabbitMQ node carries 400 persistent messages (8 published
# twice).  Four consumers (doc/examples/rabbitmq_consumer.py, prefetch 10, 20 ms of
# work inside each transaction, after the claim) apply them with the README
# pattern, connected straight to PostgreSQL:
#   retry-2 (psycopg2), retry-3 (psycopg 3): on a connection error,
#       reconnect (polling until the server is back) and handle the same
#       delivery again;
#   requeue (psycopg2): reconnect and nack the delivery with requeue, so the
#       broker redelivers it (possibly to another consumer);
#   crashy (psycopg2): dies on the error, and the test starts a new one: the
#       broker redelivers every message it had not acked.
# Once 60, 150 and 240 messages are applied: every consumer backend is
# killed (pg_terminate_backend), the server is restarted with pg_ctl -m
# immediate (crash recovery), the backends are killed again.  Each fault
# waits for the state it needs, not for a moment: a gate in the database
# (a trigger on "applied") holds every transaction that would apply a
# message past the fault's count, after its claim, until the test moves
# the gate on; so however late the test looks, the messages are still
# flowing and, once every consumer (crashy's current generation included)
# waits with a transaction in flight, the fault comes.
#
# Asserted: every fault cut each consumer's transaction (claims rolled back
# by it); crashy died on each; each consumer reconnected after each fault;
# then, once the queue is empty: every message applied exactly once and none
# lost, balances, claims = messages, each copy acked exactly once; per
# attempt: every claim that returned true was either committed (its attempt
# is in "applied") or lost to a fault; the duplicates suppressed are exactly
# the producer's extra copies plus the commits whose reply a fault swallowed;
# every requeued delivery came back with the redelivered flag and was acked.
#
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupBroker;
use DedupConsumers;
use DedupNode;
use DedupProcess;
use DedupTools;
use POSIX qw(WNOHANG);
use PostgreSQL::Test::Utils;
use Test::More;

my $python = require_tools(
	modules  => [ 'pika', 'psycopg2', 'psycopg' ],
	programs => ['/usr/lib/rabbitmq/bin/rabbitmq-server']);
my $tmp   = PostgreSQL::Test::Utils::tempdir;
my $queue = 'payments';

my $broker = DedupBroker->start(dir => "$tmp/rabbitmq", python => $python);
BAIL_OUT($broker->{error}) if $broker->{error};

my $node = DedupNode->create('faults');
my $db   = 'bank';
$node->safe_psql('postgres', "CREATE DATABASE $db");
$node->safe_psql($db, "CREATE EXTENSION dedup;\n" . consumer_tables_sql());

# the gate: a transaction applying a message once "at" are applied waits
# (after its claim and its credit) until "at" is moved; a table, not a lock,
# so that it outlasts a restart
$node->safe_psql(
	$db, q{
CREATE TABLE gate (at bigint);    -- NULL: open
INSERT INTO gate VALUES (60);
CREATE FUNCTION gate_wait() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	WHILE (SELECT count(*) FROM applied) >= (SELECT at FROM gate) LOOP
		PERFORM pg_sleep(0.01);
	END LOOP;
	RETURN NEW;
END $$;
CREATE TRIGGER gate BEFORE INSERT ON applied FOR EACH ROW EXECUTE FUNCTION gate_wait();
});
$broker->ready_ok;
my $consumers = DedupConsumers->new(
	python => $python,
	dir    => $tmp,
	broker => $broker,
	node   => $node,
	db     => $db);

my @messages = payments('pay', 400);
my @copies =
  map { ($_, $_->{message_id} =~ /(\d+)$/ && $1 % 50 == 0 ? $_ : ()) }
  @messages;
$broker->publish_ok($queue, \@copies, '408 copies of 400 messages published');

my $control = $consumers->control('control');
signal($control, 'go');
my @common = ('steady', $control, '--work-ms', 20);
my @harnesses =
  map {
	$consumers->start($_->[0], $queue, @common, '--driver', $_->[1],
		'--on-db-error', $_->[2])
  } (
	[ 'retry-2', 'psycopg2', 'retry' ],
	[ 'retry-3', 'psycopg3', 'retry' ],
	[ 'requeue', 'psycopg2', 'requeue' ]);

# crashy: a plain process, started again after each fault
my $generation = 0;
my $crashy_pid;
my @crashy_exits;

sub start_crashy
{
	$generation++;
	$crashy_pid = $consumers->spawn("crashy-$generation", $queue, @common,
		'--driver', 'psycopg2', '--on-db-error', 'fail');
	return;
}

# wait for crashy to exit, and keep its exit code
sub reap_crashy
{
	return wait_until(
		sub {
			return 0 unless waitpid($crashy_pid, WNOHANG) == $crashy_pid;
			push @crashy_exits, $? >> 8;
			return 1;
		});
}
start_crashy();

my $consumer_names = q{application_name ~ '^(retry|requeue|crashy)'};
my @faults = ([ 60, 'terminate' ], [ 150, 'restart' ], [ 240, 'terminate' ]);
my (@done, $claims_cut);
for my $i (0 .. $#faults)
{
	my ($at, $what) = @{ $faults[$i] };
	my $next = $i < $#faults ? $faults[ $i + 1 ][0] : 'NULL';    # NULL: open
	$node->poll_query_until($db, "SELECT count(*) >= $at FROM applied")
	  or die "$at messages were not applied";

	# the gate holds each consumer in a transaction after its claim, or it
	# waits for a lock (a claim, an account's row) of one held there
	ok( $node->poll_query_until(
			$db, qq{
SELECT count(DISTINCT application_name) = 4 FROM pg_stat_activity
 WHERE application_name IN ('retry-2', 'retry-3', 'requeue', 'crashy-$generation')
   AND (wait_event_type = 'Lock' OR wait_event = 'PgSleep')}),
		"$what fault: every consumer, crashy-$generation included, waits in a transaction"
	);

	# those held by the gate have claimed (a lower bound: one waiting for
	# an account's row has claimed too)
	my ($applied, $claimed) = split /\|/, $node->safe_psql(
		$db, qq{
SELECT (SELECT count(*) FROM applied),
	   (SELECT count(*) FROM pg_stat_activity WHERE $consumer_names AND wait_event = 'PgSleep')}
	);
	$claims_cut += $claimed;
	if ($what eq 'terminate')
	{
		my $pids = $node->safe_psql($db,
			"SELECT string_agg(pid::text, ',') FROM pg_stat_activity WHERE $consumer_names"
		);
		my $killed = $node->safe_psql($db,
			"SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity WHERE pid IN ($pids)"
		);
		$node->poll_query_until($db,
			"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid IN ($pids)")
		  or die "the terminated backends did not exit";
		push @done, [ $what, $applied, $killed, $claimed ];
	}
	else
	{
		$node->stop('immediate');
		$node->start;
		push @done, [ $what, $applied, 'all', $claimed ];
	}
	$node->safe_psql($db, "UPDATE gate SET at = $next");
	ok(reap_crashy(), "$what fault: crashy-$generation died");
	start_crashy();
}
ok($consumers->wait_drained($queue, scalar(@copies)),
	'queue drained, every copy acked')
  or diag(join('; ', map { "@$_" } @done));
is( scalar(@done),
	3,
	'three faults injected: ' . join(
		'; ',
		map {
			"$_->[0] at $_->[1] applied ($_->[2] backends, $_->[3] after their claim)"
		} @done));
cmp_ok($done[$_][1], '<', 400,
	"fault $done[$_][0] hit while messages were still flowing")
  for 0 .. $#done;
cmp_ok($done[0][2], '>=', 4,
	'the first pg_terminate_backend killed every consumer backend');

signal($control, 'stop');
is(join(',', $consumers->stop(@harnesses)),
	'0,0,0', 'retry-2, retry-3, requeue stopped cleanly');
ok(reap_crashy(), "crashy-$generation stopped");
is($crashy_exits[-1], 0, "crashy-$generation exited cleanly");
pop @crashy_exits;
ok( @crashy_exits == 3 && !grep({ $_ == 0 } @crashy_exits),
	"crashy died on each fault and was restarted (exit codes @crashy_exits)");

# ---------------------------------------------------------------------------
# what the consumers saw
# ---------------------------------------------------------------------------

my @d     = $consumers->deliveries;
my %exits = map { $_->{worker} => $_ }
  grep { ($_->{event} // '') eq 'exit' } $consumers->records;
for my $w ('retry-2', 'retry-3', 'requeue')
{
	cmp_ok($exits{$w}{connects}, '>=', 4,
		"$w reconnected after each fault ($exits{$w}{connects} connections)");
}
my @errors      = grep { $_->{action} =~ /^db-error/ } @d;
my @lost_claims = grep { $_->{claim} } @errors;
cmp_ok(scalar(@lost_claims), '>=', $claims_cut,
	scalar(@lost_claims)
	  . " transactions had claimed and were cut by a fault (rolled back), $claims_cut of them held by the gate"
);

my %in_applied = map { $_ => 1 } split /\n/,
  $node->safe_psql($db, 'SELECT attempt FROM applied');
my @true      = grep { $_->{claim} } @d;
my @committed = grep { $in_applied{ $_->{attempt} } } @true;
is(scalar(@committed), 400,
	'claims that returned true and committed: one per message');
is( scalar(
		grep { !$in_applied{ $_->{attempt} } && $_->{action} !~ /^db-error/ }
		  @true),
	0,
	'every other true claim was cut by a fault');

# a fault during the commit: committed, but the consumer saw an error
my @swallowed =
  grep { $_->{action} =~ /^db-error/ && $in_applied{ $_->{attempt} } } @d;
my @false_acked =
  grep { exists $_->{claim} && !$_->{claim} && $_->{action} eq 'ack' } @d;
is( scalar(@false_acked),
	8 + @swallowed,
	'duplicates suppressed ('
	  . scalar(@false_acked)
	  . ') = producer retries (8) + commits whose reply was lost ('
	  . scalar(@swallowed) . ')');
my $acks = grep { $_->{action} eq 'ack' } @d;
is($acks, 408, 'each of the 408 copies acked exactly once');
my @requeued = grep { $_->{action} eq 'db-error-requeue' } @d;
is( scalar(
		grep {
			my $r = $_;
			grep {
					 $_->{message_id} eq $r->{message_id}
				  && $_->{redelivered}
				  && $_->{action} eq 'ack'
				  && $_->{t} > $r->{t}
			} @d
		} @requeued),
	scalar(@requeued),
	scalar(@requeued)
	  . ' deliveries nacked after a fault: each redelivered (flag set) and acked'
);
my @crashed = grep { $_->{action} eq 'db-error-exit' } @d;
is( scalar(
		grep {
			my $r = $_;
			grep {
					 $_->{message_id} eq $r->{message_id}
				  && $_->{redelivered}
				  && $_->{action} eq 'ack'
				  && $_->{t} > $r->{t}
			} @d
		} @crashed),
	scalar(@crashed),
	scalar(@crashed)
	  . ' deliveries in flight when crashy died: each redelivered by the broker (flag set) and acked'
);
note(scalar(@d) . ' deliveries, ' . scalar(@errors) . ' hit a fault');

$consumers->check_exactly_once(
	like     => 'pay-%',
	messages => \@messages,
	balances => balances(@messages),
	label    => 'after the faults');

$broker->stop_ok;
$node->stop;
done_testing();
