#!/usr/bin/perl
#
# test/demo_broker.pl: the broker part of test/demo.sh.  A private RabbitMQ
# node carries 200 payment messages (10 published twice, as a producer retry
# would); consumers of doc/examples/rabbitmq_consumer.py apply them with dedup_claim
# while failing: one commits 5 messages and dies before acking them, one
# dies inside a transaction, one nacks committed messages, next to a steady
# one.  Then a chain of two services through dedup's outbox (database
# "chain": doc/examples/outbox_service.py twice, dedup_relay between them,
# each crashing once; see chain() below).  Prints a summary line of each.
# Runs against the cluster at PGHOST/PGPORT (database PGDATABASE, where
# dedup is installed), as its owner.
#
use strict;
use warnings;

use File::Temp qw(tempdir);
use FindBin;
use lib "$FindBin::Bin/perl";
use DedupBroker;
use DedupConsumers;
use DedupProcess;
use DedupTools;
use IPC::Run;

my $python = find_python('pika', 'psycopg2')
  or die "python3-pika and python3-psycopg2 are needed (test/setup.sh)\n";
my $tmp = tempdir('dedup-demo.XXXXXX', TMPDIR => 1, CLEANUP => 1);

sub psql
{
	my ($sql) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run(
		[ 'psql', '-X', '-q', '-At', '-v', 'ON_ERROR_STOP=1', '-c', $sql ],
		'<', \undef, '>', \$out, '2>', \$err)
	  or die "psql: $err";
	chomp $out;
	return $out;
}

print "== starting a private RabbitMQ node\n";
my $broker = DedupBroker->start(dir => "$tmp/rabbitmq", python => $python);
die "$broker->{error}\n" if $broker->{error};
psql(
	q{
CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL);
INSERT INTO accounts SELECT g, 0 FROM generate_series(1, 5) g;
CREATE TABLE applied (message_id text NOT NULL, worker text NOT NULL,
                      redelivered boolean NOT NULL, attempt text NOT NULL);
});
die "$broker->{error}\n" unless $broker->wait_ready;

my (@messages, @copies);
for my $i (1 .. 200)
{
	my $m = {
		message_id => sprintf('pay-%04d', $i),
		account    => 1 + $i % 5,
		amount     => $i
	};
	push @messages, $m;
	push @copies,   $m;
	push @copies, $m if $i % 20 == 0;  # a producer retry: the same message id
}
die "produce failed\n"
  unless $broker->publish('payments', \@copies) == @copies;
printf
  "== published %d messages (%d copies), consumers crashing and redelivering\n",
  scalar(@messages), scalar(@copies);

