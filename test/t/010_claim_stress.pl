#
# 010_claim_stress.pl: dedup_claim under concurrent and repeated delivery.
#
# A queue of deliveries holds each of 1200 messages exactly three times.
# Eight pgbench clients pop deliveries with FOR UPDATE SKIP LOCKED and, in the
# transaction that pops one, claim the message and apply its effect (credit
# an account, record it in "applied") only when the claim returns true.  The
# three deliveries of a message are placed so that some arrive together (popped
# by different clients at the same moment) and some arrive after the first one
# has committed.  One attempt in seven is rolled back on purpose *after* the
# claim and the work (SQLSTATE 40001), and pgbench retries it: a claim must
# vanish with its transaction, or the retry would skip the work for good.
#
# The run is repeated under READ COMMITTED, REPEATABLE READ and SERIALIZABLE
# (set with ALTER DATABASE ... SET default_transaction_isolation; the
# SERIALIZABLE run uses two thirds of them), each with its own consumer name.
# DEDUP_STRESS_MESSAGES=N (a multiple of 24, at most 3000) runs a longer
# stress by hand.
# After each run:
#   - pgbench processed every transaction and none failed;
#   - the queue is empty (every delivery was consumed exactly once);
#   - each message was applied exactly once, every balance is the sum of its
#     messages' amounts, and the other two deliveries of each were seen as
#     duplicates;
#   - processed_messages holds exactly the applied messages for the consumer:
#     no claim without its effect, no effect without its claim.
#
# The library is not preloaded: claims must work when it is loaded on demand.
#
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupNode;
use PostgreSQL::Test::Utils;
use Test::More;

my $n_messages     = $ENV{DEDUP_STRESS_MESSAGES} // 1200;
my $n_serializable = 2 * $n_messages / 3;
die "DEDUP_STRESS_MESSAGES must be a multiple of 24, at most 3000"
  if $n_messages % 24 || $n_messages > 3000;
my $n_accounts = 100;
my $clients    = 8;

# 27000 transactions: keep the log to what the checks below need
my $node = DedupNode->create(
	'stress',
	preload => 0,
	conf    => {
		max_connections         => 40,
		log_statement           => 'none',
		log_min_error_statement => 'panic',
		log_lock_waits          => 'on',
		deadlock_timeout        => '1ms',
	});

my $db = 'stress';
$node->safe_psql('postgres', "CREATE DATABASE $db");

# --- the library is not preloaded, and is loaded on demand by a claim -------

is($node->safe_psql($db, 'SHOW shared_preload_libraries'),
	'', 'dedup is not in shared_preload_libraries');

$node->safe_psql($db, 'CREATE EXTENSION dedup');

# _PG_init reserves the "dedup" GUC prefix.  A session that has not called
# dedup_claim yet can still set a dedup.* placeholder, so the library is not
# loaded; after its first claim, in the same session, it can no longer.
my ($ret, $out, $err) = $node->psql(
	$db, q{
SET dedup.probe_before = 'x';
SELECT dedup_claim('probe', 'probe-1');
SET dedup.probe_after = 'y';
}, on_error_stop => 1);
is($out, 't',
	'first claim in a fresh backend, without preloading, returns true');
like(
	$err,
	qr/invalid configuration parameter name "dedup\.probe_after"/,
	'the library was loaded on demand by that claim (dedup prefix reserved only afterwards)'
);
like(
	$err,
	qr/WARNING:  invalid configuration parameter name "dedup\.probe_before", removing it/,
	'the placeholder set before the first claim existed, so the library was not loaded yet'
);
unlike($err, qr/ERROR:.*probe_before/,
	'setting the placeholder before the first claim succeeded');
is($node->safe_psql($db, q{SELECT dedup_claim('probe', 'probe-1')}),
	'f',
	'the on-demand claim was committed: claiming it again returns false');

# --- business schema ------------------------------------------------------------

$node->safe_psql(
	$db, qq{
CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL);
INSERT INTO accounts SELECT g, 0 FROM generate_series(1, $n_accounts) g;

CREATE TABLE messages (id int PRIMARY KEY, account int NOT NULL, amount int NOT NULL);
INSERT INTO messages
SELECT m, 1 + (m * 13) % $n_accounts, 1 + (m * 37) % 1000
  FROM generate_series(1, $n_messages) m;

-- the delivery queue; "pos" is the order in which deliveries are handed out
CREATE TABLE deliveries (pos int PRIMARY KEY, message_id int NOT NULL);

-- effects, written in the claiming transaction; deliberately no unique key,
-- so that a double application shows up as a row count, not as an error
CREATE TABLE applied (consumer text NOT NULL, message_id int NOT NULL,
	isolation text NOT NULL, done_at timestamptz NOT NULL);
CREATE TABLE duplicates (consumer text NOT NULL, message_id int NOT NULL,
	started_at timestamptz NOT NULL);

-- roll back one attempt in seven, after the claim and the work, with an
-- error pgbench retries; nextval() is not rolled back, so a retry draws anew
CREATE SEQUENCE attempts;
CREATE FUNCTION inject_failure() RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
	IF nextval('attempts') % 7 = 0 THEN
		RAISE EXCEPTION 'injected failure after the claim'
			USING ERRCODE = 'serialization_failure';
	END IF;
END \$\$;
});

