#
# test/perl/DedupBroker.pm: a private RabbitMQ node for one test, run as the
# current user under the test's directory with its own epmd (a child we can
# stop: the node registers with it instead of starting a daemon that would
# outlive the test), its own AMQP, distribution and CLI ports, Erlang cookie
# and data, no plugins; stopped at exit whatever happens.  Queues are
# declared, filled and read through doc/examples/rabbitmq_consumer.py.  Needs no
# PostgreSQL test module (test/demo_broker.pl uses it too).
#
#   DedupBroker->start(dir => DIR, python => PYTHON)
#                            boots the node in the background; a broker
#                            with amqp_port, nodename, pid, log, and error
#                            (why it could not start)
#   $b->wait_ready           until it accepts AMQP connections: true, or
#                            false with error set, after test_timeout()
#   $b->ready_ok             ok(wait_ready), BAIL_OUT if not
#   $b->publish($queue, \@messages, @options)
#                            persistent, confirmed copies of the messages
#                            ({message_id, ...}): how many were published
#   $b->publish_ok($queue, \@messages, $name, @options)
#                            is() they all were
#   $b->declare_retry($queue, $delay_ms)
#                            $queue, $queue.delay, $queue.dlq (see the
#                            script): true once declared
#   $b->replay($from, $to)   move every message: how many
#   $b->queue($queue)        {messages => ready, consumers => n}, or undef
#   $b->depth($queue)        messages ready (-1: could not ask)
#   $b->ctl(@args)           (stdout, stderr) of rabbitmqctl
#   $b->restart              stop the node (SIGTERM, a clean shutdown) and
#                            start it again with the same ports, name and
#                            data (its durable queues and persistent
#                            messages survive), keeping its epmd; returns
#                            the stopped node's wait status (undef if it
#                            had to be killed); wait_ready afterwards
#   $b->stop                 SIGTERM the node (a clean shutdown), then its
#                            epmd; returns status (the node's wait status,
#                            undef if it had to be killed), leftovers (its
#                            processes alive afterwards), epmd_status, and
#                            strays (any process whose command line or
#                            environment names the node or its epmd port)
#   $b->stop_ok              stop, and assert all of that went well
#
package DedupBroker;

use strict;
use warnings;

use File::Path qw(make_path);
use IPC::Run;
use JSON::PP;
use Test::More;
use Time::HiRes qw(time);

use DedupConsumers qw(run_helper);
use DedupProcess;