my $consumers = DedupConsumers->new(
	python => $python,
	dir    => $tmp,
	broker => $broker,
	host   => $ENV{PGHOST},
	port   => $ENV{PGPORT}     // 5432,
	db     => $ENV{PGDATABASE} // 'postgres');
my $control = $consumers->control('control');
signal($control, 'go');
my $crashes = 0;
for (
	[ 'crash-after-commit',  'die-after-commit' ],
	[ 'crash-before-commit', 'die-before-commit' ])
{
	my $code = $consumers->run($_->[0], 'payments', $_->[1], $control);
	$crashes++ if $code == 3 || $code == 4;
}
my @h = map { $consumers->start($_->[0], 'payments', $_->[1], $control) }
  [ 'nacker', 'nack' ], [ 'steady', 'steady' ];
$consumers->wait_drained('payments', scalar(@copies))
  or die "the queue did not drain\n";
signal($control, 'stop');
$consumers->stop(@h);
my $chain = chain();
$broker->stop;

my @d    = $consumers->deliveries;
my $dups = grep { exists $_->{claim} && !$_->{claim} } @d;
my ($applied, $distinct) = split /\|/,
  psql('SELECT count(*), count(DISTINCT message_id) FROM applied');
my $records = psql(
	q{SELECT count(*) FROM processed_messages WHERE consumer_name = 'ledger'}
);
my ($outcome, $error) = split /\|/,
  psql(
	q{SELECT coalesce(last_sweep_outcome, 'not yet'), coalesce(last_error, 'none') FROM dedup_sweeper}
  );
my $ok =
  $applied == @messages && $distinct == @messages && $records == @messages;
print "\n";
printf
  "published %d (+%d producer retries) · deliveries %d · consumer crashes %d · duplicates suppressed %d · applied %d · records stored %d · sweeper: %s, last error %s\n",
  scalar(@messages), @copies - @messages, scalar(@d), $crashes, $dups,
  $applied, $records, $outcome, $error;
print $ok
  ? "every message applied exactly once, none lost\n"
  : "WRONG: $applied applications of $distinct messages, $records records\n";
print "$chain->{line}\n";
exit($ok && $chain->{ok} ? 0 : 1);

# The chain (database "chain", dedup's outbox in table mode): service A
# (doc/examples/outbox_service.py) consumes "orders", claims, updates its
# ledger and publishes to "shipments" in one transaction; dedup_relay moves
# the outbox to RabbitMQ; service B consumes "shipments", claims, updates.
# A is killed with SIGKILL midway, the first relay kills itself after the
# broker's confirm and before marking its batch sent (its test hook): B
# gets that batch twice and its claims skip the copies.
sub chain
{
	my $service = "$FindBin::Bin/../doc/examples/outbox_service.py";
	my $relay   = "$FindBin::Bin/../src/relay/dedup_relay";
	my $n       = 100;
	print
	  "== the chain: orders -> A (claim, update, dedup_publish) -> relay -> shipments -> B (claim, update)\n";
	psql('CREATE DATABASE chain');
	local $ENV{PGDATABASE} = 'chain';
	psql(
		q{
CREATE EXTENSION dedup;
CREATE TABLE ledger (service text, key text, total bigint NOT NULL, PRIMARY KEY (service, key));
CREATE TABLE applied (seq bigserial PRIMARY KEY, service text NOT NULL, message_id text NOT NULL,
                      origin text NOT NULL, key text, n integer, amount bigint);
SELECT dedup_add_destination('shipments');
});
	my $dsn = join(' ',
		"dbname=chain",
		map { defined $ENV{"PG\U$_"} ? ("$_=" . $ENV{"PG\U$_"}) : () }
		  qw(host port user));
	my $amqp = "amqp://guest:guest\@127.0.0.1:$broker->{amqp_port}/%2F";
	my %n;
	my @orders = map {
		my $key = 'customer-' . (1 + $_ % 7);
		{
			message_id => sprintf('order-%04d', $_),
			key        => $key,
			n          => ++$n{$key},
			amount     => $_
		}
	} 1 .. $n;
	$broker->publish('orders', \@orders) == $n or die "produce failed\n";
	my %pid;
	my $start = sub {
		my ($name, $env, @args) = @_;
		$pid{$name} = spawn_session("$tmp/$name.log", $env, $python, @args);
		stop_at_exit($pid{$name}, 10);
	};
	my $applied = sub {
		psql(
			"SELECT count(DISTINCT origin) FROM applied WHERE service = '$_[0]'"
		);
	};
	$start->(
		'b', {},     $service,     '--amqp',
		$amqp,       '--dsn',      $dsn, '--queue',
		'shipments', '--consumer', 'shipping');
	$start->(
		'a', {},     $service,     '--amqp',
		$amqp,       '--dsn',      $dsn,     '--queue',
		'orders',    '--consumer', 'orders', '--publish',
		'shipments', '--work-ms',  10);
	$start->(
		'relay', { DEDUP_RELAY_TEST_CRASH => 'after-confirm' },
		$relay,  '--mode',
		'table', '--dsn',
		$dsn,    '--amqp',
		$amqp,   '--batch',
		20,      '--poll',
		0.05,    '--max-backoff',
		1);
	wait_until(sub { $applied->('orders') >= 30 }) or die "A did not start\n";
	kill('KILL', $pid{a});
	waitpid($pid{a}, 0);
	forget_pid($pid{a});
	$start->(
		'a', {},     $service,     '--amqp',
		$amqp,       '--dsn',      $dsn,     '--queue',
		'orders',    '--consumer', 'orders', '--publish',
		'shipments', '--work-ms',  10);
	waitpid($pid{relay}, 0);    # it killed itself after a confirm
	forget_pid($pid{relay});
	$start->(
		'relay', {}, $relay,   '--mode', 'table',  '--dsn',
		$dsn,        '--amqp', $amqp,    '--poll', 0.05);
	my $done = wait_until(sub { $applied->('shipping') >= $n });
	stop_group($pid{$_}, 10) for qw(relay a b);
	my ($a_rows, $b_rows, $b_ids) = split /\|/, psql(
		q{
SELECT count(*) FILTER (WHERE service = 'orders'), count(*) FILTER (WHERE service = 'shipping'),
       count(DISTINCT origin) FILTER (WHERE service = 'shipping') FROM applied}
	);
	my $dups   = () = read_file("$tmp/b.log") =~ /"claim": false/g;
	my $resent = psql('SELECT count(*) FROM dedup_outbox WHERE attempts > 1');
	my $ok     = $done && $a_rows == $n && $b_rows == $n && $b_ids == $n;
	return {
		ok   => $ok,
		line => sprintf(
			'chain: %d orders · A killed once, applied %d · relay killed after a confirm, %d messages leased again · B applied %d, duplicates suppressed %d · %s',
			$n,
			$a_rows,
			$resent,
			$b_rows,
			$dups,
			$ok
			? 'every order applied exactly once at both hops, none lost'
			: 'WRONG')
	};
}
