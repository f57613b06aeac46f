#
# 024_sweeper_batches.pl: how the retention sweeper deletes.
#
# One node with shared_preload_libraries = 'dedup', a sweep every second and
# the sweeper's DEBUG1 lines in the log.  Old claims are back-dated rows
# inserted straight into processed_messages (as superuser).  What is checked:
#
#  1. batches: 1050 expired rows with dedup.sweep_batch_size = 100 go in 11
#     separate transactions of at most 100 rows, oldest first (as the
#     sweeper's DEBUG1 lines tell); with dedup.sweep_batch_delay = 300ms
#     the sweeper waits (in pg_stat_activity) at least 300 ms between two
#     batches, never before the first;
#  2. dedup_sweep() returns what it deleted, can be limited to one consumer,
#     and is not executable by PUBLIC;
#  3. claims under pgbench while sweeps delete a 2-second window: no failure,
#     no in-window claim lost, no message applied twice within the window;
#  4. a row locked by another transaction makes a sweep end 'partial', with
#     no error and no wait; the next sweep deletes it;
#  5. a sweep yields to claims by itself: while pgbench claims, its batches
#     are followed by pauses that yield to them (its DEBUG1 summary line
#     says how many; the batches of its outbox step are held until a claim
#     has run during each, so some certainly are), on an idle server there
#     are none, nor with dedup.sweep_busy_share = 100; every expired row
#     and sent message is deleted all the same.
#
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupNode;
use DedupProcess qw(wait_until);
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = DedupNode->create(
	'batches',
	sweeps => 'every second',
	conf   => { max_connections => 30 });
$node->safe_psql('postgres', 'CREATE DATABASE db1');
$node->safe_psql('db1',      'CREATE EXTENSION dedup');

# the latest claim of most consumers below; a fixed date keeps it exact
my $L = DedupNode::LATEST_CLAIM;
my $offset;

###############################################################################
note('1. batches');

# Every batch of the sweeper says at DEBUG1 how many rows of which consumer
# it deleted, in which transaction, and up to which claim time; the log line
# prefix (%m) says when, here in seconds since midnight.
sub batches_logged
{
	my ($offset, $consumer) = @_;
	my @batches;
	for my $line (split /\n/, $node->log_since($offset))
	{
		next
		  unless $line =~
		  /^\S+ (\d\d):(\d\d):(\d\d\.\d+) .*dedup sweep: deleted (\d+) rows of consumer "\Q$consumer\E" in transaction (\d+), up to (.*)$/;
		push @batches,
		  { at => $1 * 3600 + $2 * 60 + $3, n => $4, xid => $5, upto => $6 };
	}
	return grep { $_->{n} > 0 } @batches;
}
$node->set_config('dedup.sweep_batch_size', '100', '100');
ok( $node->sweep_until('db1', 'done'),
	'db1: a sweep completed (settle: sweepers from now on have batch size 100)'
);
my $total_before =
  $node->safe_psql('db1', 'SELECT total_rows_deleted FROM dedup_sweeper');
my $batch_offset = -s $node->logfile;
$node->safe_psql(
	'db1', qq{
INSERT INTO processed_messages
SELECT 'batch', 'm' || i, $L - interval '2 hours' - i * interval '1 second'
  FROM generate_series(1, 1050) i
UNION ALL VALUES ('batch', 'latest', $L), ('batch', 'recent', $L - interval '30 minutes')}
);
ok($node->sweep_until('db1', 'done'),
	'db1: a sweep completed (1050 expired rows)');
is($node->count_of('db1', 'batch'),
	'2', 'all 1050 expired rows deleted, the 2 in the window kept');
