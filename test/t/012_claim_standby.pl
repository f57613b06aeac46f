#
# 012_claim_standby.pl: no claim where a claim cannot be recorded.
#
# A claim that cannot be written must fail, with SQLSTATE 25006
# (read_only_sql_transaction), rather than answer true or false:
#   - on a hot standby, during recovery;
#   - on the primary, in a read-only transaction.
# The claims replicated from the primary are visible on the standby (and in
# its storage views), and a failed claim leaves nothing behind.
#
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupNode;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = DedupNode->create(
	'primary',
	preload => 0,
	init    => { allows_streaming => 1 });
$primary->safe_psql(
	'postgres', q{
CREATE EXTENSION dedup;
SELECT dedup_claim('c', 'before-backup');
});

$primary->backup('bkp');
my $standby = DedupNode->new('standby');
$standby->init_from_backup($primary, 'bkp', has_streaming => 1);
$standby->start;

$primary->safe_psql('postgres', q{SELECT dedup_claim('c', 'after-backup')});
$primary->wait_for_catchup($standby);

is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'),
	't', 'standby is in recovery');
is( $standby->safe_psql(
		'postgres',
		q{SELECT string_agg(message_id, ',' ORDER BY message_id) FROM processed_messages WHERE consumer_name = 'c'}
	),
	'after-backup,before-backup',
	'claims made on the primary are replicated to the standby');

# a claim must fail with SQLSTATE 25006, neither true nor false
sub claim_fails
{
	my ($node, $sql, $name) = @_;
	return $node->psql_fails_like(
		'postgres',
		$sql,
		qr/ERROR:  25006: cannot execute dedup_claim\(\) (?:during recovery|in a read-only transaction)/,
		$name);
}

# --- on the standby ---------------------------------------------------------------

my $err =
  claim_fails($standby, q{SELECT dedup_claim('c', 'k')}, 'standby, new key');
like(
	$err,
	qr/cannot execute dedup_claim\(\) during recovery/,
	'standby, new key: the message says why');

# looking without claiming works on a standby
is( $standby->safe_psql(
		'postgres', q{
SELECT (SELECT seen FROM dedup_seen('c', 'after-backup')),
	   (SELECT seen FROM dedup_seen('c', 'never-claimed'))}),
	't|f',
	'standby: dedup_seen answers from the replicated records');

# and so do the storage views
is( $standby->safe_psql(
		'postgres', q{
SELECT s.consumers, c.consumer,
	   c.latest_record_at = (SELECT max(processed_at) FROM processed_messages)
  FROM dedup_storage s, dedup_stats c}),
	'1|c|t',
	'standby: the storage views answer from the replicated records');
my ($forget_ret, $forget_out, $forget_err) =
  $standby->psql('postgres', q{SELECT dedup_forget('c', 'after-backup')});
like(
	$forget_err,
	qr/cannot execute dedup_forget\(\) during recovery|read-only/,
	'standby: dedup_forget is refused');

# a key the standby already knows about is no exception: a claim on a
# standby must not be mistaken for a duplicate check
$err = claim_fails(
	$standby,
	q{SELECT dedup_claim('c', 'before-backup')},
	'standby, replicated key');
like(
	$err,
	qr/cannot execute dedup_claim\(\) during recovery/,
	'standby, replicated key: the message says why');

# --- on the primary, read-only transactions ---------------------------------------

$err = claim_fails(
	$primary, q{SET default_transaction_read_only = on;
SELECT dedup_claim('c', 'ro-1');},
	'primary, default_transaction_read_only');
like(
	$err,
	qr/cannot execute dedup_claim\(\) in a read-only transaction/,
	'primary, default_transaction_read_only: the message says why');

$err = claim_fails(
	$primary, q{BEGIN TRANSACTION READ ONLY;
SELECT dedup_claim('c', 'ro-2');},
	'primary, BEGIN READ ONLY');

# a read-only transaction must not answer "duplicate" for a known key either
$err = claim_fails(
	$primary, q{BEGIN TRANSACTION READ ONLY;
SELECT dedup_claim('c', 'after-backup');},
	'primary, read-only, known key');

is( $primary->safe_psql(
		'postgres',
		q{SELECT count(*) FROM processed_messages WHERE message_id IN ('ro-1', 'ro-2', 'k')}
	),
	'0',
	'primary: the refused claims left no row');

# the refused keys are still first deliveries once writing is allowed again,
# on the primary and, after replay, not on the standby
is( $primary->safe_psql(
		'postgres', q{SELECT dedup_claim('c', 'ro-1'), dedup_claim('c', 'k')}
	),
	't|t',
	'primary: refused keys are first deliveries in a read-write transaction');
$primary->wait_for_catchup($standby);
is( $standby->safe_psql(
		'postgres',
		q{SELECT count(*) FROM processed_messages WHERE consumer_name = 'c'}),
	'4',
	'standby: it sees exactly the four claims committed on the primary');

# The standby still refuses after all that, and a promoted standby accepts
# claims, seeing the primary's claims as duplicates.
claim_fails($standby, q{SELECT dedup_claim('c', 'k2')}, 'standby, later');
$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'standby did not leave recovery';
is( $standby->safe_psql(
		'postgres', q{SELECT dedup_claim('c', 'k'), dedup_claim('c', 'k2')}),
	'f|t',
	'promoted standby: a replicated claim is a duplicate, a new key is claimed'
);

$standby->stop;
$primary->stop;
done_testing();