sub start
{
	my ($class, %opt) = @_;
	my $dir    = $opt{dir};
	my $server = $ENV{RABBITMQ_SERVER}
	  // '/usr/lib/rabbitmq/bin/rabbitmq-server';
	my $epmd = $ENV{EPMD} // '/usr/bin/epmd';
	make_path("$dir/home", "$dir/mnesia", "$dir/log");

	my $self = bless {
		python    => $opt{python},
		amqp_port => free_port(),
		dist_port => free_port(),
		epmd_port => free_port(),
		ctl_port  => free_port(),
		nodename  => "dedup-test-$$\@localhost",
		log       => "$dir/log",
		ready     => 0,
		started   => time(),
	}, $class;
	write_file("$dir/enabled_plugins",   '');    # no plugins (no management)
	write_file("$dir/rabbitmq-env.conf", '');    # not /etc/rabbitmq's
	write_file("$dir/rabbitmq.conf",     <<"CONF");
listeners.tcp.1 = 127.0.0.1:$self->{amqp_port}
loopback_users = none
disk_free_limit.absolute = 1MB
vm_memory_high_watermark.absolute = 1GB
collect_statistics = none
log.console = false
log.file.level = info
CONF
	$self->{env} = {
		HOME                     => "$dir/home",           # the Erlang cookie
		RABBITMQ_MNESIA_BASE     => "$dir/mnesia",
		RABBITMQ_LOG_BASE        => "$dir/log",
		RABBITMQ_NODENAME        => $self->{nodename},
		RABBITMQ_NODE_IP_ADDRESS => '127.0.0.1',
		RABBITMQ_NODE_PORT       => $self->{amqp_port},
		RABBITMQ_DIST_PORT       => $self->{dist_port},
		RABBITMQ_CONFIG_FILE     => "$dir/rabbitmq.conf",
		RABBITMQ_ADVANCED_CONFIG_FILE => "$dir/advanced.config",     # none
		RABBITMQ_ENABLED_PLUGINS_FILE => "$dir/enabled_plugins",
		RABBITMQ_CONF_ENV_FILE        => "$dir/rabbitmq-env.conf",
		RABBITMQ_CTL_DIST_PORT_MIN    => $self->{ctl_port},
		RABBITMQ_CTL_DIST_PORT_MAX    => $self->{ctl_port},
		ERL_EPMD_PORT                 => $self->{epmd_port},

		# one scheduler of each kind, none spinning while idle: a test's
		# broker moves a few thousand messages, and Erlang's default busy
		# waiting takes cores the servers under test need
		RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS =>
		  '+S 1:1 +SDcpu 1:1 +SDio 1 +sbwt none +sbwtdcpu none +sbwtdio none',
	};

	for ($server, $epmd)
	{
		next if -x $_;
		$self->{error} =
		  "$_ is not installed (test/setup.sh installs rabbitmq-server)";
		return $self;
	}

	$self->{epmd_pid} = spawn_session("$dir/log/epmd.log", {},
		$epmd, '-port', $self->{epmd_port}, '-address', '127.0.0.1');
	stop_at_exit($self->{epmd_pid}, test_timeout());
	my $epmd_up = wait_until(
		sub {
			!alive($self->{epmd_pid})
			  || system(
				"$epmd -port $self->{epmd_port} -names >/dev/null 2>&1") == 0;
		});
	if (!$epmd_up || !alive($self->{epmd_pid}))
	{
		$self->{error} =
		  'epmd did not start: ' . read_file("$dir/log/epmd.log");
		return $self;
	}

	$self->{server} = $server;
	$self->spawn_node;
	return $self;
}

# start the node's process (stopped at exit, before epmd: the reverse order)
sub spawn_node
{
	my ($self) = @_;
	$self->{pid} =
	  spawn_session("$self->{log}/stdout.log", $self->{env}, $self->{server});
	stop_at_exit($self->{pid}, test_timeout());
	return;
}

sub restart
{
	my ($self) = @_;
	my @tree   = process_tree($self->{pid});
	my $status = stop_group($self->{pid}, test_timeout());
	forget_pid($self->{pid});
	wait_until(
		sub {
			!grep { alive($_) } @tree;
		},
		0.05);
	@$self{qw(ready error started)} = (0, undef, time());
	$self->spawn_node;
	return $status;
}

sub wait_ready
{
	my ($self) = @_;
	return $self->{ready} if $self->{ready} || $self->{error};
	$self->{ready} = wait_until(
		sub {
			!alive($self->{pid})
			  || (
				run_helper(
					$self->{python}, 'wait-ready', $self->{amqp_port}, 2)
			  )[0] == 0;
		}) && alive($self->{pid});
	$self->{seconds} = time() - $self->{started};
	$self->{error} =
	  "RabbitMQ did not start: see $self->{log}\n"
	  . read_file("$self->{log}/stdout.log")
	  unless $self->{ready};
	return $self->{ready};
}

sub ready_ok
{
	my ($self) = @_;
	ok($self->wait_ready, 'RabbitMQ accepts AMQP connections')
	  or BAIL_OUT($self->{error});
	note(sprintf('RabbitMQ ready after %.1f s', $self->{seconds}));
	return;
}

