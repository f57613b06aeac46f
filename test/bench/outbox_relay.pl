#!/usr/bin/perl
#
# test/bench/outbox_relay.pl: the rows of test/bench/outbox.sh that need a
# broker (run by it inside its cluster: psql and pgbench connect with the
# PG* variables pg_virtualenv sets).  A private RabbitMQ node
# (DedupBroker), then:
#
#   throughput ROUNDS COUNT   each round, in this order: COUNT messages
#       published straight to RabbitMQ with confirms (outbox_direct.py,
#       windowed: the relay's own publisher, and blocking: a confirm per
#       message), then COUNT messages of a table-mode destination and COUNT
#       of a WAL-mode one (dedup_publish, 100 per transaction) moved by
#       dedup_relay --exit-when-idle, timed from its first log line to its
#       last (connections included); the queues are emptied after each
#   soak SECONDS SAMPLE RATE RETENTION [NAME=VALUE...]   table mode at steady
#       state, with those server settings (put back afterwards): pgbench
#       runs outbox_publish_table.sql at RATE transactions/s while the relay
#       sends and the retention worker (every second, dedup.outbox_retention
#       = RETENTION s) and autovacuum clean up; every SAMPLE s the bytes of
#       dedup_outbox (table and indexes) and its rows; afterwards its rows
#       copied into a fresh table of the same definition, vacuumed
#
# Prints "VALUE series number" lines (outbox.sh records them) and "NOTE
# text" lines.
#
use strict;
use warnings;

use File::Temp qw(tempdir);
use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupBroker;
use DedupProcess;
use DedupTools;
use IPC::Run;
use Time::HiRes qw(time);

my $python = find_python('pika', 'psycopg2')
  or die "python3-pika and python3-psycopg2 are needed (test/setup.sh)\n";
my $relay  = "$FindBin::Bin/../../src/relay/dedup_relay";
my $direct = "$FindBin::Bin/outbox_direct.py";
my $tmp    = tempdir('dedup-bench-outbox.XXXXXX', TMPDIR => 1, CLEANUP => 1);
$| = 1;

sub psql
{
	my ($sql) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'psql', '-X', '-q', '-At', '-v', 'ON_ERROR_STOP=1' ],
		'<', \$sql, '>', \$out, '2>', \$err)
	  or die "psql: $err";
	chomp $out;
	return $out;
}

sub run_ok
{
	my (@cmd) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run(\@cmd, '<', \undef, '>', \$out, '2>', \$err)
	  or die "@cmd[0..1]: $err";
	chomp $out;
	return ($out, $err);
}

my $broker = DedupBroker->start(dir => "$tmp/rabbitmq", python => $python);
die "$broker->{error}\n" if $broker->{error};
$broker->wait_ready or die "$broker->{error}\n";
my $amqp = "amqp://guest:guest\@127.0.0.1:$broker->{amqp_port}/%2F";
my $dsn  = join(' ',
	map { lc($_) . "=$ENV{\"PG\U$_\"}" }
	grep { defined $ENV{"PG\U$_"} } qw(host port database user));
$dsn =~ s/database=/dbname=/;
my @relay = ($python, $relay, '--dsn', $dsn, '--amqp', $amqp, '--batch', 100);

sub purge { run_ok($python, $direct, $amqp, $_, 0, 0, 'purge') for @_ }

# dedup_relay until idle: messages/s between its first and last log line
sub relay_rate
{
	my (@args) = @_;
	my (undef, $log) = run_ok(@relay, @args, '--exit-when-idle');
	my @t = map {
		/^(\d+)-(\d+)-(\d+) (\d+):(\d+):(\d+),(\d+) /
		  ? ($4 * 3600 + $5 * 60 + $6 + $7 / 1000)
		  : ()
	} grep { /relaying|stopped;/ } split /\n/, $log;
	my ($sent) = $log =~ /stopped; (\d+) messages sent/;
	die "no rate in the relay's log:\n$log" unless @t == 2 && $sent;
	return sprintf('%.0f', $sent / ($t[1] - $t[0] || 0.001));
}

sub load
{
	my ($destination, $count) = @_;

	# keys: customers 1..10000, as in outbox_publish_*.sql
	psql(
		join(
			'',
			map {
				"SELECT count(dedup_publish('$destination', '{\"customer\": ' || c || ', \"points\": 120}', c::text)) FROM generate_series($_ * 100 + 1, $_ * 100 + 100) g, LATERAL (SELECT g % 10000 + 1 AS c) k;\n"
			} 0 .. $count / 100 - 1));
	return;
}