my @batches = batches_logged($batch_offset, 'batch');
my %xids    = map { $_->{xid} => 1 } @batches;
my @sizes   = map { $_->{n} } @batches;
my $sum     = 0;
$sum += $_ for @sizes;
is( join('|', scalar(@batches), scalar(keys %xids), $sum, join(',', @sizes)),
	'11|11|1050|100,100,100,100,100,100,100,100,100,100,50',
	'deleted in 11 batches in 11 transactions: ten of 100 rows and one of 50'
);
is( scalar(
		grep { $batches[$_]{upto} lt $batches[ $_ - 1 ]{upto} }
		  1 .. $#batches),
	0,
	'oldest first: each batch ends at a later claim than the one before');
is( $node->safe_psql('db1', 'SELECT total_rows_deleted FROM dedup_sweeper'),
	$total_before + 1050,
	'view: total_rows_deleted grew by 1050');

# the pause between batches: 5 batches of 100 with 300 ms between them
$node->set_config('dedup.sweep_batch_delay', '300ms', '300ms');
$batch_offset = -s $node->logfile;

# A pause lasts 300 ms, less than a busy machine may take to start a psql:
# watched from inside the server, from the wake-up on, until the sweep ends.
my ($paced_since, $pause_seen) = $node->watch_sweeper_wait(
	'db1', 'DedupSweepBatchDelay', qq{
INSERT INTO processed_messages
SELECT 'paced', 'm' || i, $L - interval '2 hours' - i * interval '1 second'
  FROM generate_series(1, 500) i
UNION ALL VALUES ('paced', 'latest', $L)});
is($pause_seen, 't',
	'the sweeper pauses between batches in pg_stat_activity (DedupSweepBatchDelay)'
);
is($node->wait_sweep_after('db1', $paced_since),
	'done', 'db1: a sweep completed (500 expired rows, paced)');
is($node->count_of('db1', 'paced'),
	'1', 'paced sweep: the 500 expired rows deleted');
my @paced  = batches_logged($batch_offset, 'paced');
my @pauses = map { $paced[$_]{at} - $paced[ $_ - 1 ]{at} } 1 .. $#paced;
is( join(',', map { $_->{n} } @paced),
	'100,100,100,100,100',
	'paced sweep: five batches of 100');
is( scalar(grep { $_ < 0.299 } @pauses), 0,    # the log says when to the ms
	'paced sweep: at least 300 ms between two batches (pauses: '
	  . join(", ", map { sprintf "%.3f s", $_ } @pauses) . ')');
$node->set_config('dedup.sweep_batch_delay', undef, '0');
$node->set_config('dedup.sweep_batch_size',  undef, '1000');

###############################################################################
note('2. dedup_sweep()');

is( $node->safe_psql(
		'db1', qq{
BEGIN;
INSERT INTO processed_messages
SELECT 'x', 'm' || i, $L - i * interval '1 hour' FROM generate_series(0, 4) i
UNION ALL
SELECT 'y', 'm' || i, $L - i * interval '1 hour' FROM generate_series(0, 5) i;
SELECT dedup_sweep('x');
SELECT count(*) FROM processed_messages WHERE consumer_name = 'y';
SELECT dedup_sweep();
SELECT dedup_sweep();
COMMIT;
}),
	"3\n6\n4\n0",
	"dedup_sweep('x') deletes x's 3 expired rows only, dedup_sweep() then y's 4, then none"
);
is($node->consumer_counts('db1', "consumer_name IN ('x', 'y')"),
	'x=2,y=2', 'after dedup_sweep: x and y keep their window');

$node->safe_psql('postgres',
	'CREATE ROLE plain LOGIN; CREATE ROLE maint LOGIN');
$node->safe_psql('db1',
	'GRANT EXECUTE ON FUNCTION dedup_sweep(text) TO maint');
$node->psql_fails_like(
	'db1',
	'SELECT dedup_sweep()',
	qr/ERROR:  42501: permission denied for function dedup_sweep/,
	'a plain role cannot run dedup_sweep(), SQLSTATE 42501',
	extra_params => [ '-U', 'plain' ]);
$node->psql_fails_like(
	'db1',
	q{SELECT dedup_sweep('x')},
	qr/ERROR:  42501: permission denied for function dedup_sweep/,
	"... nor dedup_sweep('x')",
	extra_params => [ '-U', 'plain' ]);
$node->safe_psql(
	'db1', qq{
INSERT INTO processed_messages
SELECT 'x', 'old' || i, $L - interval '1 day' - i * interval '1 hour' FROM generate_series(0, 2) i}
);

# the background sweeper may get there first: count both
my $by_maint = $node->safe_psql(
	'db1',
	'SELECT dedup_sweep()',
	extra_params => [ '-U', 'maint' ]);
ok( $by_maint =~ /^[0-3]$/ && $node->count_of('db1', 'x') eq '2',
	"a role granted EXECUTE (and no table privilege) runs dedup_sweep() (deleted $by_maint)"
);

###############################################################################
note('3. claims while sweeps delete a 2-second window');

my $window = 2;
$node->safe_psql(
	'db1', qq{
SELECT dedup_set_retention('busy', '$window seconds');
CREATE TABLE applied (consumer text NOT NULL, key int NOT NULL, at timestamptz NOT NULL);
});
my $tmpdir = PostgreSQL::Test::Utils::tempdir;
my $script = "$tmpdir/claim.sql";
append_to_file(
	$script, q{\set k random(1, 2000)
BEGIN;
SELECT dedup_claim('busy', 'k' || :k) AS claimed \gset
\if :claimed
INSERT INTO applied VALUES ('busy', :k, now());
\endif
END;
});
$total_before =
  $node->safe_psql('db1', 'SELECT total_rows_deleted FROM dedup_sweeper');
$offset = -s $node->logfile;

# pgbench in rounds of 5 s, until the run has seen 7 sweeps and 5000
# claims: the machine decides how long that takes, not what it shows
my @cmd = (
	'pgbench', '-n', '-h', $node->host, '-p', $node->port,
	'-c', 6, '-j', 3, '-T', 5, '-R', 2000, '-f', $script, 'db1');
my ($rounds, $processed, $ok, $failed, $stderr) = (0, 0, 1, 0, '');
my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
while ($ok
	&& time < $deadline
	&& ($node->sweeper_starts($offset, 'db1') < 7 || $processed <= 5000))
{
	my ($out, $err) = ('', '');
	$ok = IPC::Run::run(\@cmd, '>', \$out, '2>', \$err);
	note($out);
	$rounds++;
	$failed++ unless $out =~ /number of failed transactions: 0 \(/;
	$stderr .= $err;
	$processed += $1
	  if $out =~ /number of transactions actually processed: (\d+)/;
}
ok($ok, "pgbench exited successfully ($rounds rounds)") or diag($stderr);
is($failed, 0, 'pgbench: no failed transaction');
unlike($stderr, qr/error|abort/i, 'pgbench: no client error')
  or diag($stderr);
ok($processed > 5000, "pgbench ran $processed claims");

my $run_log       = $node->log_since($offset);
my $sweeps_during = $node->sweeper_starts($offset, 'db1');
ok($sweeps_during >= 7,
	"db1 was swept during the run ($sweeps_during sweeps)");
unlike($run_log, qr/ERROR|FATAL/, 'no error in the log during the run');
ok( $node->sweep_until('db1', 'done'),
	'db1: a sweep completed (after pgbench)');

my ($applied, $keys, $in_window) = split /\|/, $node->safe_psql(
	'db1', qq{
SELECT count(*), count(DISTINCT key),
	   count(*) FILTER (WHERE at >= (SELECT max(at) FROM applied) - interval '$window s')
  FROM applied});
note("$applied applications of $keys keys, $in_window in the last window");
ok( $applied > $keys,
	'keys were claimed again after their claim expired: the sweeper deleted claims during the run'
);
ok($in_window > 100, 'many claims are in the final window');
ok( $node->safe_psql('db1', 'SELECT total_rows_deleted FROM dedup_sweeper') -
	  $total_before > 0,
	'view: rows were deleted during the run');
is( $node->safe_psql(
		'db1', q{
SELECT (SELECT max(at) FROM applied)
	 = (SELECT max(processed_at) FROM processed_messages WHERE consumer_name = 'busy')}
	),
	't',
	'the latest application is the latest claim');
is( $node->safe_psql(
		'db1', qq{
SELECT count(*) FROM applied a
 WHERE a.at >= (SELECT max(at) FROM applied) - interval '$window s'
   AND NOT EXISTS (SELECT FROM processed_messages p
					WHERE p.consumer_name = 'busy' AND p.message_id = 'k' || a.key
					  AND p.processed_at = a.at)}),
	'0',
	'every claim applied within the window of the latest claim is still recorded'
);
is( $node->safe_psql(
		'db1', q{
SELECT count(*) FROM processed_messages p
 WHERE p.consumer_name = 'busy'
   AND NOT EXISTS (SELECT FROM applied a
					WHERE 'k' || a.key = p.message_id AND a.at = p.processed_at)}),
	'0',
	'every recorded claim was applied (no claim without its effect)');
is( $node->safe_psql(
		'db1', qq{
SELECT count(*) FROM processed_messages
 WHERE consumer_name = 'busy'
   AND processed_at < (SELECT max(processed_at) FROM processed_messages
						WHERE consumer_name = 'busy') - interval '$window s'}),
	'0',
	'no expired busy claim is left after the last sweep');
is( $node->safe_psql(
		'db1', q{
SELECT count(*) FROM (
	SELECT at - lag(at) OVER (PARTITION BY key ORDER BY at) AS gap FROM applied) s
 WHERE gap < interval '1.5 s'}),
	'0',
	'no key was applied twice within 1.5 s (window 2 s): a claim is only swept after expiring'
);

###############################################################################
note('4. rows locked by another transaction: skipped, not waited for');

# Claims never lock the rows a sweep deletes, but anyone may lock them with
# SELECT ... FOR UPDATE.  The sweep neither waits for such a lock nor calls it
# an error: the sweep ends 'partial' and the next one deletes the rows.
# (kept forever until the row is locked, so that no sweep deletes it before)
$node->safe_psql('db1', q{SELECT dedup_keep_forever('locked')});
$node->add_expired('db1', 'locked', 4);
my $locker = $node->background_psql('db1');
is( $locker->query_safe(
		q{BEGIN; SELECT message_id FROM processed_messages
  WHERE consumer_name = 'locked' AND message_id = 'm3' FOR UPDATE}),
	'm3',
	'another session locks an expired claim');
$node->safe_psql('db1', q{SELECT dedup_reset_retention('locked')});
$offset = -s $node->logfile;
my $locked_since = $node->safe_psql('db1', 'SELECT clock_timestamp()');
ok($node->sweep_until('db1', 'partial'),
	'a sweep that meets a locked row ends partial');
is( $node->safe_psql(
		'db1',
		q{SELECT last_error_at IS NULL OR last_error_at < '}
		  . $locked_since
		  . q{' FROM dedup_sweeper}),
	't',
	'... records no error');
unlike($node->log_since($offset), qr/ERROR|WARNING/, '... and logs none');
is( $node->safe_psql(
		'db1',
		q{SELECT dedup_claim('meanwhile', 'k') AND NOT dedup_claim('meanwhile', 'k')}
	),
	't',
	'claims go on meanwhile');
$locker->query_safe('COMMIT');
$locker->quit;
ok($node->sweep_until('db1', 'done'),
	'db1: a sweep completed (after the lock is released)');
is($node->consumer_counts('db1', q{consumer_name = 'locked'}),
	'locked=2', 'the next sweep deletes the rows once they are free');

###############################################################################
note('5. a sweep yields to claims while they run, and only then');

# Each sweep's DEBUG1 summary says how many of its pauses yielded to claims;
# the pauses of all the sweeps since offset, and how many batches they had
sub yields_logged
{
	my ($offset) = @_;
	my ($batches, $yields) = (0, 0);
	for my $line (split /\n/, $node->log_since($offset))
	{
		next
		  unless $line =~
		  /dedup sweep: (\d+) batches, (\d+) pauses yielding to claims for \d+ ms in all/;
		$batches += $1;
		$yields  += $2;
	}
	return ($batches, $yields);
}

# A backlog of 2000 expired rows of consumer, 40 batches of 50, and of 200
# sent outbox messages, 4 batches, swept while claims run (pgbench) or not;
# returns the batches and the yielding pauses of the sweeps until it is
# gone.  While claims run, each batch of the outbox step is held until a
# claim has run during it (hold_outbox_batches): a pause that yields must
# follow, whatever the machine's scheduler did (the claims' batches, which
# run no SQL and so cannot be held, may or may not overlap a claim).
my $claims_script = "$tmpdir/claim_new.sql";
append_to_file(
	$claims_script, q{\set k random(1, 1000000000)
SELECT dedup_claim('yield-claims', 'k' || :k);
});

sub sweep_backlog
{
	my ($consumer, $with_claims) = @_;
	my $pgbench;
	my ($out, $err) = ('', '');
	my $offset = -s $node->logfile;
	if ($with_claims)
	{
		my $before = $node->count_of('db1', 'yield-claims');
		$pgbench = IPC::Run::start(
			[
				'pgbench', '-n', '-h', $node->host, '-p', $node->port,
				'-c', 2, '-j', 2, '-T', 300, '-f', $claims_script, 'db1'
			],
			'>',
			\$out,
			'2>',
			\$err);
		ok( wait_until(
				sub { $node->count_of('db1', 'yield-claims') > $before + 10 }
			),
			"$consumer: claims are running");
		$node->hold_outbox_batches('db1', 'yield-claims');
	}
	$node->safe_psql(
		'db1', qq{
INSERT INTO processed_messages
SELECT '$consumer', 'm' || i, $L - interval '2 hours' - i * interval '1 second'
  FROM generate_series(1, 2000) i
UNION ALL VALUES ('$consumer', 'latest', $L);
INSERT INTO dedup_outbox (message_id, destination, payload, sent_at)
SELECT '$consumer ' || i, '$consumer', '', now() - interval '1 day'
  FROM generate_series(1, 200) i});
	ok( wait_until(
			sub {
				$node->count_of('db1', $consumer) eq '1'
				  && $node->safe_psql(
					'db1',
					"SELECT count(*) FROM dedup_outbox WHERE destination = '$consumer'"
				  ) eq '0';
			}),
		"$consumer: the 2000 expired rows and the 200 sent messages are swept"
	);

	# a sweep's summary is logged once it has ended: the one that swept the
	# last of the backlog has, when one that started after it ends
	my $swept = $node->safe_psql('db1', 'SELECT clock_timestamp()');
	ok(defined $node->wait_sweep_after('db1', $swept),
		"$consumer: a sweep ended since");
	my ($batches, $yields) = yields_logged($offset);
	if ($with_claims)
	{
		$node->release_outbox_batches('db1');
		$pgbench->kill_kill;
		unlike($err, qr/error|abort/i, "$consumer: no claim failed")
		  or diag($err);
	}
	return ($batches, $yields);
}

$node->set_config('dedup.sweep_batch_size', '50', '50');
my ($batches, $yields) = sweep_backlog('yield-idle', 0);
ok($batches >= 40, "idle: the backlog took $batches batches");
is($yields, 0, 'idle: no pause between them (nothing to yield to)');

($batches, $yields) = sweep_backlog('yield-busy', 1);
ok( $yields > 0,
	"claims running: $yields of $batches batches were followed by a pause that yields to them"
);

$node->set_config('dedup.sweep_busy_share', '100', '100');
($batches, $yields) = sweep_backlog('yield-never', 1);
ok($batches >= 40,
	"dedup.sweep_busy_share = 100: the backlog took $batches batches");
is($yields, 0, 'dedup.sweep_busy_share = 100: no pause while claims run');
$node->set_config('dedup.sweep_busy_share', undef, '10');
$node->set_config('dedup.sweep_batch_size', undef, '1000');

$node->stop;
done_testing();
