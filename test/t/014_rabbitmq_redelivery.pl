#
# 014_rabbitmq_redelivery.pl: dedup_claim behind a real broker (RabbitMQ).
#
# A private RabbitMQ node (started here as the unprivileged test user, with
# its own epmd, ports, Erlang cookie and data under the test's temporary
# directory) carries 200 persistent payment messages, 10 of them published
# twice by the producer (a producer retry: same message_id).  Consumers in
# Python (pika, manual acks, prefetch 10; psycopg2) run the README pattern
#
#     BEGIN; dedup_claim('ledger', message_id) -> if true: credit the account
#     and insert into "applied"; COMMIT; then basic_ack
#
# while failing the ways brokers make consumers fail:
#   (a) crash-after-commit commits 5 messages without acking them and dies:
#       RabbitMQ redelivers them (redelivered flag set) to another consumer,
#       whose claim returns false: acked, not applied again;
#   (b) crash-before-commit dies after a claim (and its credit), before the
#       commit: the claim dies with the transaction, the redelivery claims
#       again and applies the message once;
#   (c) nacker commits and then nacks some messages with requeue (an ack
#       that failed): the redelivery is a duplicate;
#   (d) nacker, steady-1 and steady-2 consume the queue concurrently;
#   (e) the producer's second copies are duplicates.
# Then, once every copy has been acked and the queue is empty (ready and
# unacked): every message applied exactly once, balances equal the sum of
# the distinct messages, processed_messages holds exactly those 200 claims,
# and per message the duplicates detected equal its extra copies plus the
# deliveries committed but not acked (whatever consumer saw them);
# dedup_stats (dedup preloaded) counts the same claims and duplicates the
# consumers logged.  With a dedup_claim that always returned true (or
# false) the applied rows, balances and duplicate counts would all differ.
#
# The broker is stopped with SIGTERM (a clean shutdown) at the end, or from
# the END block if the test dies; the test checks that no process of the
# broker or its epmd survives.
#
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupBroker;
use DedupConsumers;
use DedupNode;
use DedupTools;
use PostgreSQL::Test::Utils;
use Test::More;

my $python = require_tools(
	modules  => [ 'pika',                                  'psycopg2' ],
	programs => [ '/usr/lib/rabbitmq/bin/rabbitmq-server', '/usr/bin/epmd' ]);

my $queue    = 'payments';
my $consumer = 'ledger';     # the dedup consumer name of every worker

# ---------------------------------------------------------------------------
# a private RabbitMQ node, and the database while it boots
# ---------------------------------------------------------------------------

my $tmp    = PostgreSQL::Test::Utils::tempdir;
my $broker = DedupBroker->start(dir => "$tmp/rabbitmq", python => $python);
BAIL_OUT($broker->{error}) if $broker->{error};
note(
	"rabbitmq-server pid $broker->{pid}, node $broker->{nodename}, AMQP port $broker->{amqp_port}"
);

my $node = DedupNode->create('rabbit');
my $db   = 'bank';
$node->safe_psql('postgres', "CREATE DATABASE $db");

# "applied" gets one row per application, in the claim's transaction
$node->safe_psql($db, "CREATE EXTENSION dedup;\n" . consumer_tables_sql());

$broker->ready_ok;
my $consumers = DedupConsumers->new(
	python => $python,
	dir    => $tmp,
	broker => $broker,
	node   => $node,
	db     => $db);

# ---------------------------------------------------------------------------
# the producer: 200 messages, 10 of them published twice
# ---------------------------------------------------------------------------

my $n        = 200;
my @messages = payments('pay', $n);

# retried at once (adjacent copies), and later
my @copies =
  map { ($_, $_->{message_id} =~ /(\d+)$/ && $1 % 40 == 0 ? $_ : ()) }
  @messages;
push @copies,
  grep { $_->{message_id} =~ /(\d+)$/ && $1 % 40 == 20 } @messages;
my %copies_of;
$copies_of{ $_->{message_id} }++ for @copies;
my $producer_duplicates = @copies - @messages;
is($producer_duplicates, 10, 'the producer publishes 10 messages twice');

