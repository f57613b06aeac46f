#!/usr/bin/perl
#
# test/demo_broker.pl: the broker part of test/demo.sh.  A private RabbitMQ
# node carries 200 payment messages (10 published twice, as a producer retry
# would); consumers of doc/examples/rabbitmq_consumer.py apply them with dedup_claim
# while failing: one commits 5 messages and dies before acking them, one
# dies inside a transaction, one nacks committed messages, next to a steady
# one.  Prints one summary line.  Runs against the cluster at PGHOST/PGPORT
# (database PGDATABASE, where dedup is installed), as its owner.
#
use strict;
use warnings;

use File::Temp qw(tempdir);
use FindBin;
use lib "$FindBin::Bin/perl";
use DedupBroker;
use DedupConsumers;
use DedupTools;
use IPC::Run;

my $python = find_python('pika', 'psycopg2')
  or die "python3-pika and python3-psycopg2 are needed (test/setup.sh)\n";
my $tmp = tempdir('dedup-demo.XXXXXX', TMPDIR => 1, CLEANUP => 1);

sub psql
{
	my ($sql) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'psql', '-X', '-q', '-At', '-v', 'ON_ERROR_STOP=1', '-c', $sql ],
		'<', \undef, '>', \$out, '2>', \$err)
	  or die "psql: $err";
	chomp $out;
	return $out;
}

print "== starting a private RabbitMQ node\n";
my $broker = DedupBroker->start(dir => "$tmp/rabbitmq", python => $python);
die "$broker->{error}\n" if $broker->{error};
psql(q{
CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL);
INSERT INTO accounts SELECT g, 0 FROM generate_series(1, 5) g;
CREATE TABLE applied (message_id text NOT NULL, worker text NOT NULL,
                      redelivered boolean NOT NULL, attempt text NOT NULL);
});
die "$broker->{error}\n" unless $broker->wait_ready;

my (@messages, @copies);
for my $i (1 .. 200)
{
	my $m = { message_id => sprintf('pay-%04d', $i), account => 1 + $i % 5, amount => $i };
	push @messages, $m;
	push @copies, $m;
	push @copies, $m if $i % 20 == 0;    # a producer retry: the same message id
}
die "produce failed\n" unless $broker->publish('payments', \@copies) == @copies;
printf "== published %d messages (%d copies), consumers crashing and redelivering\n",
  scalar(@messages), scalar(@copies);

my $consumers = DedupConsumers->new(python => $python, dir => $tmp,
	broker => $broker, host => $ENV{PGHOST}, port => $ENV{PGPORT} // 5432,
	db => $ENV{PGDATABASE} // 'postgres');
my $control = $consumers->control('control');
signal($control, 'go');
my $crashes = 0;
for ([ 'crash-after-commit', 'die-after-commit' ], [ 'crash-before-commit', 'die-before-commit' ])
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
$broker->stop;

my @d = $consumers->deliveries;
my $dups = grep { exists $_->{claim} && !$_->{claim} } @d;
my ($applied, $distinct) = split /\|/, psql('SELECT count(*), count(DISTINCT message_id) FROM applied');
my $records = psql(q{SELECT count(*) FROM processed_messages WHERE consumer_name = 'ledger'});
my ($outcome, $error) = split /\|/, psql(q{SELECT coalesce(last_sweep_outcome, 'not yet'), coalesce(last_error, 'none') FROM dedup_sweeper});
my $ok = $applied == @messages && $distinct == @messages && $records == @messages;
print "\n";
printf "published %d (+%d producer retries) · deliveries %d · consumer crashes %d · duplicates suppressed %d · applied %d · records stored %d · sweeper: %s, last error %s\n",
  scalar(@messages), @copies - @messages, scalar(@d), $crashes, $dups, $applied, $records, $outcome, $error;
print $ok
  ? "every message applied exactly once, none lost\n"
  : "WRONG: $applied applications of $distinct messages, $records records\n";
exit($ok ? 0 : 1);