# Refill the queue with three deliveries of each of messages 1..$n:
#   m % 3 = 0: all three adjacent: three clients pop them at the same time;
#   m % 3 = 1: two adjacent, the third one in a second, shuffled pass;
#   m % 3 = 2: one; another ~40 messages later in the first pass; the third
#              one in the second pass.
# 3001 is prime, so (m * 7919) % 3001 shuffles 1..3000 without collisions.
sub fill_queue
{
	my ($n) = @_;
	return qq{
TRUNCATE deliveries;
INSERT INTO deliveries (pos, message_id)
SELECT CASE
		 WHEN m % 3 = 0 THEN m * 10 + k
		 WHEN m % 3 = 1 AND k < 3 THEN m * 10 + k
		 WHEN m % 3 = 2 AND k = 1 THEN m * 10 + 1
		 WHEN m % 3 = 2 AND k = 2 THEN (m + 40) * 10 + 5
		 ELSE 1000000 + ((m * 7919) % 3001) * 10 + k
	   END, m
  FROM generate_series(1, $n) m, generate_series(1, 3) k;
};
}

# Whatever an earlier run left in the balances, start from zero.
my $reset_balances = 'UPDATE accounts SET balance = 0;';

my $tmpdir = PostgreSQL::Test::Utils::tempdir;