my $expected_balance = balances(@messages);
$broker->publish_ok($queue, \@copies,
	'producer: 210 persistent copies published and confirmed');
is($broker->depth($queue), scalar(@copies), 'the queue holds the 210 copies');

# ---------------------------------------------------------------------------
# consumers
# ---------------------------------------------------------------------------

# (a) and (b) alone on the queue, one after the other, each until it dies
for my $crash (
	[ 'crash-after-commit',  'die-after-commit',  3 ],
	[ 'crash-before-commit', 'die-before-commit', 4 ])
{
	my ($worker, $behaviour, $code) = @$crash;
	my $control = $consumers->control("control-$worker");
	signal($control, 'go');
	is($consumers->run($worker, $queue, $behaviour, $control),
		$code, "$worker died as planned (exit code $code)")
	  or diag($consumers->stderr_of($worker));
}

# (c), (d): three consumers at once, started together
my $control = $consumers->control('control-concurrent');
my @concurrent =
  ([ 'nacker', 'nack' ], [ 'steady-1', 'steady' ], [ 'steady-2', 'steady' ]);
my @harnesses =
  map { $consumers->start($_->[0], $queue, $_->[1], $control) } @concurrent;
my @workers = map { $_->[0] } @concurrent;
ok($consumers->wait_ready(@workers), 'three concurrent consumers connected');
signal($control, 'go');

# drained: every copy acked once, nothing ready in the queue
ok( $consumers->wait_drained($queue, scalar(@copies)),
	'queue drained: every copy acked, no message ready');
is($broker->queue($queue)->{consumers},
	3, 'the three consumers were still attached');

{
	my ($out, $err) = $broker->ctl(
		'--quiet',        '--no-table-headers',
		'list_queues',    'name',
		'messages_ready', 'messages_unacknowledged',
		'consumers');
	like(
		$out,
		qr/^\Q$queue\E\s+0\s+0\s+3\s*$/m,
		'rabbitmqctl: 0 ready, 0 unacknowledged, 3 consumers'
	) or diag("rabbitmqctl: $out $err");
}

