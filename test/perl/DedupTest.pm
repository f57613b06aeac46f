#
# test/perl/DedupTest.pm: helpers shared by the TAP tests in test/t/ and by
# test/demo_broker.pl.
#
#   find_python(@modules)            a python3 that imports them, or undef
#   consumer_script()                test/rabbitmq_consumer.py (absolute)
#   run_helper($python, $timeout, @args)
#                                    run it; returns (exit code, stdout, stderr)
#   read_json_lines($file)           its JSON lines, as hashes
#   spawn_session($log, \%env, @cmd) fork+exec in a new session, output to $log
#   alive($pid), process_tree($pid), stop_group($pid, $grace)
#   start_rabbitmq(%opt), wait_rabbitmq($rmq), stop_rabbitmq($rmq),
#   rabbitmqctl($rmq, @args)
#                                    a private RabbitMQ node (own epmd, ports,
#                                    cookie, data) run as the current user
#   start_pgbouncer(%opt), stop_pgbouncer($bouncer)
#                                    a private pgbouncer in the foreground
#   wait_until($timeout, $check, $tick)
#                                    poll $check until true; false on timeout
#
# For the retention worker's tests (020, 022, 023), on a PostgreSQL::Test::
# Cluster $node with dedup installed in database $db:
#   $LATEST_CLAIM                    the consumers' latest claim, a fixed date
#                                    that keeps windows exact
#   add_expired($node, $db, $consumer, $n)
#                                    $n claims an hour apart, the latest at
#                                    $LATEST_CLAIM
#   count_of($node, $db, $consumer)  the consumer's records
#   wait_sweep($node, $db, $outcome, $what)
#                                    wake the sweeper; ok() once a sweep that
#                                    started after now ended with $outcome
#   set_config($node, $name, $value, $shown)
#                                    ALTER SYSTEM SET (RESET for undef $value),
#                                    reload; ok() once sessions see $shown
#
# Every broker, epmd and pgbouncer started here is stopped at exit, also when
# the test dies or is interrupted.
#
package DedupTest;

use strict;
use warnings;

use Cwd qw(abs_path);
use Exporter 'import';
use File::Basename qw(dirname);
use File::Path qw(make_path);
use IO::Socket::INET;
use IPC::Run;
use JSON::PP;
use POSIX qw(WNOHANG);
use Test::More;
use Time::HiRes qw(time usleep);

our @EXPORT = qw(consumer_tables_sql log_from occurrences sweeper_start_re wait_log_count
  find_python consumer_script run_helper read_json_lines
  spawn_session alive process_tree stop_group start_rabbitmq wait_rabbitmq
  stop_rabbitmq
  rabbitmqctl start_pgbouncer stop_pgbouncer wait_until require_tools
  start_consumer stop_consumers check_exactly_once
  $LATEST_CLAIM add_expired count_of wait_sweep set_config);

my @to_stop;    # [pid, grace] of session leaders to stop at exit
my @harnesses;  # consumers (IPC::Run harnesses)

END
{
	my $status = $?;
	eval { $_->kill_kill } for @harnesses;
	stop_group(@$_) for reverse grep { $_->[0] && alive($_->[0]) } @to_stop;
	$? = $status;
}


# consumer_tables_sql(@extra_columns): the SQL creating the tables that
# test/rabbitmq_consumer.py writes: five accounts, and one row in "applied"
# per application of a message, with @extra_columns added (deliberately no
# unique key: a message applied twice is two rows, not an error)
sub consumer_tables_sql
{
	my @columns = ('message_id text NOT NULL', 'worker text NOT NULL',
		'redelivered boolean NOT NULL', 'attempt text NOT NULL', @_);
	return "CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL);\n"
	  . "INSERT INTO accounts SELECT g, 0 FROM generate_series(1, 5) g;\n"
	  . 'CREATE TABLE applied (' . join(', ', @columns) . ");\n";
}

# log_from($node, $offset): $node's server log from byte $offset on
sub log_from
{
	my ($node, $offset) = @_;
	return PostgreSQL::Test::Utils::slurp_file($node->logfile, $offset);
}

