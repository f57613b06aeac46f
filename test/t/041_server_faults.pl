#
# 041_server_faults.pl: the database fails under RabbitMQ consumers while
# messages flow.
#
# A private RabbitMQ node carries 400 persistent messages (8 published
# twice).  Four consumers (test/rabbitmq_consumer.py, prefetch 10, 20 ms of
# work inside each transaction, after the claim) apply them with the README
# pattern, connected straight to PostgreSQL:
#   retry-2 (psycopg2), retry-3 (psycopg 3): on a connection error,
#       reconnect (polling until the server is back) and handle the same
#       delivery again;
#   requeue (psycopg2): reconnect and nack the delivery with requeue, so the
#       broker redelivers it (possibly to another consumer);
#   crashy (psycopg2): dies on the error, and the test starts a new one: the
#       broker redelivers every message it had not acked.
# While they run, after about 80, 180 and 280 applications: every consumer
# backend is killed (pg_terminate_backend), the server is restarted with
# pg_ctl -m immediate (crash recovery), the backends are killed again.
#
# Asserted: every fault happened with messages in flight (claims rolled back
# by it); each consumer reconnected after each fault; then, once the queue
# is empty: every message applied exactly once and none lost, balances,
# claims = messages, each copy acked exactly once; per attempt: every claim
# that returned true was either committed (its attempt is in "applied") or
# lost to a fault; the duplicates suppressed are exactly the producer's
# extra copies plus the commits whose reply the fault swallowed; every
# requeued delivery came back with the redelivered flag and was acked.
#
use strict;
use warnings;

use File::Path qw(make_path);
use JSON::PP;
use POSIX qw(WNOHANG);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupTest;

my $python = require_tools(
	modules => [ 'pika', 'psycopg2', 'psycopg' ],
	programs => ['/usr/lib/rabbitmq/bin/rabbitmq-server']);
my $timeout = 60;
my $tmp = PostgreSQL::Test::Utils::tempdir;
my $queue = 'payments';

my $rmq = start_rabbitmq(dir => "$tmp/rabbitmq", python => $python,
	timeout => $timeout, nowait => 1);
BAIL_OUT($rmq->{error}) if $rmq->{error};

my $node = PostgreSQL::Test::Cluster->new('faults');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'dedup'");
$node->start;
my $db = 'bank';
$node->safe_psql('postgres', "CREATE DATABASE $db");
$node->safe_psql($db, "CREATE EXTENSION dedup;\n" . consumer_tables_sql());
ok(wait_rabbitmq($rmq)->{ready}, 'RabbitMQ accepts AMQP connections')
  or BAIL_OUT($rmq->{error});

my (@messages, @copies, %copies_of, %balance);
for my $i (1 .. 400)
{
	my $m = {
		message_id => sprintf('pay-%04d', $i),
		account => 1 + $i % 5,
		amount => 1 + ($i * 37) % 100
	};
	push @messages, $m;
	push @copies, $m;
	push @copies, $m if $i % 50 == 0;
	$balance{ $m->{account} } += $m->{amount};
}
$copies_of{ $_->{message_id} }++ for @copies;
open(my $fh, '>', "$tmp/messages.json") or die;
print $fh encode_json(\@copies);
close($fh);
my ($rc, $out, $err) = run_helper($python, $timeout, 'produce',
	$rmq->{amqp_port}, $queue, "$tmp/messages.json");
is(eval { decode_json($out)->{published} }, 408, '408 copies of 400 messages published')
  or diag($err);

my $control = "$tmp/control";
make_path($control);
append_to_file("$control/go", '');
my (%logs, @harnesses);
my @args_common = ($rmq->{amqp_port}, $queue, $node->host, $node->port, $db);

sub consumer_args
{
	my ($worker, $driver, $mode) = @_;
	$logs{$worker} = "$tmp/$worker.log";
	return ('consume', @args_common, $worker, 'steady', $control,
		'--driver', $driver, '--on-db-error', $mode, '--work-ms', 20);
}
for ([ 'retry-2', 'psycopg2', 'retry' ], [ 'retry-3', 'psycopg3', 'retry' ],
	[ 'requeue', 'psycopg2', 'requeue' ])
{
	push @harnesses, start_consumer($python, "$tmp/$_->[0].log", consumer_args(@$_));
}

# crashy: a plain process we restart whenever it dies
my $generation = 0;
my $crashy_pid;
my @crashy_exits;

sub start_crashy
{
	$generation++;
	my $w = "crashy-$generation";
	my @args = consumer_args($w, 'psycopg2', 'fail');
	$crashy_pid = spawn_session("$tmp/$w.log", {}, $python, consumer_script(), @args);
}
END { kill('KILL', -$crashy_pid) if $crashy_pid; }
start_crashy();

sub records { return map { read_json_lines($_) } values %logs; }