signal($control, 'stop');
my @codes = $consumers->stop(@harnesses);
for my $i (0 .. $#workers)
{
	is($codes[$i], 0, "$workers[$i] stopped cleanly")
	  or diag($consumers->stderr_of($workers[$i]));
}

is_deeply(
	$broker->queue($queue),
	{ consumers => 0, messages => 0 },
	'queue empty with no consumer attached: nothing was left unacked');

# ---------------------------------------------------------------------------
# what the consumers saw
# ---------------------------------------------------------------------------

my @deliveries = $consumers->deliveries;
my (%claims_true, %claims_false, %redeliveries, %committed_unacked, %nacked,
	%died);
for my $d (@deliveries)
{
	my $id = $d->{message_id};
	($d->{claim} ? \%claims_true : \%claims_false)->{$id}++;
	$redeliveries{$id}++      if $d->{redelivered};
	$committed_unacked{$id}++ if $d->{action} eq 'commit-no-ack';
	$nacked{$id}++            if $d->{action} eq 'nack';
	$died{$id}++              if $d->{action} eq 'die-before-commit';
}
my $sum  = sub { my $h = shift; my $s = 0; $s += $_ for values %$h; $s };
my $acks = grep { $_->{action} eq 'ack' } @deliveries;
is($acks, scalar(@copies), 'each of the 210 copies was acked exactly once');
note(
	sprintf(
		'%d deliveries (%d redelivered), %d claims true, %d false, per worker: %s',
		scalar(@deliveries),
		$sum->(\%redeliveries),
		$sum->(\%claims_true),
		$sum->(\%claims_false),
		join(
			', ',
			map {
				my $w = $_;
				"$w " . grep { $_->{worker} eq $w } @deliveries
			  }
			  sort keys %{ { map { $_->{worker} => 1 } @deliveries } })));

# whose work is in "applied": message_id => [workers]
my %applied;
for my $row (split /\n/,
	$node->safe_psql($db, 'SELECT message_id, worker FROM applied'))
{
	my ($id, $worker) = split /\|/, $row;
	push @{ $applied{$id} }, $worker;
}

# later deliveries of $id by a worker other than $worker, matching $want
sub redelivered_to_other
{
	my ($id, $worker, $claim, $action) = @_;
	return grep {
			 $_->{message_id} eq $id
		  && $_->{worker} ne $worker
		  && $_->{redelivered}
		  && !!$_->{claim} == !!$claim
		  && $_->{action} eq $action
	} @deliveries;
}

# (a) committed, died before the ack
my @a = grep { $_->{action} eq 'commit-no-ack' } @deliveries;
is(scalar(@a), 5,
	'(a) crash-after-commit committed 5 messages it never acked');
is(scalar(grep { $_->{claim} } @a), 5, '(a) ... each a first claim');
is( scalar(
		grep {
			redelivered_to_other($_->{message_id}, 'crash-after-commit', 0,
				'ack')
		} @a),
	5,
	'(a) each was redelivered (flag set) to another consumer, claimed false and acked'
);
is( scalar(
		grep {
			my $w = $applied{ $_->{message_id} } // [];
			@$w == 1 && $w->[0] eq 'crash-after-commit'
		} @a),
	5,
	'(a) each applied once, by the consumer that died, never again');

# (b) claimed, died before the commit
my @b = grep { $_->{action} eq 'die-before-commit' } @deliveries;
is(scalar(@b), 1, '(b) crash-before-commit died inside one transaction');
ok($b[0] && $b[0]{claim}, '(b) ... after its claim returned true');
my $b_id = $b[0] ? $b[0]{message_id} : '';
is(scalar(redelivered_to_other($b_id, 'crash-before-commit', 1, 'ack')),
	1, '(b) the redelivery (flag set) claimed it again (true) and acked it');
my $b_applied = $applied{$b_id} // [];
ok( @$b_applied == 1 && $b_applied->[0] ne 'crash-before-commit',
	'(b) applied once, by the redelivery: the dead claim left nothing'
) or diag("applied by @$b_applied");

# (c) committed, then nacked with requeue
my @c = grep { $_->{action} eq 'nack' } @deliveries;
cmp_ok(scalar(@c), '>=', 1, '(c) nacker nacked committed messages')
  or diag(scalar @c);
is( scalar(
		grep {
			my $id = $_->{message_id};
			grep {
					 $_->{message_id} eq $id
				  && $_->{redelivered}
				  && !$_->{claim}
				  && $_->{action} eq 'ack'
			} @deliveries
		} @c),
	scalar(@c),
	'(c) each nacked message was redelivered (flag set), claimed false and acked'
);
is(scalar(grep { @{ $applied{ $_->{message_id} } // [] } == 1 } @c),
	scalar(@c), '(c) each nacked message applied once');

# (d) concurrency
for my $w (@workers)
{
	cmp_ok(
		scalar(
			grep { $_->{worker} eq $w && $_->{action} eq 'ack' } @deliveries),
		'>', 0,
		"(d) $w acked messages");
}
{
	my (%first, %last);
	for my $d (grep { $_->{worker} =~ /^steady-/ } @deliveries)
	{
		my $w = $d->{worker};
		$first{$w} = $d->{t} if !defined $first{$w} || $d->{t} < $first{$w};
		$last{$w}  = $d->{t} if !defined $last{$w}  || $d->{t} > $last{$w};
	}
	ok( defined $first{'steady-1'}
		  && defined $first{'steady-2'}
		  && $first{'steady-1'} < $last{'steady-2'}
		  && $first{'steady-2'} < $last{'steady-1'},
		'(d) steady-1 and steady-2 consumed at the same time');
}

# (e) producer retries
my @e = grep { $copies_of{$_} == 2 } sort keys %copies_of;
is( scalar(
		grep { ($claims_false{$_} // 0) >= 1 && @{ $applied{$_} // [] } == 1 }
		  @e),
	scalar(@e),
	'(e) each message published twice: a duplicate detected, applied once');

# per message: duplicates detected = extra copies published + deliveries
# committed but not acked (a, c); first claims = 1 + claims rolled back (b)
my @wrong;
for my $m (@messages)
{
	my $id = $m->{message_id};
	my $want_false =
	  ($copies_of{$id} - 1) +
	  ($committed_unacked{$id} // 0) +
	  ($nacked{$id}            // 0);
	my $want_true = 1 + ($died{$id} // 0);
	push @wrong,
		"$id: claims true $claims_true{$id}/$want_true, false "
	  . ($claims_false{$id} // 0)
	  . "/$want_false"
	  unless ($claims_true{$id} // 0) == $want_true
	  && ($claims_false{$id} // 0) == $want_false;
}
is(scalar(@wrong), 0,
	'per message: claims true = 1 + rolled back, false = extra copies + committed-unacked'
) or diag(join("\n", @wrong[ 0 .. ($#wrong < 9 ? $#wrong : 9) ]));

my $duplicates = $sum->(\%claims_false);
is( $duplicates,
	$producer_duplicates + scalar(@a) + scalar(@c),
	"duplicates detected ($duplicates) = producer retries + commit-no-ack + nacks"
);
cmp_ok($duplicates, '>', 0, 'duplicates were detected');
cmp_ok(
	$sum->(\%redeliveries),
	'>=',
	scalar(@a) + scalar(@b) + scalar(@c),
	'redeliveries happened (redelivered flag) for every failed delivery');

# ---------------------------------------------------------------------------
# the database
# ---------------------------------------------------------------------------

is( $node->safe_psql(
		$db, 'SELECT count(*), count(DISTINCT message_id) FROM applied'),
	"$n|$n",
	"applied: $n rows, $n distinct messages: each applied exactly once");
is( join(',', sort keys %applied),
	join(',', sort map { $_->{message_id} } @messages),
	'applied: exactly the messages published');
is( $node->safe_psql(
		$db,
		q{SELECT string_agg(id || '=' || balance, ',' ORDER BY id) FROM accounts}
	),
	join(',',
		map  { "$_=$expected_balance->{$_}" }
		sort { $a <=> $b } keys %$expected_balance),
	'balances are the sums of the distinct messages');
is( $node->safe_psql(
		$db,
		"SELECT count(*), count(DISTINCT message_id) FROM processed_messages WHERE consumer_name = '$consumer'"
	),
	"$n|$n",
	"processed_messages: exactly $n claims for $consumer");
is( $node->safe_psql(
		$db, qq{
SELECT count(*)
  FROM (SELECT message_id FROM processed_messages WHERE consumer_name = '$consumer') p
  FULL JOIN applied a USING (message_id)
 WHERE p.message_id IS NULL OR a.message_id IS NULL}),
	'0',
	'processed_messages: a claim for each applied message, no claim without its work'
);
my $stats = $node->safe_psql($db,
	"SELECT claims, duplicates, lock_waits, counters FROM dedup_stats WHERE consumer = '$consumer'"
);
my ($stat_claims, $stat_duplicates, $stat_lock_waits, $counters) =
  split /\|/, $stats;
is($counters, 'on', 'dedup_stats: counters on (dedup preloaded)');
is($stat_duplicates, $duplicates,
	'dedup_stats.duplicates = the duplicates the consumers logged');
is($stat_claims, $sum->(\%claims_true),
	'dedup_stats.claims = the true claims the consumers logged (200 + 1 rolled back)'
);
is($stat_claims, $n + scalar(@b), 'dedup_stats.claims = 201');
note(
	"dedup_stats.lock_waits = $stat_lock_waits (concurrent copies of one message)"
);

# ---------------------------------------------------------------------------
# stop the broker and its epmd; nothing of them survives
# ---------------------------------------------------------------------------

$broker->stop_ok;
$node->stop;
done_testing();