sub run_stress
{
	my ($isolation, $consumer, $n_messages) = @_;
	my $n_deliveries = 3 * $n_messages;
	die "$n_deliveries deliveries do not split evenly over $clients clients"
	  if $n_deliveries % $clients;

	$node->safe_psql($db, fill_queue($n_messages) . $reset_balances);
	is( $node->safe_psql(
			$db,
			'SELECT count(*), count(DISTINCT message_id) FROM deliveries'),
		"$n_deliveries|$n_messages",
		"$isolation: queue holds three deliveries of each message");

	$node->safe_psql($db,
		"ALTER DATABASE $db SET default_transaction_isolation = '$isolation'"
	);

	# One transaction per delivery.  The pop, the claim, the effect and the
	# (sometimes failing) end all belong to the same transaction, so a retry
	# pops the same or another delivery again and claims again.
	my $script = "$tmpdir/consume_$consumer.sql";
	PostgreSQL::Test::Utils::append_to_file(
		$script, qq{BEGIN;
DELETE FROM deliveries WHERE pos = (SELECT pos FROM deliveries ORDER BY pos LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING message_id AS mid \\gset
SELECT dedup_claim('$consumer', 'msg-' || :mid) AS claimed \\gset
SELECT pg_sleep(0.001);
\\if :claimed
UPDATE accounts a SET balance = a.balance + m.amount FROM messages m WHERE m.id = :mid AND a.id = m.account;
INSERT INTO applied VALUES ('$consumer', :mid, current_setting('transaction_isolation'), clock_timestamp());
\\else
INSERT INTO duplicates VALUES ('$consumer', :mid, now());
\\endif
SELECT inject_failure();
END;
});

	my $log_offset = -s $node->logfile;
	my $attempts_before =
	  $node->safe_psql($db, 'SELECT last_value FROM attempts');

	# every delivery is one transaction: -t pops the queue empty
	my @cmd = (
		'pgbench',           '-n',
		'-h',                $node->host,
		'-p',                $node->port,
		'-c',                $clients,
		'-j',                2,
		'-t',                $n_deliveries / $clients,
		'--max-tries=10000', '-f',
		$script,             $db);
	my ($stdout, $stderr);
	my $t0 = time;
	my $ok = IPC::Run::run(\@cmd, '>', \$stdout, '2>', \$stderr,
		IPC::Run::timeout(2 * $PostgreSQL::Test::Utils::timeout_default));
	note("$isolation: pgbench took " . (time - $t0) . " s");
	note($stdout);
	ok($ok, "$isolation: pgbench exited successfully")
	  or diag("pgbench stderr:\n$stderr");
	like(
		$stdout,
		qr/number of transactions actually processed: $n_deliveries\/$n_deliveries\b/,
		"$isolation: pgbench processed all $n_deliveries deliveries");
	like(
		$stdout,
		qr/number of failed transactions: 0 \(/,
		"$isolation: pgbench reported no failed transactions");
	unlike($stderr, qr/aborted|error/i, "$isolation: no client aborted")
	  or diag($stderr);

	# the injected failures really happened, and were all retried
	my ($retries) = $stdout =~ /total number of retries: (\d+)/;
	my $injected = $node->safe_psql($db,
		"SELECT last_value / 7 - $attempts_before / 7 FROM attempts");
	ok( defined $retries && $injected > 100 && $retries >= $injected,
		"$isolation: $injected attempts were rolled back after their claim and retried ("
		  . ($retries // 'no')
		  . " retries in all)");

	$node->safe_psql($db,
		"ALTER DATABASE $db RESET default_transaction_isolation");

	is($node->safe_psql($db, 'SELECT count(*) FROM deliveries'),
		'0', "$isolation: every delivery was consumed");

	is( $node->safe_psql(
			$db, qq{
SELECT count(*), count(DISTINCT message_id), min(isolation), max(isolation)
  FROM applied WHERE consumer = '$consumer'}),
		"$n_messages|$n_messages|$isolation|$isolation",
		"$isolation: each message applied exactly once, all under $isolation"
	);

	is( $node->safe_psql(
			$db, qq{
SELECT count(*), count(DISTINCT message_id)
  FROM duplicates WHERE consumer = '$consumer'}),
		(2 * $n_messages) . "|$n_messages",
		"$isolation: the other two deliveries of every message were skipped as duplicates"
	);

	is( $node->safe_psql(
			$db, qq{
SELECT count(*)
  FROM accounts a
  LEFT JOIN (SELECT account, sum(amount) AS total FROM messages
			  WHERE id <= $n_messages GROUP BY account) e
	ON e.account = a.id
 WHERE a.balance <> coalesce(e.total, 0)}),
		'0',
		"$isolation: every balance is the sum of its messages' amounts");
	is( $node->safe_psql(
			$db,
			"SELECT (SELECT sum(balance) FROM accounts) = (SELECT sum(amount) FROM messages WHERE id <= $n_messages)"
		),
		't',
		"$isolation: total balance equals one application of every message");

	# claims and effects match one to one
	is( $node->safe_psql(
			$db, qq{
SELECT count(*) FROM processed_messages WHERE consumer_name = '$consumer'}),
		$n_messages,
		"$isolation: one claim per distinct message");
	is( $node->safe_psql(
			$db, qq{
SELECT count(*)
  FROM (SELECT message_id FROM processed_messages
		 WHERE consumer_name = '$consumer') p
  FULL JOIN (SELECT 'msg-' || message_id AS message_id FROM applied
			  WHERE consumer = '$consumer') a
	USING (message_id)
 WHERE p.message_id IS NULL OR a.message_id IS NULL}),
		'0',
		"$isolation: no claim without its effect and no effect without its claim"
	);

	# Deliveries of one message did overlap: duplicates claimed while the
	# first delivery was in flight waited on its claim, and the server log
	# shows lock waits on processed_messages' unique index.
	my $log         = slurp_file($node->logfile, $log_offset);
	my $claim_waits = () = $log =~
	  /still waiting for ShareLock on transaction \d+.*\n(?:.*\n)?.*CONTEXT:\s+while inserting index tuple \(\d+,\d+\) in relation "processed_messages"/g;
	note(
		"$isolation: $claim_waits logged waits of a claim on a concurrent claim"
	);
	ok( $claim_waits > 0,
		"$isolation: concurrent deliveries of a message waited on each other's claim"
	);

	return;
}

# SERIALIZABLE retries far more often (predicate locks on the queue and on
# processed_messages' index pages): fewer messages keep its run short.
run_stress('read committed',  'stress-rc',  $n_messages);
run_stress('repeatable read', 'stress-rr',  $n_messages);
run_stress('serializable',    'stress-ser', $n_serializable);

# Runs did not disturb each other's claims: consumers are independent.
is( $node->safe_psql(
		$db, q{
SELECT string_agg(consumer_name || '=' || n, ',' ORDER BY consumer_name)
  FROM (SELECT consumer_name, count(*) AS n FROM processed_messages
		 GROUP BY consumer_name) s}),
	"probe=1,stress-rc=$n_messages,stress-rr=$n_messages,stress-ser=$n_serializable",
	'each consumer kept exactly its own claims');

$node->stop;
done_testing();