# occurrences($text, $re): how many times $re matches in $text
sub occurrences
{
	my ($text, $re) = @_;
	my $n = () = $text =~ /$re/g;
	return $n;
}

# sweeper_start_re($db): the postmaster's DEBUG1 line for each sweeper it
# starts in $db
sub sweeper_start_re
{
	my ($db) = @_;
	return qr/starting background worker process "dedup sweeper for database \Q$db\E"/;
}

# wait_log_count($node, $offset, $re, $n): wait until $node's log from
# $offset holds $n matches of $re; false after the test timeout
sub wait_log_count
{
	my ($node, $offset, $re, $n) = @_;
	my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
	while (time < $deadline)
	{
		return 1 if occurrences(log_from($node, $offset), $re) >= $n;
		usleep(100_000);
	}
	return 0;
}


# find_python(@modules): a Python 3 that can import every one of @modules
# (test/setup.sh installs them as Debian packages), or undef
sub find_python
{
	my $imports = join(', ', @_);
	for my $candidate ('python3', '/usr/bin/python3')
	{
		return $candidate
		  if system("$candidate -c 'import $imports' >/dev/null 2>&1") == 0;
	}
	return undef;
}

# require_tools(modules => [...], programs => [...]): the programs (absolute
# paths) and a python3 with the modules (returned; undef without modules),
# or stop.  test/run.sh, which installs them all, sets DEDUP_REQUIRE_TOOLS:
# a missing one is then a failure (BAIL_OUT); a plain "make installcheck"
# on a machine without them skips the test, saying what is missing.
sub require_tools
{
	my %opt = @_;
	my @missing = grep { !-x $_ } @{ $opt{programs} // [] };
	my $python;
	if ($opt{modules})
	{
		$python = find_python(@{ $opt{modules} });
		push @missing, 'python3 with ' . join(', ', @{ $opt{modules} })
		  unless defined $python;
	}
	return $python unless @missing;
	my $why = 'missing: ' . join('; ', @missing)
	  . ' (sudo test/setup.sh installs them)';
	Test::More::BAIL_OUT($why) if $ENV{DEDUP_REQUIRE_TOOLS};
	Test::More::plan(skip_all => $why);
}

# start_consumer($python, $log, @args): test/rabbitmq_consumer.py in the
# background, stdout (its JSON lines) to $log, stderr to $log.err; killed
# at exit if still running
sub start_consumer
{
	my ($python, $log, @args) = @_;
	my $h = IPC::Run::start([ $python, consumer_script(), @args ],
		'<', \undef, '>', $log, '2>', "$log.err");
	push @harnesses, $h;
	return $h;
}

# stop_consumers(@harnesses): wait for them (after their stop file was
# written); returns the workers' exit codes (-1: did not finish)
sub stop_consumers
{
	my @codes;
	for my $h (@_)
	{
		my $ok = eval { $h->finish; 1 };
		push @codes, $ok ? $h->result(0) : -1;
		@harnesses = grep { $_ != $h } @harnesses;
	}
	return @codes;
}

# check_exactly_once(node => $node, db => DB, like => 'a-%', messages =>
# [{message_id, account, amount}], times => {id => n}, balances => {id =>
# sum}, records => SCHEMA.processed_messages, label => '...'): Test::More
# assertions that each message whose id is LIKE the pattern was applied
# exactly once (or times->{id} times), that none is missing or unexpected,
# that the claims stored are exactly those messages, each with its work, and
# that the account balances are the given sums
sub check_exactly_once
{
	my %o = @_;
	my ($node, $db, $like, $label) = @o{qw(node db like label)};
	my $records = $o{records} // 'processed_messages';
	my %want = map { $_->{message_id} => (($o{times} // {})->{ $_->{message_id} } // 1) }
	  @{ $o{messages} };
	my $rows = 0;
	$rows += $_ for values %want;
	my $n = keys %want;
	my %got;
	for my $line (split /\n/,
		$node->safe_psql($db,
			"SELECT message_id, count(*) FROM applied WHERE message_id LIKE '$like' GROUP BY 1"))
	{
		my ($id, $c) = split /\|/, $line;
		$got{$id} = $c;
	}
	my @wrong = grep { ($got{$_} // 0) != ($want{$_} // 0) }
	  sort(keys %{ { %want, %got } });
	my $total = 0;
	$total += $_ for values %got;
	Test::More::is($total, $rows, "$label: $rows applications of $n messages");
	Test::More::is(scalar(@wrong), 0,
		"$label: each message applied exactly as often as expected, none lost, none extra")
	  or Test::More::diag(join(', ',
		map { "$_ applied " . ($got{$_} // 0) . ' times, want ' . ($want{$_} // 0) }
		  @wrong[ 0 .. ($#wrong < 9 ? $#wrong : 9) ]));
	Test::More::is(
		$node->safe_psql($db,
			"SELECT count(*), count(DISTINCT message_id) FROM $records WHERE consumer_name = 'ledger' AND message_id LIKE '$like'"),
		"$n|$n",
		"$label: $records holds exactly $n claims");
	Test::More::is(
		$node->safe_psql($db, qq{
SELECT count(*)
  FROM (SELECT message_id FROM $records WHERE consumer_name = 'ledger' AND message_id LIKE '$like') p
  FULL JOIN (SELECT DISTINCT message_id FROM applied WHERE message_id LIKE '$like') a USING (message_id)
 WHERE p.message_id IS NULL OR a.message_id IS NULL}),
		'0',
		"$label: a claim for each applied message, no claim without its work")
	  unless $o{times};
	if ($o{balances})
	{
		my $want_b = $o{balances};
		Test::More::is(
			$node->safe_psql($db,
				q{SELECT string_agg(id || '=' || balance, ',' ORDER BY id) FROM accounts WHERE balance <> 0}),
			join(',', map { "$_=$want_b->{$_}" } grep { $want_b->{$_} } sort { $a <=> $b } keys %$want_b),
			"$label: balances are the sums of the messages applied");
	}
}

sub consumer_script
{
	return abs_path(dirname(__FILE__) . '/../rabbitmq_consumer.py');
}

# run test/rabbitmq_consumer.py in the foreground
sub run_helper
{
	my ($python, $timeout, @args) = @_;
	my ($out, $err) = ('', '');
	my $ok = eval {
		IPC::Run::run([ $python, consumer_script(), @args ],
			'<', \undef, '>', \$out, '2>', \$err,
			IPC::Run::timeout($timeout));
		1;
	};
	return (-1, $out, $err . ($@ // '')) unless $ok;
	return ($? >> 8, $out, $err);
}

sub read_json_lines
{
	my ($file) = @_;
	return () unless defined $file && -e $file;
	open(my $fh, '<', $file) or return ();
	my @records;
	while (my $line = <$fh>)
	{
		next unless $line =~ /^\{.*\}$/;
		my $r = eval { decode_json($line) };
		push @records, $r if $r;
	}
	close($fh);
	return @records;
}

sub wait_until
{
	my ($timeout, $check, $tick) = @_;
	my $deadline = time() + $timeout;
	while (time() < $deadline)
	{
		return 1 if $check->();
		usleep(($tick // 0.1) * 1_000_000);
	}
	return $check->() ? 1 : 0;
}

# a free TCP port: the PostgreSQL test framework's (which keeps concurrent
# tests apart) when it is loaded, else one the kernel picks
sub free_port
{
	return PostgreSQL::Test::Cluster::get_free_port()
	  if defined &PostgreSQL::Test::Cluster::get_free_port;
	my $s = IO::Socket::INET->new(
		Listen => 1,
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
}

sub slurp
{
	my ($file) = @_;
	open(my $fh, '<', $file) or return '';
	local $/;
	my $text = <$fh>;
	close($fh);
	return $text // '';
}

# fork and exec @cmd in a new session with %$env added, output to $log
sub spawn_session
{
	my ($log, $env, @cmd) = @_;
	my $pid = fork() // die "fork: $!";
	if ($pid == 0)
	{
		POSIX::setsid();
		open(STDIN, '<', '/dev/null');
		open(STDOUT, '>>', $log);
		open(STDERR, '>&', \*STDOUT);
		@ENV{ keys %$env } = values %$env;
		exec(@cmd) or print STDERR "exec $cmd[0]: $!\n";
		POSIX::_exit(127);
	}
	return $pid;
}

sub alive
{
	my ($pid) = @_;
	open(my $fh, '<', "/proc/$pid/stat") or return 0;
	my $stat = <$fh> // '';
	close($fh);
	return $stat !~ /\)\s+Z\s/;    # a zombie is gone for our purposes
}

# $pid and all its descendants, from /proc
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

# SIGTERM the session leader $pid, wait up to $grace seconds, then SIGKILL
# its process group; returns the wait status, or undef if it had to be killed
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

sub forget_pid
{
	my ($pid) = @_;
	@to_stop = grep { $_->[0] != $pid } @to_stop;
}

# exit (not die, which an eval could catch) so that END stops what we started
sub catch_signals
{
	$SIG{$_} = sub { print STDERR "killed by SIG$_[0]\n"; exit(1) }
	  for qw(INT TERM HUP);
}

# ---------------------------------------------------------------------------
# RabbitMQ
# ---------------------------------------------------------------------------

# start_rabbitmq(dir => DIR, python => PYTHON, timeout => SECONDS
#                [, nowait => 1]): a private
# node under DIR, started as the current user with its own epmd (in the
# foreground, a child we can stop: the node registers with it instead of
# starting a daemon that would outlive the test), its own AMQP, distribution
# and CLI ports, Erlang cookie (HOME) and data; no plugins.  Returns a hash:
# amqp_port, env (for rabbitmqctl), nodename, pid, epmd_pid, epmd_port, log,
# ready (it accepted an AMQP connection), error (why not), seconds (to boot).
sub start_rabbitmq
{
	my %opt = @_;
	my $rmq = $opt{dir};
	my $timeout = $opt{timeout} // 60;
	my $server = $ENV{RABBITMQ_SERVER} // '/usr/lib/rabbitmq/bin/rabbitmq-server';
	my $epmd = $ENV{EPMD} // '/usr/bin/epmd';
	make_path("$rmq/home", "$rmq/mnesia", "$rmq/log");
	catch_signals();

	my %r = (
		amqp_port => free_port(),
		dist_port => free_port(),
		epmd_port => free_port(),
		ctl_port => free_port(),
		nodename => "dedup-test-$$\@localhost",
		log => "$rmq/log",
		ready => 0);
	write_file("$rmq/enabled_plugins", '');      # no plugins (no management)
	write_file("$rmq/rabbitmq-env.conf", '');    # not /etc/rabbitmq's
	write_file("$rmq/rabbitmq.conf", <<"CONF");
listeners.tcp.1 = 127.0.0.1:$r{amqp_port}
loopback_users = none
disk_free_limit.absolute = 1MB
vm_memory_high_watermark.absolute = 1GB
collect_statistics = none
log.console = false
log.file.level = info
CONF
	$r{env} = {
		HOME => "$rmq/home",    # the Erlang cookie
		RABBITMQ_MNESIA_BASE => "$rmq/mnesia",
		RABBITMQ_LOG_BASE => "$rmq/log",
		RABBITMQ_NODENAME => $r{nodename},
		RABBITMQ_NODE_IP_ADDRESS => '127.0.0.1',
		RABBITMQ_NODE_PORT => $r{amqp_port},
		RABBITMQ_DIST_PORT => $r{dist_port},
		RABBITMQ_CONFIG_FILE => "$rmq/rabbitmq.conf",
		RABBITMQ_ADVANCED_CONFIG_FILE => "$rmq/advanced.config",    # none
		RABBITMQ_ENABLED_PLUGINS_FILE => "$rmq/enabled_plugins",
		RABBITMQ_CONF_ENV_FILE => "$rmq/rabbitmq-env.conf",
		RABBITMQ_CTL_DIST_PORT_MIN => $r{ctl_port},
		RABBITMQ_CTL_DIST_PORT_MAX => $r{ctl_port},
		ERL_EPMD_PORT => $r{epmd_port},
	};

	for ($server, $epmd)
	{
		next if -x $_;
		$r{error} = "$_ is not installed (test/setup.sh installs rabbitmq-server)";
		return \%r;
	}

	my $started = time();
	$r{epmd_pid} = spawn_session("$rmq/log/epmd.log", {},
		$epmd, '-port', $r{epmd_port}, '-address', '127.0.0.1');
	push @to_stop, [ $r{epmd_pid}, 10 ];
	my $epmd_up = wait_until(
		$timeout,
		sub {
			!alive($r{epmd_pid})
			  || system("$epmd -port $r{epmd_port} -names >/dev/null 2>&1")
			  == 0;
		});
	if (!$epmd_up || !alive($r{epmd_pid}))
	{
		$r{error} = 'epmd did not start: ' . slurp("$rmq/log/epmd.log");
		return \%r;
	}

	$r{pid} = spawn_session("$rmq/log/stdout.log", $r{env}, $server);
	# stopped before epmd (@to_stop is stopped in reverse)
	push @to_stop, [ $r{pid}, 30 ];
	@r{qw(started python timeout)} = ($started, $opt{python}, $timeout);
	return $opt{nowait} ? \%r : wait_rabbitmq(\%r);
}

# wait_rabbitmq($rmq): after start_rabbitmq(nowait => 1), wait until the
# node accepts AMQP connections (ready) or say why not (error)
sub wait_rabbitmq
{
	my ($r) = @_;
	return $r if $r->{ready} || $r->{error};
	my $deadline = $r->{started} + $r->{timeout};
	while (time() < $deadline && alive($r->{pid}))
	{
		my ($rc) = run_helper($r->{python}, $r->{timeout}, 'wait-ready',
			$r->{amqp_port}, 2);
		if ($rc == 0)
		{
			$r->{ready} = 1;
			last;
		}
	}
	$r->{seconds} = time() - $r->{started};
	$r->{error} = "RabbitMQ did not start: see $r->{log}\n"
	  . slurp("$r->{log}/stdout.log")
	  unless $r->{ready};
	return $r;
}

# rabbitmqctl($rmq, @args): (stdout, stderr) of rabbitmqctl against the node
sub rabbitmqctl
{
	my ($r, @args) = @_;
	my $ctl = $ENV{RABBITMQCTL} // '/usr/lib/rabbitmq/bin/rabbitmqctl';
	local @ENV{ keys %{ $r->{env} } } = values %{ $r->{env} };
	my ($out, $err) = ('', '');
	eval {
		IPC::Run::run([ $ctl, @args ], '<', \undef, '>', \$out, '2>', \$err,
			IPC::Run::timeout(60));
	};
	return ($out, $err . ($@ // ''));
}

# stop_rabbitmq($rmq): SIGTERM the node (a clean shutdown), then its epmd.
# Returns a hash: status (the node's wait status, undef if it had to be
# killed), leftovers (pids of its process tree still alive afterwards),
# epmd_status, strays (any process whose command line or environment names
# this node or its epmd port: an "epmd -daemon" it might have spawned would
# only have the latter).
sub stop_rabbitmq
{
	my ($r) = @_;
	my %res;
	if ($r->{pid})
	{
		my @tree = process_tree($r->{pid});
		$res{status} = stop_group($r->{pid}, 30);
		forget_pid($r->{pid});
		wait_until(30, sub { !grep { alive($_) } @tree }, 0.05);
		$res{leftovers} = [ grep { alive($_) } @tree ];
		$r->{pid} = undef;
	}
	if ($r->{epmd_pid})
	{
		$res{epmd_status} = stop_group($r->{epmd_pid}, 10);
		forget_pid($r->{epmd_pid});
		$r->{epmd_pid} = undef;
	}
	my ($node, $port) = ($r->{nodename}, $r->{epmd_port});
	$res{strays} = [
		grep {
			my $cmdline = slurp("/proc/$_/cmdline");
			my $environ = slurp("/proc/$_/environ");
			alive($_)
			  && ("$cmdline\x00$environ" =~
				/\Q$node\E|-port\x00$port\x00|(?:^|\x00)ERL_EPMD_PORT=$port\x00/);
		} map { m{^/proc/(\d+)$} ? $1 : () } glob('/proc/[0-9]*')
	];
	return \%res;
}

# ---------------------------------------------------------------------------
# pgbouncer
# ---------------------------------------------------------------------------

# start_pgbouncer(dir => DIR, host => PGHOST, port => PGPORT,
#                 dbname => DB, users => [...], settings => {...}):
# pgbouncer in the foreground, as the current user, listening on 127.0.0.1
# only (no Unix socket), serving DB from the server at PGHOST:PGPORT, with
# trust authentication for the given users (the server authenticates them)
# and pool_mode = transaction unless settings say otherwise.  Returns a
# hash: port, pid, ini, log, ready, error.
sub start_pgbouncer
{
	my %opt = @_;
	my $dir = $opt{dir};
	my $bin = $ENV{PGBOUNCER} // '/usr/sbin/pgbouncer';
	make_path($dir);
	catch_signals();
	my %b = (port => free_port(), ini => "$dir/pgbouncer.ini",
		log => "$dir/pgbouncer.log", ready => 0);
	if (!-x $bin)
	{
		$b{error} = "$bin is not installed (test/setup.sh installs pgbouncer)";
		return \%b;
	}
	write_file("$dir/userlist.txt",
		join('', map { qq("$_" ""\n) } @{ $opt{users} }));
	my %settings = (
		listen_addr => '127.0.0.1',
		listen_port => $b{port},
		unix_socket_dir => '',
		auth_type => 'trust',
		auth_file => "$dir/userlist.txt",
		admin_users => $opt{users}[0],
		pool_mode => 'transaction',
		logfile => $b{log},
		pidfile => "$dir/pgbouncer.pid",
		%{ $opt{settings} // {} });
	write_file(
		$b{ini},
		"[databases]\n$opt{dbname} = host=$opt{host} port=$opt{port} dbname=$opt{dbname}\n"
		  . "[pgbouncer]\n"
		  . join('', map { "$_ = $settings{$_}\n" } sort keys %settings));
	$b{pid} = spawn_session("$dir/stdout.log", {}, $bin, $b{ini});
	push @to_stop, [ $b{pid}, 10 ];
	$b{ready} = wait_until(
		30,
		sub {
			!alive($b{pid})
			  || IO::Socket::INET->new(
				PeerAddr => '127.0.0.1',
				PeerPort => $b{port},
				Timeout => 1);
		}) && alive($b{pid});
	$b{error} = "pgbouncer did not start:\n" . slurp("$dir/stdout.log") . slurp($b{log})
	  unless $b{ready};
	return \%b;
}

# SIGTERM (immediate shutdown); returns the wait status, undef if killed
sub stop_pgbouncer
{
	my ($b) = @_;
	return undef unless $b->{pid};
	my $status = stop_group($b->{pid}, 10);
	forget_pid($b->{pid});
	$b->{pid} = undef;
	return $status;
}

# ---------------------------------------------------------------------------
# the retention worker's tests
# ---------------------------------------------------------------------------

our $LATEST_CLAIM = q{'2024-06-01 12:00:00+00'::timestamptz};

sub add_expired
{
	my ($node, $db, $consumer, $n) = @_;
	$node->safe_psql($db, qq{
INSERT INTO processed_messages
SELECT '$consumer', 'm' || i, $LATEST_CLAIM - i * interval '1 hour'
  FROM generate_series(0, $n - 1) i});
	return;
}

sub count_of
{
	my ($node, $db, $consumer) = @_;
	return $node->safe_psql($db,
		"SELECT count(*) FROM processed_messages WHERE consumer_name = '$consumer'");
}

sub wait_sweep
{
	my ($node, $db, $outcome, $what) = @_;
	my $since = $node->safe_psql($db, 'SELECT clock_timestamp()');
	$node->safe_psql($db, 'SELECT dedup_sweeper_wake()');
	return ok(
		$node->poll_query_until(
			$db, qq{
SELECT last_sweep_start > '$since' AND sweeper_pid IS NULL
   AND last_sweep_outcome = '$outcome'
  FROM dedup_sweeper}),
		"$db: $what");
}

sub set_config
{
	my ($node, $name, $value, $shown) = @_;
	$node->safe_psql('postgres',
		defined $value
		? "ALTER SYSTEM SET $name = '$value'"
		: "ALTER SYSTEM RESET $name");
	$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
	return ok(
		$node->poll_query_until('postgres', "SELECT current_setting('$name')", $shown),
		"$name is now '$shown'");
}

1;
