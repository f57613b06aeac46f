#
# test/perl/DedupNode.pm: the TAP tests' cluster (its documentation is the
# POD below: perldoc test/perl/DedupNode.pm).
#

=pod

=head1 NAME

DedupNode - the TAP tests' cluster: a PostgreSQL::Test::Cluster with
dedup's settings and dedup's waits

=head1 SYNOPSIS

  use FindBin;
  use lib "$FindBin::Bin/../perl";
  use DedupNode;
  use PostgreSQL::Test::Utils;
  use Test::More;

  my $node = DedupNode->create('example', sweeps => 'on request');
  $node->safe_psql('postgres', 'CREATE EXTENSION dedup');
  $node->add_expired('postgres', 'orders', 5);
  ok($node->sweep_until('postgres', 'done'), 'a sweep ended done');

=head1 DESCRIPTION

A test file states only what is particular to it.  Works with the TAP
modules of PostgreSQL 15, 17 and 18 (whose constructor is new($name) in
each of them).  Of the base class it overrides init(), on PostgreSQL 15
only, to copy the cluster that INITDB_TEMPLATE names as 17 and later do
themselves, and poll_query_until() (see below).  It uses the base class's
wait_for_log() where that serves (wait_log_count() for one match), and
adds nothing that the base class of every supported version has: the
base's log_contains($re, $offset) and background_psql() are there for
tests to use as they are.

Run one test (dedup installed in the server that pg_config names, as a
user that may create clusters; PROVE_TESTS takes several files, or a
glob):

  make installcheck REGRESS= ISOLATION= PROVE_TESTS=test/t/021_sweeper_lifecycle.pl

or as root, installing what the test needs first (test/setup.sh):

  sudo test/run.sh REGRESS= ISOLATION= PROVE_TESTS=test/t/021_sweeper_lifecycle.pl

Its log is tmp_check/log/regress_log_021_sweeper_lifecycle, its server's
tmp_check/log/021_sweeper_lifecycle_<node>.log.  Every wait below gives up
after the PostgreSQL test default (PG_TEST_TIMEOUT_DEFAULT, 180 s).

=head1 THE CLUSTER

=over

=item DedupNode->create($name, preload => 1, sweeps => PRESET, conf => {name => value}, init => {...})

new(), init(%init), dedup's settings and conf (values unquoted), start.
preload (default 1): dedup in shared_preload_libraries.  sweeps, one of:
C<'every second'> (dedup.sweep_interval = 1s, dedup.retention = 1h, and
the postmaster logs each worker it starts: log_min_messages = debug1);
C<'on request'> (dedup.retention = 1h, an hour between sweeps: only a
wake-up sweeps); C<'off'> (dedup.sweep_enabled = off).  Without sweeps:
dedup's defaults.

=item $node->set_config($name, $value, $shown)

ALTER SYSTEM SET (RESET for an undef $value), reload; ok() once new
sessions show $shown (polled with a new session each time: the
postmaster, which starts them, has reloaded).

=item $node->poll_query_until($db, $query, $expected)

As the base class's (true once $query prints $expected, default 't', and
no error), but every attempt goes through one psql session for the whole
wait (a new one only after it ended, e.g. the server restarted): a psql
and a backend started ten times a second take most of a core on these
machines.  Its own session rather than the base's background_psql(): an
attempt must see the whole of its standard error, survive the server's
restart (a new session, not an error) and be given up after 10 s without
an answer (a connection made during crash recovery can wait for ever),
which background_psql() does not do in every supported minor release.

=item $node->poll_value($db, $query)

$query's output once it is not empty (undef after the timeout), polled
the same way.

=item $node->psql_verbose($db, $sql, %params)

psql() with the SQLSTATE in every message.

=item $node->psql_fails_like($db, $sql, $re, $name, %params)

ok() that it fails, with no output, with an error matching $re; returns
the error.

=back

=head1 CLAIMS

On a database with dedup installed.

=over

=item DedupNode::LATEST_CLAIM

The latest claim of add_expired(), a fixed date that keeps windows exact.

=item $node->add_expired($db, $consumer, $n)

$n claims an hour apart, the latest at LATEST_CLAIM: with a window of an
hour, two stay (m0 and m1).

=item $node->count_of($db, $consumer, $where)