sub deliveries
{
	return grep { ($_->{event} // '') eq 'delivery' } records();
}

# Is every consumer connected, crashy's current generation included?  A
# fault is injected only then: a consumer that is still reconnecting from
# the last one (or, for crashy, still starting) would not see it.
sub consumers_connected
{
	return $node->safe_psql(
		$db, qq{
SELECT count(DISTINCT application_name) FROM pg_stat_activity
 WHERE application_name IN ('retry-2', 'retry-3', 'requeue', 'crashy-$generation')}
	) == 4;
}

# faults, at applications counted in the database (once every consumer is
# connected)
my @faults = ([ 60, 'terminate' ], [ 150, 'restart' ], [ 240, 'terminate' ]);
my @done;
my $drained = 0;
my $deadline = time() + 120;
while (time() < $deadline)
{
	if (waitpid($crashy_pid, WNOHANG) == $crashy_pid)
	{
		push @crashy_exits, $? >> 8;
		start_crashy();
	}
	my $applied = $node->safe_psql($db, 'SELECT count(*) FROM applied');
	if (@faults && $applied >= $faults[0][0] && consumers_connected())
	{
		my ($at, $what) = @{ shift @faults };
		if ($what eq 'terminate')
		{
			my $killed = $node->safe_psql($db, q{
SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 10000))
  FROM pg_stat_activity
 WHERE application_name ~ '^(retry|requeue|crashy)'});
			push @done, [ $what, $applied, $killed ];
		}
		else
		{
			$node->stop('immediate');
			$node->start;
			push @done, [ $what, $applied, 'all' ];
		}
		next;
	}
	if (!@faults)
	{
		my $acks = grep { ($_->{action} // '') eq 'ack' } deliveries();
		if ($acks >= @copies)
		{
			my ($rc, $out) = run_helper($python, $timeout, 'depth', $rmq->{amqp_port}, $queue);
			my $d = eval { decode_json($out) };
			if ($rc == 0 && $d && $d->{messages} == 0)
			{
				$drained = 1;
				last;
			}
		}
	}
	usleep(50_000);
}
ok($drained, 'queue drained, every copy acked')
  or diag(join('; ', map { "@$_" } @done));
is(scalar(@done), 3, 'three faults injected: ' . join('; ', map { "$_->[0] at $_->[1] applied ($_->[2] backends)" } @done));
cmp_ok($done[$_][1], '<', 400, "fault $done[$_][0] hit while messages were still flowing") for 0 .. $#done;
cmp_ok($done[0][2], '>=', 4, 'the first pg_terminate_backend killed every consumer backend');

append_to_file("$control/stop", '');
is(join(',', stop_consumers(@harnesses)), '0,0,0', 'retry-2, retry-3, requeue stopped cleanly');
ok(wait_until($timeout, sub { waitpid($crashy_pid, WNOHANG) == $crashy_pid }),
	"crashy-$generation stopped");
is(($? >> 8), 0, "crashy-$generation exited cleanly");
$crashy_pid = undef;
cmp_ok(scalar(@crashy_exits), '>=', 3, "crashy died on each fault and was restarted (exit codes @crashy_exits)");

# ---------------------------------------------------------------------------
# what the consumers saw
# ---------------------------------------------------------------------------

my @d = deliveries();
my %exits = map { $_->{worker} => $_ } grep { ($_->{event} // '') eq 'exit' } records();
for my $w ('retry-2', 'retry-3', 'requeue')
{
	cmp_ok($exits{$w}{connects}, '>=', 4, "$w reconnected after each fault ($exits{$w}{connects} connections)");
}
my @errors = grep { $_->{action} =~ /^db-error/ } @d;
my @lost_claims = grep { $_->{claim} } @errors;
cmp_ok(scalar(@lost_claims), '>=', 1,
	scalar(@lost_claims) . ' transactions had claimed and were cut by a fault (rolled back)');

my %in_applied = map { $_ => 1 } split /\n/, $node->safe_psql($db, 'SELECT attempt FROM applied');
my @true = grep { $_->{claim} } @d;
my @committed = grep { $in_applied{ $_->{attempt} } } @true;
is(scalar(@committed), 400, 'claims that returned true and committed: one per message');
is(scalar(grep { !$in_applied{ $_->{attempt} } && $_->{action} !~ /^db-error/ } @true), 0,
	'every other true claim was cut by a fault');
# a fault during the commit: committed, but the consumer saw an error
my @swallowed = grep { $_->{action} =~ /^db-error/ && $in_applied{ $_->{attempt} } } @d;
my @false_acked = grep { exists $_->{claim} && !$_->{claim} && $_->{action} eq 'ack' } @d;
is(scalar(@false_acked), 8 + @swallowed,
	'duplicates suppressed (' . scalar(@false_acked) . ') = producer retries (8) + commits whose reply was lost ('
	  . scalar(@swallowed) . ')');
my $acks = grep { $_->{action} eq 'ack' } @d;
is($acks, 408, 'each of the 408 copies acked exactly once');
my @requeued = grep { $_->{action} eq 'db-error-requeue' } @d;
is( scalar(grep {
			my $r = $_;
			grep { $_->{message_id} eq $r->{message_id} && $_->{redelivered} && $_->{action} eq 'ack' && $_->{t} > $r->{t} } @d
		} @requeued),
	scalar(@requeued),
	scalar(@requeued) . ' deliveries nacked after a fault: each redelivered (flag set) and acked');
my @crashed = grep { $_->{action} eq 'db-error-exit' } @d;
is( scalar(grep {
			my $r = $_;
			grep { $_->{message_id} eq $r->{message_id} && $_->{redelivered} && $_->{action} eq 'ack' && $_->{t} > $r->{t} } @d
		} @crashed),
	scalar(@crashed),
	scalar(@crashed) . ' deliveries in flight when crashy died: each redelivered by the broker (flag set) and acked');
note(scalar(@d) . ' deliveries, ' . scalar(@errors) . ' hit a fault');

check_exactly_once(node => $node, db => $db, like => 'pay-%', messages => \@messages,
	balances => \%balance, label => 'after the faults');

my $stopped = stop_rabbitmq($rmq);
is($stopped->{status}, 0, 'RabbitMQ stopped cleanly');
is(scalar(@{ $stopped->{strays} }) + scalar(@{ $stopped->{leftovers} }), 0,
	'no process of the broker or its epmd left');
$node->stop;
done_testing();
