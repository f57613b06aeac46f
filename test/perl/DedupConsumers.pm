#
# test/perl/DedupConsumers.pm: doc/examples/rabbitmq_consumer.py, the broker tests'
# client: its one-shot modes, the consumers it runs (each writing JSON lines
# to a log file of its own), what they report, and the checks that every
# message was applied exactly once.  Needs no PostgreSQL test module
# (test/demo_broker.pl uses it too).
#
# Exports:
#   run_helper($python, @args)       run the script in the foreground;
#                                    (exit code, stdout, stderr), exit code
#                                    -1 if it did not end in test_timeout()
#   payments($prefix, $n)            $n messages {message_id => PREFIX-0001,
#                                    account => 1..5, amount => 1..100}
#   balances(@messages)              {account => sum of their amounts}
#   consumer_tables_sql(@columns)    the tables the consumers write: five
#                                    accounts, and "applied" (a row per
#                                    application of a message, no unique
#                                    key) with @columns added
#   signal($control, 'go'|'stop'|...)
#                                    create that file in a control
#                                    directory: the consumers watch it
#
# The consumers of one test (methods):
#   DedupConsumers->new(python => P, dir => DIR, broker => B, db => DB,
#                       node => NODE, or host => PGHOST, port => PGPORT)
#                                    NODE's server unless host and port say
#                                    otherwise; check_exactly_once needs NODE
#   $c->control($name)               a new control directory DIR/$name
#   $c->start($worker, $queue, $behaviour, $control, @options)
#                                    a consumer (see the script) in the
#                                    background, killed at exit; returns its
#                                    IPC::Run harness; its records go to
#                                    DIR/$worker.log, its stderr to .log.err
#   $c->run(same)                    in the foreground: its exit code, -1 if
#                                    it did not end in test_timeout()
#   $c->spawn(same)                  in a session of its own: its pid (for
#                                    waitpid), stopped at exit
#   $c->start_noise($worker, $control, @options)
#                                    a pool-noise client, like start()
#   $c->stop(@harnesses)             wait for them (after their stop file):
#                                    their exit codes (-1: did not finish)
#   $c->stderr_of($worker)           what it wrote to stderr
#   $c->records(@workers)            their JSON lines (all workers': none)
#   $c->deliveries(@workers)         ... the records of deliveries
#   $c->wait_ready(@workers)         until each has connected; false after
#                                    test_timeout()
#   $c->wait_drained($queue, $copies, @workers)
#                                    until they acked $copies deliveries and
#                                    $queue holds no message
#   $c->check_exactly_once(like => 'a-%', messages => [...],
#                          [times => {id => n}, balances => {id => sum},
#                          records => SCHEMA.processed_messages], label => L)
#                                    Test::More assertions: each message
#                                    LIKE the pattern applied exactly once
#                                    (or times->{id} times), none missing or
#                                    unexpected, the claims stored are
#                                    exactly those messages, each with its
#                                    work, the balances are the given sums
#
package DedupConsumers;

use strict;
use warnings;

use Cwd qw(abs_path);
use Exporter 'import';
use File::Basename qw(dirname);
use File::Path     qw(make_path);
use IPC::Run;
use JSON::PP;
use Test::More;

use DedupProcess;

our @EXPORT = qw(run_helper payments balances consumer_tables_sql signal);

my @harnesses;    # started consumers, killed at exit

END
{
	my $status = $?;
	eval { $_->kill_kill } for @harnesses;
	$? = $status;
}

sub script
{
	return abs_path(
		dirname(__FILE__) . '/../../doc/examples/rabbitmq_consumer.py');
}