The consumer's records (that match $where).

=item $node->consumer_counts($db, $where)

Every consumer's records (matching $where), as "name=n,name=n".

=back

=head1 THE SWEEPER

=over

=item $node->sweep($db)

Wake the launcher; once a sweep of $db that started afterwards has ended,
its outcome (undef if none).

=item $node->sweep_until($db, $outcome)

sweep() until a sweep ends with $outcome: true, or false after the
timeout.

=item $node->wait_sweep_after($db, $since)

As sweep(), for a sweep started after $since (a clock_timestamp() of the
server).

=item $node->watch_sweep($db, $query, $before)

Run $before (SQL, may be empty), wake the launcher and watch from inside
the server, for what is too short for a poll: ($since, the wake-up's
clock_timestamp(), and the first column of $query once it returns a row,
'' if a sweep of $db that started after $since ended first).

=item $node->watch_sweeper_wait($db, $event, $before)

watch_sweep() for the sweeper of $db in the wait $event of type
Extension, as PostgreSQL 17 and later name it (on 15 every such wait is
"Extension"): ($since, 't' once seen, '' if not).

=item $node->hold_outbox_batches($db, $consumer, $refill_while)

Hold every batch of the outbox step of the sweeps of $db (a trigger on
dedup_outbox) for at least 1 ms and until a claim of $consumer that began
after the batch began has committed: a claim then certainly ran during
each of those batches, which the claims' heartbeat tells the sweeper at
the batch's end, however the machine schedules the claims and the sweep;
and the pause owed them for it is at least 1 ms, long enough to be slept,
with any dedup.sweep_busy_share up to 50 (sweep_pace.c).  Claims of
$consumer must run (pgbench) until release_outbox_batches().  With
$refill_while (SQL, a condition), each batch also puts back as many sent
messages as a batch deletes while the condition holds: the sweep goes on
until it does not.

=item $node->release_outbox_batches($db)

Drop what hold_outbox_batches() created.

=item $node->wait_sweeping_stopped($db)

ok() once no sweep of $db has started for 2.5 s.

=item $node->launcher_pid

The launcher's pid ('' if none runs).

=item $node->wait_launcher($old_pid)

Until a launcher other than $old_pid runs: its pid, or undef after the
timeout.

=back

=head1 THE SERVER LOG

From byte $offset on, e.g. C<-s $node-E<gt>logfile>.  The base class has
wait_for_log($re, $offset) (dies after the timeout) and
log_contains($re, $offset); these count, and return false rather than
die.

=over

=item $node->log_since($offset)

The log from $offset on.

=item $node->log_count($offset, $re)

Matches of $re.

=item $node->wait_log_count($offset, $re, $n)