sub throughput
{
	my ($rounds, $count) = @_;
	psql(
		q{
SELECT dedup_add_destination('bench_relay_t', 'table');
SELECT dedup_add_destination('bench_relay_w', 'wal');
CREATE PUBLICATION dedup_outbox;
SELECT pg_create_logical_replication_slot('bench_relay', 'pgoutput');
});
	purge(qw(bench_direct bench_relay_t bench_relay_w));
	for my $round (1 .. $rounds)
	{
		my ($v) = run_ok($python, $direct, $amqp, 'bench_direct', $count, 100,
			'windowed');
		print "VALUE relay_direct $v\n";
		purge('bench_direct');
		($v) = run_ok($python, $direct, $amqp, 'bench_direct', $count, 100,
			'blocking');
		print "VALUE relay_blocking $v\n";
		purge('bench_direct');
		load('bench_relay_t', $count);

		# the statistics autovacuum would have taken (it is off here)
		psql('ANALYZE dedup_outbox');
		print 'VALUE relay_table '
		  . relay_rate('--mode', 'table', '--destination', 'bench_relay_t')
		  . "\n";
		purge('bench_relay_t');
		load('bench_relay_w', $count);
		print 'VALUE relay_wal '
		  . relay_rate('--mode', 'wal', '--slot', 'bench_relay') . "\n";
		purge('bench_relay_w');
	}
	psql(
		q{
SELECT pg_drop_replication_slot('bench_relay');
DROP PUBLICATION dedup_outbox;
TRUNCATE dedup_outbox;
});
	return;
}

sub soak
{
	my ($seconds, $sample, $rate, $retention, @settings) = @_;
	my %set = map { split /=/, $_, 2 } @settings;
	psql(
		join(
			'', map { "ALTER SYSTEM SET $_ = '$set{$_}';\n" } sort keys %set)
		  . qq{
ALTER SYSTEM SET dedup.outbox_retention = $retention;
ALTER SYSTEM SET dedup.sweep_enabled = on;
ALTER SYSTEM SET dedup.sweep_interval = '1s';
ALTER SYSTEM SET autovacuum = on;
SELECT pg_reload_conf();
TRUNCATE dedup_outbox;
});
	purge('bench_table');
	my $relay_h = IPC::Run::start(
		[ @relay, '--mode', 'table', '--destination', 'bench_table' ],
		'<', \undef, '>', "$tmp/relay.log", '2>&1');
	my $bench = IPC::Run::start(
		[
			'pgbench', '-n',
			'-M',      'prepared',
			'-c',      2,
			'-j',      2,
			'-R',      $rate,
			'-T',      $seconds,
			'-f',      "$FindBin::Bin/outbox_publish_table.sql"
		],
		'<',
		\undef,
		'>',
		"$tmp/pgbench.log",
		'2>&1');
	my @samples;
	my $next = time() + $sample;
	my $end  = time() + $seconds;
	while (time() < $end)
	{
		select(undef, undef, undef, $next - time()) if $next > time();
		$next += $sample;
		my ($bytes, $rows, $unsent) = split /\|/, psql(
			q{
SELECT pg_total_relation_size('dedup_outbox'), count(*), count(*) FILTER (WHERE sent_at IS NULL) FROM dedup_outbox}
		);
		push @samples, [ $bytes, $rows, $unsent ];
		print "NOTE sample: $bytes bytes, $rows rows, $unsent unsent\n";
	}
	$bench->finish or die "pgbench failed: " . read_file("$tmp/pgbench.log");

	# the second half: bytes per live row
	my @half = @samples[ int(@samples / 2) .. $#samples ];
	print "VALUE outbox_soak_bytes_per_row "
	  . sprintf('%.1f', $_->[0] / ($_->[1] || 1)) . "\n"
	  for @half;
	print "VALUE outbox_soak_rows $_->[1]\n"   for @half;
	print "VALUE outbox_soak_unsent $_->[2]\n" for @half;
	my ($fresh_bytes, $fresh_rows) = split /\|/, psql(
		q{
CREATE TABLE outbox_fresh (LIKE dedup_outbox INCLUDING ALL);
INSERT INTO outbox_fresh OVERRIDING SYSTEM VALUE SELECT * FROM dedup_outbox;
VACUUM ANALYZE outbox_fresh;
SELECT pg_total_relation_size('outbox_fresh'), count(*) FROM outbox_fresh;
});
	print "VALUE outbox_fresh_bytes_per_row "
	  . sprintf('%.1f', $fresh_bytes / ($fresh_rows || 1)) . "\n";
	$relay_h->signal('TERM');
	$relay_h->finish;
	psql(
		join('', map { "ALTER SYSTEM RESET $_;\n" } sort keys %set) . q{
DROP TABLE outbox_fresh;
ALTER SYSTEM RESET dedup.outbox_retention;
ALTER SYSTEM RESET dedup.sweep_enabled;
ALTER SYSTEM RESET dedup.sweep_interval;
ALTER SYSTEM RESET autovacuum;
SELECT pg_reload_conf();
});
	purge('bench_table');
	return;
}

my $what = shift @ARGV;
if    ($what eq 'throughput') { throughput(@ARGV) }
elsif ($what eq 'soak')       { soak(@ARGV) }
else                          { die "unknown: $what\n" }
$broker->stop;