sub run_helper
{
	my ($python, @args) = @_;
	my ($out,    $err)  = ('', '');
	my $ok = eval {
		IPC::Run::run([ $python, script(), @args ],
			'<', \undef, '>', \$out, '2>', \$err,
			IPC::Run::timeout(test_timeout()));
		1;
	};
	return (-1,      $out, $err . ($@ // '')) unless $ok;
	return ($? >> 8, $out, $err);
}

sub payments
{
	my ($prefix, $n) = @_;
	return map {
		{
			message_id => sprintf('%s-%04d', $prefix, $_),
			account    => 1 + $_ % 5,
			amount     => 1 + ($_ * 37) % 100
		}
	} 1 .. $n;
}

sub balances
{
	my %sum;
	$sum{ $_->{account} } += $_->{amount} for @_;
	return \%sum;
}

sub consumer_tables_sql
{
	my @columns = (
		'message_id text NOT NULL',
		'worker text NOT NULL',
		'redelivered boolean NOT NULL',
		'attempt text NOT NULL', @_);
	return
	  "CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL);\n"
	  . "INSERT INTO accounts SELECT g, 0 FROM generate_series(1, 5) g;\n"
	  . 'CREATE TABLE applied ('
	  . join(', ', @columns) . ");\n";
}

# the JSON lines of a consumer's log, as hashes
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

sub signal
{
	my ($control, $name) = @_;
	write_file("$control/$name", '');
	return;
}

sub new
{
	my ($class, %opt) = @_;
	my $self = bless { %opt, logs => {} }, $class;
	if ($self->{node})
	{
		$self->{host} //= $self->{node}->host;
		$self->{port} //= $self->{node}->port;
	}
	return $self;
}

sub control
{
	my ($self, $name) = @_;
	my $dir = "$self->{dir}/$name";
	make_path($dir);
	return $dir;
}

# the script's arguments for a consumer, and where its records go
sub consume_args
{
	my ($self, $worker, $queue, $behaviour, $control, @options) = @_;
	$self->{logs}{$worker} = "$self->{dir}/$worker.log";
	return (
		$self->{logs}{$worker},
		[
			$self->{python}, script(),
			'consume',       $self->{broker}{amqp_port},
			$queue,          $self->{host},
			$self->{port},   $self->{db},
			$worker,         $behaviour,
			$control,        @options
		]);
}

# $cmd in the background, stdout to $log, stderr to $log.err
sub background
{
	my ($log, $cmd) = @_;
	my $h = IPC::Run::start($cmd, '<', \undef, '>', $log, '2>', "$log.err");
	push @harnesses, $h;
	return $h;
}

sub start
{
	my ($self, @consumer) = @_;
	return background($self->consume_args(@consumer));
}

sub run
{
	my ($self, @consumer) = @_;
	my ($log,  $cmd)      = $self->consume_args(@consumer);
	my $ok = eval {
		IPC::Run::run($cmd, '<', \undef, '>', $log, '2>', "$log.err",
			IPC::Run::timeout(test_timeout()));
		1;
	};
	return $ok ? $? >> 8 : -1;
}

sub spawn
{
	my ($self, @consumer) = @_;
	my ($log,  $cmd)      = $self->consume_args(@consumer);
	my $pid = spawn_session($log, {}, @$cmd);
	stop_at_exit($pid, 5);
	return $pid;
}

sub start_noise
{
	my ($self, $worker, $control, @options) = @_;
	my $log = $self->{logs}{$worker} = "$self->{dir}/$worker.log";
	return background(
		$log,
		[
			$self->{python}, script(),    'pool-noise', $self->{host},
			$self->{port},   $self->{db}, $worker,      $control,
			@options
		]);
}

sub stop
{
	my ($self, @stopping) = @_;
	my @codes;
	for my $h (@stopping)
	{
		my $ok = eval { $h->finish; 1 };
		push @codes, $ok ? $h->result(0) : -1;
		@harnesses = grep { $_ != $h } @harnesses;
	}
	return @codes;
}

sub stderr_of
{
	my ($self, $worker) = @_;
	return read_file("$self->{logs}{$worker}.err");
}

sub records
{
	my ($self, @workers) = @_;
	@workers = sort keys %{ $self->{logs} } unless @workers;
	return map { read_json_lines($self->{logs}{$_}) } @workers;
}

sub deliveries
{
	my ($self, @workers) = @_;
	return
	  grep { ($_->{event} // '') eq 'delivery' } $self->records(@workers);
}

sub wait_ready
{
	my ($self, @workers) = @_;
	return wait_until(
		sub {
			@workers == grep {
				grep { ($_->{event} // '') eq 'ready' } $self->records($_)
			} @workers;
		});
}

sub wait_drained
{
	my ($self, $queue, $copies, @workers) = @_;
	return wait_until(
		sub {
			my $acks = grep { ($_->{action} // '') eq 'ack' }
			  $self->deliveries(@workers);
			return $acks >= $copies && $self->{broker}->depth($queue) == 0;
		});
}

sub check_exactly_once
{
	my ($self, %o) = @_;
	my ($node, $db, $like, $label) =
	  ($self->{node}, $self->{db}, @o{qw(like label)});
	my $records = $o{records} // 'processed_messages';
	my %want    = map {
		$_->{message_id} => (($o{times} // {})->{ $_->{message_id} } // 1)
	} @{ $o{messages} };
	my $rows = 0;
	$rows += $_ for values %want;
	my $n = keys %want;
	my %got;
	for my $line (
		split /\n/,
		$node->safe_psql(
			$db,
			"SELECT message_id, count(*) FROM applied WHERE message_id LIKE '$like' GROUP BY 1"
		))
	{
		my ($id, $c) = split /\|/, $line;
		$got{$id} = $c;
	}
	my @wrong = grep { ($got{$_} // 0) != ($want{$_} // 0) }
	  sort(keys %{ { %want, %got } });
	my $total = 0;
	$total += $_ for values %got;
	is($total, $rows, "$label: $rows applications of $n messages");
	is(scalar(@wrong), 0,
		"$label: each message applied exactly as often as expected, none lost, none extra"
	  )
	  or diag(
		join(
			', ',
			map {
					"$_ applied "
				  . ($got{$_} // 0)
				  . ' times, want '
				  . ($want{$_} // 0)
			} @wrong[ 0 .. ($#wrong < 9 ? $#wrong : 9) ]));
	is( $node->safe_psql(
			$db,
			"SELECT count(*), count(DISTINCT message_id) FROM $records WHERE consumer_name = 'ledger' AND message_id LIKE '$like'"
		),
		"$n|$n",
		"$label: $records holds exactly $n claims");
	is( $node->safe_psql(
			$db, qq{
SELECT count(*)
  FROM (SELECT message_id FROM $records WHERE consumer_name = 'ledger' AND message_id LIKE '$like') p
  FULL JOIN (SELECT DISTINCT message_id FROM applied WHERE message_id LIKE '$like') a USING (message_id)
 WHERE p.message_id IS NULL OR a.message_id IS NULL}),
		'0',
		"$label: a claim for each applied message, no claim without its work"
	) unless $o{times};
	if ($o{balances})
	{
		my $want_b = $o{balances};
		is( $node->safe_psql(
				$db,
				q{SELECT string_agg(id || '=' || balance, ',' ORDER BY id) FROM accounts WHERE balance <> 0}
			),
			join(',',
				map { "$_=$want_b->{$_}" }
				grep { $want_b->{$_} } sort { $a <=> $b } keys %$want_b),
			"$label: balances are the sums of the messages applied");
	}
	return;
}

1;