Until $n matches: true, or false after the timeout (for one match, the
base class's wait_for_log()).

=item $node->sweeper_starts($offset, $db)

Sweepers the postmaster started in $db (logged at DEBUG1).

=item $node->wait_sweeper_starts($offset, $db, $n)

Until $n of them: true, or false after the timeout.

=item $node->log_entries($offset, $re)

Entries (a line and its continuation lines, and its CONTEXT line: a
sweeper's names its database) matching $re, but for the echo of
statements and their STATEMENT lines.

=item $node->log_problems($offset)

Entries of severity WARNING or worse.

=back

=cut

package DedupNode;

use strict;
use warnings;

use parent 'PostgreSQL::Test::Cluster';

# nothing imported: Utils' command_ok() and the like would shadow the methods
# of the same names that the class inherits
use PostgreSQL::Test::Utils ();
use Test::More;

use DedupProcess qw(wait_until);

use constant LATEST_CLAIM => q{'2024-06-01 12:00:00+00'::timestamptz};

my %SWEEPS = (
	'every second' => {
		'dedup.sweep_interval' => '1s',
		'dedup.retention'      => '1h',
		log_min_messages       => 'debug1',
	},
	'on request' => {
		'dedup.sweep_interval' => '1h',
		'dedup.retention'      => '1h',
	},
	'off' => { 'dedup.sweep_enabled' => 'off' },);

# PostgreSQL 17 and later copy the cluster that INITDB_TEMPLATE names (made
# once per run by the Makefile) instead of running initdb for each node,
# unless initdb gets extra options; on 15 the copy stands in for that one
# initdb call
sub init
{
	my ($self, %params) = @_;
	my $template = $ENV{INITDB_TEMPLATE};
	return $self->SUPER::init(%params)
	  if !defined $template
	  || defined $params{extra}
	  || $self->pg_version >= 17;
	my $system_or_bail = \&PostgreSQL::Test::Utils::system_or_bail;
	no warnings 'redefine';
	local *PostgreSQL::Test::Utils::system_or_bail = sub {
		return $system_or_bail->(@_) unless $_[0] eq 'initdb';
		note('initializing database system by copying initdb template');
		return $system_or_bail->('cp', '-RPp', $template, $self->data_dir);
	};
	return $self->SUPER::init(%params);
}

sub create
{
	my ($class, $name, %opt) = @_;
	my $sweeps = $opt{sweeps} // 'dedup defaults';
	die "no sweeps preset '$sweeps'"
	  unless $SWEEPS{$sweeps} || !defined $opt{sweeps};
	my $self = $class->new($name);
	$self->init(%{ $opt{init} // {} });
	my %conf = (
		(($opt{preload} // 1) ? (shared_preload_libraries => 'dedup') : ()),
		%{ $SWEEPS{$sweeps} // {} },
		%{ $opt{conf} // {} });
	$self->append_conf('postgresql.conf',
		join('', map { "$_ = '$conf{$_}'\n" } sort keys %conf));
	$self->start;
	return $self;
}

sub set_config
{
	my ($self, $name, $value, $shown) = @_;
	$self->safe_psql('postgres',
		defined $value
		? "ALTER SYSTEM SET $name = '$value'"
		: "ALTER SYSTEM RESET $name");
	$self->safe_psql('postgres', 'SELECT pg_reload_conf()');
	return ok(
		$self->PostgreSQL::Test::Cluster::poll_query_until(
			'postgres', "SELECT current_setting('$name')", $shown),
		"$name is now '$shown'");
}

# poll($db, $query, $done): run $query every 0.1 s in one psql session
# until $done->($stdout, $stderr) is true (both chomped); returns whether it
# was and the last output.  Each attempt ends with a mark on both outputs, so
# that what is read belongs to it; a session that ended (psql exits when its
# connection is lost) is replaced at the next attempt, and so is one that
# gives no answer within 10 s (a connection made while the server restarts
# after a crash can be left waiting).
sub poll
{
	my ($self, $db, $query, $done) = @_;
	local %ENV = $self->_get_env();
	my $mark = '__dedup_poll_attempt_done__';
	my ($in, $out, $err, $session) = ('', '', '');
	my $answer  = IPC::Run::timeout(10);
	my $attempt = sub {
		if (!$session || !$session->pumpable)
		{
			eval { $session->finish } if $session;
			$in      = '';
			$session = IPC::Run::start(
				[
					$self->installed_command('psql'), '-XAt',
					'-d',                             $self->connstr($db)
				],
				'<',
				\$in,
				'>',
				\$out,
				'2>',
				\$err,
				$answer);
		}
		($out, $err) = ('', '');
		$in .= "$query\n;\n\\echo $mark\n\\warn $mark\n";
		$answer->start(10);
		eval {
			$session->pump
			  while $session->pumpable
			  && !($out =~ /^$mark\n/m && $err =~ /^$mark\n/m);
		};
		if ($answer->is_expired)
		{
			eval { $session->kill_kill };
			undef $session;
			return 0;
		}
		my $complete = $out =~ s/^$mark\n//m;
		$complete = $err =~ s/^$mark\n//m && $complete;
		chomp($out);
		chomp($err);
		return $complete && $done->($out, $err);
	};
	my $ok = wait_until($attempt);
	if ($session)
	{
		$in .= "\\q\n";
		eval { $session->finish };
	}
	diag(   "polling timed out executing this query:\n$query\n"
		  . "last output:\n$out\nwith stderr:\n$err")
	  unless $ok;
	return ($ok, $out);
}

sub poll_query_until
{
	my ($self, $db, $query, $expected) = @_;
	$expected //= 't';
	my ($ok) = $self->poll($db, $query,
		sub { my ($out, $err) = @_; return $out eq $expected && $err eq ''; }
	);
	return $ok;
}

sub poll_value
{
	my ($self, $db, $query) = @_;
	my ($ok, $out) = $self->poll($db, $query,
		sub { my ($out, $err) = @_; return $out ne '' && $err eq ''; });
	return $ok ? $out : undef;
}

sub psql_verbose
{
	my ($self, $db, $sql, %params) = @_;
	return $self->psql($db, "\\set VERBOSITY verbose\n$sql", %params);
}

sub psql_fails_like
{
	my ($self, $db, $sql, $re, $name, %params) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my ($ret, $out, $err) = $self->psql_verbose($db, $sql, %params);
	isnt($ret, 0, "$name: fails");
	is($out, '', "$name: no result");
	like($err, $re, "$name: error message");
	return $err;
}

sub add_expired
{
	my ($self, $db, $consumer, $n) = @_;
	my $latest = LATEST_CLAIM;
	$self->safe_psql(
		$db, qq{
INSERT INTO processed_messages
SELECT '$consumer', 'm' || i, $latest - i * interval '1 hour'
  FROM generate_series(0, $n - 1) i});
	return;
}

sub count_of
{
	my ($self, $db, $consumer, $where) = @_;
	return $self->safe_psql($db,
		"SELECT count(*) FROM processed_messages WHERE consumer_name = '$consumer' AND "
		  . ($where // 'true'));
}

sub consumer_counts
{
	my ($self, $db, $where) = @_;
	$where //= 'true';
	return $self->safe_psql(
		$db, qq{
SELECT coalesce(string_agg(consumer_name || '=' || n, ',' ORDER BY consumer_name), '')
  FROM (SELECT consumer_name, count(*) AS n FROM processed_messages
		 WHERE $where GROUP BY consumer_name) s});
}

# The outcome is read in the same query as the sweep's end, so that a later
# sweep cannot hide it.
sub wait_sweep_after
{
	my ($self, $db, $since) = @_;
	return $self->poll_value(
		$db, qq{
SELECT last_sweep_outcome FROM dedup_sweeper
 WHERE last_sweep_start > '$since' AND last_sweep_end >= last_sweep_start
   AND last_sweep_outcome <> 'running' AND sweeper_pid IS NULL});
}

sub sweep
{
	my ($self, $db) = @_;
	my $since = $self->safe_psql($db, 'SELECT clock_timestamp()');
	$self->safe_psql($db, 'SELECT dedup_sweeper_wake()');
	return $self->wait_sweep_after($db, $since);
}

sub sweep_until
{
	my ($self, $db, $outcome) = @_;
	return wait_until(sub { ($self->sweep($db) // '') eq $outcome });
}

sub watch_sweep
{
	my ($self, $db, $query, $before) = @_;
	my $timeout = $PostgreSQL::Test::Utils::timeout_default;
	my $out     = $self->safe_psql(
		$db, qq{
CREATE FUNCTION pg_temp.watch(since timestamptz) RETURNS text
LANGUAGE plpgsql AS \$\$
DECLARE
	deadline timestamptz := clock_timestamp() + interval '$timeout s';
	seen text;
BEGIN
	WHILE clock_timestamp() < deadline LOOP
		PERFORM pg_stat_clear_snapshot();
		EXECUTE \$q\$ $query \$q\$ INTO seen;
		IF seen IS NOT NULL THEN
			RETURN seen;
		END IF;
		IF EXISTS (SELECT FROM dedup_sweeper
					WHERE last_sweep_start > since AND sweeper_pid IS NULL
					  AND last_sweep_end >= last_sweep_start) THEN
			RETURN '';
		END IF;
		-- a look every 2 ms, not a core spinning next to the sweep
		PERFORM pg_sleep(0.002);
	END LOOP;
	RETURN '';
END \$\$;
$before;
SELECT clock_timestamp() AS since, dedup_sweeper_wake() AS woken \\gset
SELECT :'since', pg_temp.watch(:'since');
});
	return split /\|/, $out, 2;
}

sub watch_sweeper_wait
{
	my ($self, $db, $event, $before) = @_;
	$event = 'Extension' if $self->pg_version < 17;
	return $self->watch_sweep(
		$db, qq{
SELECT 't' FROM pg_stat_activity
 WHERE backend_type = 'dedup sweeper' AND datname = '$db'
   AND wait_event_type = 'Extension' AND wait_event = '$event'}, $before);
}

sub hold_outbox_batches
{
	my ($self, $db, $consumer, $refill_while) = @_;
	$refill_while //= 'false';

	# the sweeper's search_path is pg_catalog's: the tables are qualified
	$self->safe_psql(
		$db, qq{
CREATE FUNCTION public.hold_outbox_batch() RETURNS trigger
LANGUAGE plpgsql AS \$\$
BEGIN
	LOOP
		PERFORM pg_sleep(0.001);
		EXIT WHEN EXISTS (SELECT FROM public.processed_messages
						   WHERE consumer_name = '$consumer' AND processed_at > now());
	END LOOP;
	IF $refill_while THEN
		INSERT INTO public.dedup_outbox (message_id, destination, payload, sent_at)
		SELECT 'refill ' || gen_random_uuid(), 'held', '', now() - interval '1 day'
		  FROM generate_series(1, current_setting('dedup.sweep_batch_size')::int);
	END IF;
	RETURN NULL;
END \$\$;
CREATE TRIGGER hold_outbox_batch BEFORE DELETE ON public.dedup_outbox
	FOR EACH STATEMENT EXECUTE FUNCTION public.hold_outbox_batch();});
	return;
}

sub release_outbox_batches
{
	my ($self, $db) = @_;
	$self->safe_psql($db, 'DROP FUNCTION public.hold_outbox_batch() CASCADE');
	return;
}

sub wait_sweeping_stopped
{
	my ($self, $db) = @_;
	return ok(
		$self->poll_query_until(
			$db, q{
SELECT sweeper_pid IS NULL
   AND clock_timestamp() - last_sweep_start > interval '2.5 s'
  FROM dedup_sweeper}),
		"$db: no sweep started for 2.5 s (2.5 intervals): sweeping has stopped"
	);
}

sub launcher_pid
{
	my ($self) = @_;
	return $self->safe_psql('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'dedup sweeper launcher'}
	);
}

sub wait_launcher
{
	my ($self, $old_pid) = @_;
	return $self->poll_value(
		'postgres', qq{
SELECT pid FROM pg_stat_activity
 WHERE backend_type = 'dedup sweeper launcher' AND pid <> $old_pid});
}

sub log_since
{
	my ($self, $offset) = @_;
	return PostgreSQL::Test::Utils::slurp_file($self->logfile, $offset);
}

sub log_count
{
	my ($self, $offset, $re) = @_;
	my $n = () = $self->log_since($offset) =~ /$re/g;
	return $n;
}

sub wait_log_count
{
	my ($self, $offset, $re, $n) = @_;
	return defined eval { $self->wait_for_log($re, $offset) } if $n == 1;
	return wait_until(sub { $self->log_count($offset, $re) >= $n });
}

sub sweeper_start_re
{
	my ($db) = @_;
	return
	  qr/starting background worker process "dedup sweeper for database \Q$db\E"/;
}

sub sweeper_starts
{
	my ($self, $offset, $db) = @_;
	return $self->log_count($offset, sweeper_start_re($db));
}

sub wait_sweeper_starts
{
	my ($self, $offset, $db, $n) = @_;
	return $self->wait_log_count($offset, sweeper_start_re($db), $n);
}

sub log_entries
{
	my ($self, $offset, $re) = @_;
	my @entries;
	my $pid = '';
	for my $line (split /\n/, $self->log_since($offset))
	{
		if ($line =~
			/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\S* \S+ \[(\d+)\] (?:\S+ )?CONTEXT:  /
			&& $1 eq $pid)
		{
			$entries[-1] .= "\n$line";
		}
		elsif ($line =~ /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d/ || !@entries)
		{
			push @entries, $line;
			$pid = $line =~ /^\S+ \S+ \S+ \[(\d+)\]/ ? $1 : '';
		}
		else
		{
			$entries[-1] .= "\n$line";
		}
	}
	return grep { /$re/ }
	  grep { !/^[^\n]*?\[\d+\] (?:\S+ )?(?:LOG:  statement: |STATEMENT:  )/ }
	  @entries;
}

sub log_problems
{
	my ($self, $offset) = @_;
	return $self->log_entries($offset,
		qr/^[^\n]*?\[\d+\] (?:\S+ )?(?:WARNING|ERROR|FATAL|PANIC):/);
}

1;
