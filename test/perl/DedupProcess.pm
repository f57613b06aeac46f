#
# test/perl/DedupProcess.pm: the helper processes of the tests (a broker, its
# epmd, pgbouncer), started in sessions of their own and stopped at exit,
# also when the test dies or is interrupted; and waiting for a condition.
# Needs no PostgreSQL test module (test/demo_broker.pl uses it too).
#
# Exports:
#   spawn_session($log, \%env, @cmd)  fork and exec @cmd in a new session,
#                                     output to $log; returns the pid
#   stop_at_exit($pid, $grace)        stop_group() it at exit if still alive
#   forget_pid($pid)                  ... no longer
#   stop_group($pid, $grace)          SIGTERM, up to $grace seconds, then
#                                     SIGKILL of its process group; the wait
#                                     status, or undef if it was killed
#   alive($pid)                       running (a zombie is not)
#   process_tree($pid)                $pid and all its descendants
#   wait_until($check, $tick)         poll $check every $tick seconds (0.1)
#                                     until true; false after test_timeout()
#   test_timeout()                    seconds a test waits for anything: the
#                                     PostgreSQL test default (180, or
#                                     PG_TEST_TIMEOUT_DEFAULT)
#   free_port()                       a free TCP port (the PostgreSQL test
#                                     framework's when it is loaded)
#   write_file($file, $text), read_file($file)
#                                     read_file() is '' for a missing file
#
package DedupProcess;

use strict;
use warnings;

use Exporter 'import';
use IO::Socket::INET;
use POSIX       qw(WNOHANG);
use Time::HiRes qw(time usleep);

our @EXPORT = qw(spawn_session stop_at_exit forget_pid stop_group alive
  process_tree wait_until test_timeout free_port write_file read_file);

my @to_stop;    # [pid, grace] of session leaders to stop at exit

END
{
	my $status = $?;
	stop_group(@$_) for reverse grep { alive($_->[0]) } @to_stop;
	$? = $status;
}

# exit (not die, which an eval could catch) so that END stops what we started;
# a child of spawn_session() signalled before its exec has started nothing and
# leaves at once (its END blocks would stop the test's processes and servers)
sub catch_signals
{
	my $owner = $$;
	$SIG{$_} = sub {
		POSIX::_exit(1) if $$ != $owner;
		print STDERR "killed by SIG$_[0]\n";
		exit(1);
	  }
	  for qw(INT TERM HUP);
	return;
}

sub spawn_session
{
	my ($log, $env, @cmd) = @_;
	catch_signals();
	my $pid = fork() // die "fork: $!";
	if ($pid == 0)
	{
		POSIX::setsid();
		open(STDIN,  '<',  '/dev/null');
		open(STDOUT, '>>', $log);
		open(STDERR, '>&', \*STDOUT);
		@ENV{ keys %$env } = values %$env;
		exec(@cmd) or print STDERR "exec $cmd[0]: $!\n";
		POSIX::_exit(127);
	}
	return $pid;
}

sub stop_at_exit
{
	my ($pid, $grace) = @_;
	push @to_stop, [ $pid, $grace ];
	return;
}

sub forget_pid
{
	my ($pid) = @_;
	@to_stop = grep { $_->[0] != $pid } @to_stop;
	return;
}

sub alive
{
	my ($pid) = @_;
	open(my $fh, '<', "/proc/$pid/stat") or return 0;
	my $stat = <$fh> // '';
	close($fh);
	return $stat !~ /\)\s+Z\s/;
}

sub process_tree
{
	my ($root) = @_;
	my %children;
	for my $stat (glob('/proc/[0-9]*/stat'))
	{
		open(my $fh, '<', $stat) or next;
		my $line = <$fh> // next;
		close($fh);
		my ($pid, $ppid) = $line =~ /^(\d+) .*\) \S+ (\d+) /s or next;
		push @{ $children{$ppid} }, $pid;
	}
	my @tree = ($root);
	for (my $i = 0; $i < @tree; $i++)
	{
		push @tree, @{ $children{ $tree[$i] } // [] };
	}
	return @tree;
}

sub stop_group
{
	my ($pid, $grace) = @_;
	kill('TERM', $pid);
	my $deadline = time() + $grace;
	while (time() < $deadline)
	{
		return $? if waitpid($pid, WNOHANG) == $pid;
		usleep(50_000);
	}
	kill('KILL', -$pid);
	waitpid($pid, 0);
	return undef;
}

sub test_timeout
{
	no warnings 'once';
	return $PostgreSQL::Test::Utils::timeout_default
	  // $ENV{PG_TEST_TIMEOUT_DEFAULT} // 180;
}

sub wait_until
{
	my ($check, $tick) = @_;
	my $deadline = time() + test_timeout();
	while (time() < $deadline)
	{
		return 1 if $check->();
		usleep(($tick // 0.1) * 1_000_000);
	}
	return $check->() ? 1 : 0;
}

# PostgreSQL::Test::Cluster's keeps the ports of concurrent tests apart
sub free_port
{
	return PostgreSQL::Test::Cluster::get_free_port()
	  if defined &PostgreSQL::Test::Cluster::get_free_port;
	my $s = IO::Socket::INET->new(
		Listen    => 1,
		LocalAddr => '127.0.0.1',
		LocalPort => 0,
		ReuseAddr => 1) or die "no free port: $!";
	my $port = $s->sockport;
	close($s);
	return $port;
}

sub write_file
{
	my ($file, $text) = @_;
	open(my $fh, '>', $file) or die "$file: $!";
	print $fh $text;
	close($fh) or die "$file: $!";
	return;
}

sub read_file
{
	my ($file) = @_;
	open(my $fh, '<', $file) or return '';
	local $/;
	my $text = <$fh>;
	close($fh);
	return $text // '';
}

1;