# run a mode of the script against the node; its JSON output, or undef
sub helper
{
	my ($self, @args) = @_;
	my ($rc, $out, $err) = run_helper($self->{python}, $args[0],
		$self->{amqp_port}, @args[ 1 .. $#args ]);
	my $result = $rc == 0 ? eval { decode_json($out) } : undef;
	diag("rabbitmq_consumer.py $args[0]: $err") unless $result;
	return $result;
}

sub publish
{
	my ($self, $queue, $messages, @options) = @_;
	my $file = "$self->{log}/publish-" . ++$self->{published} . '.json';
	write_file($file, encode_json($messages));
	my $r = $self->helper('produce', $queue, $file, @options);
	return $r ? $r->{published} : -1;
}

sub publish_ok
{
	my ($self, $queue, $messages, $name, @options) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	return is($self->publish($queue, $messages, @options),
		scalar(@$messages), $name);
}

sub declare_retry
{
	my ($self, $queue, $delay_ms) = @_;
	return defined $self->helper('declare-retry', $queue, $delay_ms);
}

sub replay
{
	my ($self, $from, $to) = @_;
	my $r = $self->helper('replay', $from, $to);
	return $r ? $r->{replayed} : -1;
}

sub queue
{
	my ($self, $queue) = @_;
	return $self->helper('depth', $queue);
}

sub depth
{
	my ($self, $queue) = @_;
	my $q = $self->queue($queue);
	return $q ? $q->{messages} : -1;
}

sub ctl
{
	my ($self, @args) = @_;
	my $ctl = $ENV{RABBITMQCTL} // '/usr/lib/rabbitmq/bin/rabbitmqctl';
	local @ENV{ keys %{ $self->{env} } } = values %{ $self->{env} };
	my ($out, $err) = ('', '');
	eval {
		IPC::Run::run([ $ctl, @args ],
			'<', \undef, '>', \$out, '2>', \$err,
			IPC::Run::timeout(test_timeout()));
	};
	return ($out, $err . ($@ // ''));
}

sub stop
{
	my ($self) = @_;
	my %res;
	if ($self->{pid})
	{
		my @tree = process_tree($self->{pid});
		$res{status} = stop_group($self->{pid}, test_timeout());
		forget_pid($self->{pid});
		wait_until(
			sub {
				!grep { alive($_) } @tree;
			},
			0.05);
		$res{leftovers} = [ grep { alive($_) } @tree ];
		$self->{pid} = undef;
	}
	if ($self->{epmd_pid})
	{
		$res{epmd_status} = stop_group($self->{epmd_pid}, test_timeout());
		forget_pid($self->{epmd_pid});
		$self->{epmd_pid} = undef;
	}
	my ($node, $port) = ($self->{nodename}, $self->{epmd_port});
	$res{strays} = [
		grep {
			my $cmdline = read_file("/proc/$_/cmdline");
			my $environ = read_file("/proc/$_/environ");
			alive($_)
			  && ("$cmdline\x00$environ" =~
				/\Q$node\E|-port\x00$port\x00|(?:^|\x00)ERL_EPMD_PORT=$port\x00/
			  );
		} map { m{^/proc/(\d+)$} ? $1 : () } glob('/proc/[0-9]*')
	];
	return \%res;
}

sub stop_ok
{
	my ($self) = @_;
	my $stopped = $self->stop;
	is($stopped->{status}, 0, 'RabbitMQ stopped cleanly on SIGTERM');
	is(scalar(@{ $stopped->{leftovers} }),
		0, 'no broker process left (beam, erl_child_setup, helpers)')
	  or diag(
		`ps -o pid,ppid,pgid,cmd -p @{[join ',', @{ $stopped->{leftovers} }]}`
	  );
	ok(defined $stopped->{epmd_status}, 'epmd stopped on SIGTERM');
	is(scalar(@{ $stopped->{strays} }),
		0, 'no process of this node or its epmd anywhere')
	  or diag(`ps -o pid,ppid,cmd -p @{[join ',', @{ $stopped->{strays} }]}`);
	return;
}

1;
