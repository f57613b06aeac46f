#
# test/perl/DedupPgbouncer.pm: a private pgbouncer for one test, in the
# foreground as the current user, listening on 127.0.0.1 only (no Unix
# socket), stopped at exit whatever happens.
#
# Exports:
#   start_pgbouncer(dir => DIR, host => PGHOST, port => PGPORT,
#                   dbname => DB, users => [...], settings => {...})
#                          serving DB from the server at PGHOST:PGPORT,
#                          trust authentication for the users (the server
#                          authenticates them), pool_mode = transaction
#                          unless settings say otherwise; returns a hash:
#                          port, pid, ini, log, ready, error
#   stop_pgbouncer($bouncer)
#                          SIGTERM (immediate shutdown): the wait status,
#                          undef if it had to be killed
#
package DedupPgbouncer;

use strict;
use warnings;

use Exporter 'import';
use File::Path qw(make_path);
use IO::Socket::INET;

use DedupProcess;

our @EXPORT = qw(start_pgbouncer stop_pgbouncer);

sub start_pgbouncer
{
	my %opt = @_;
	my $dir = $opt{dir};
	my $bin = $ENV{PGBOUNCER} // '/usr/sbin/pgbouncer';
	make_path($dir);
	my %b = (
		port  => free_port(),
		ini   => "$dir/pgbouncer.ini",
		log   => "$dir/pgbouncer.log",
		ready => 0);
	if (!-x $bin)
	{
		$b{error} =
		  "$bin is not installed (test/setup.sh installs pgbouncer)";
		return \%b;
	}
	write_file("$dir/userlist.txt",
		join('', map { qq("$_" ""\n) } @{ $opt{users} }));
	my %settings = (
		listen_addr     => '127.0.0.1',
		listen_port     => $b{port},
		unix_socket_dir => '',
		auth_type       => 'trust',
		auth_file       => "$dir/userlist.txt",
		admin_users     => $opt{users}[0],
		pool_mode       => 'transaction',
		logfile         => $b{log},
		pidfile         => "$dir/pgbouncer.pid",
		%{ $opt{settings} // {} });
	write_file($b{ini},
		"[databases]\n$opt{dbname} = host=$opt{host} port=$opt{port} dbname=$opt{dbname}\n"
		  . "[pgbouncer]\n"
		  . join('', map { "$_ = $settings{$_}\n" } sort keys %settings));
	$b{pid} = spawn_session("$dir/stdout.log", {}, $bin, $b{ini});
	stop_at_exit($b{pid}, test_timeout());
	$b{ready} = wait_until(
		sub {
			!alive($b{pid})
			  || IO::Socket::INET->new(
				PeerAddr => '127.0.0.1',
				PeerPort => $b{port},
				Timeout  => 1);
		}) && alive($b{pid});
	$b{error} =
		"pgbouncer did not start:\n"
	  . read_file("$dir/stdout.log")
	  . read_file($b{log})
	  unless $b{ready};
	return \%b;
}

sub stop_pgbouncer
{
	my ($b) = @_;
	return undef unless $b->{pid};
	my $status = stop_group($b->{pid}, test_timeout());
	forget_pid($b->{pid});
	$b->{pid} = undef;
	return $status;
}

1;
