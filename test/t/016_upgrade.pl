#
# 016_upgrade.pl: ALTER EXTENSION dedup UPDATE from 1.0 to 1.1, 1.2 and 1.3 keeps
# every record, window, counter and claimant mapping, and leaves each version working.
#
# A database gets dedup 1.0 (with the current library: 1.0's SQL objects must
# keep working with it), claims, duplicates, windows and a consumer kept
# forever.  After ALTER EXTENSION dedup UPDATE:
#   - processed_messages holds exactly the same rows, dedup_retention the
#     same windows, dedup_stats the same counters;
#   - the old claims are still duplicates, new ones are claimed, and the 1.1
#     functions work (batch, try, fingerprint, claimants);
#   - the claim runs as its caller, the retention functions are bound at
#     creation;
#   - the sweeper sweeps the upgraded database.
#
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupNode;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = DedupNode->create('upgrade', sweeps => 'every second');

$node->safe_psql(
	'postgres', q{
CREATE EXTENSION dedup VERSION '1.0';
SELECT dedup_claim('orders', 'o-' || i) FROM generate_series(1, 5) i;
SELECT dedup_claim('orders', 'o-1'), dedup_claim('orders', 'o-2');
SELECT dedup_set_retention('orders', '3 days');
SELECT dedup_keep_forever('audit');
SELECT dedup_claim('audit', 'a-1');
INSERT INTO processed_messages (consumer_name, message_id, processed_at)
VALUES ('audit', 'a-old', now() - interval '10 years');
});
is( $node->safe_psql(
		'postgres',
		q{SELECT extversion FROM pg_extension WHERE extname = 'dedup'}),
	'1.0',
	'installed as 1.0');
is($node->safe_psql('postgres', q{SELECT dedup_claim('orders', 'o-3')}),
	'f', '1.0 objects work with the current library');

my $rows_query = q{
SELECT string_agg(format('%s/%s/%s', consumer_name, message_id, processed_at), ' '
				  ORDER BY consumer_name, message_id)
  FROM processed_messages};
my $windows_query = q{
SELECT string_agg(format('%s=%s', consumer_name, coalesce(retention::text, 'forever')), ' '
				  ORDER BY consumer_name)
  FROM dedup_retention};
my $counters_query = q{
SELECT string_agg(format('%s:%s/%s', consumer, claims, duplicates), ' ' ORDER BY consumer)
  FROM dedup_stats WHERE claims IS NOT NULL};
my ($rows, $windows, $counters) =
  map { $node->safe_psql('postgres', $_) }
  ($rows_query, $windows_query, $counters_query);
is($counters, 'audit:1/0 orders:5/3', 'counters before the upgrade');

$node->safe_psql('postgres', q{ALTER EXTENSION dedup UPDATE TO '1.1'});
is( $node->safe_psql(
		'postgres',
		q{SELECT extversion FROM pg_extension WHERE extname = 'dedup'}),
	'1.1',
	'updated to 1.1');
is($node->safe_psql('postgres', $rows_query),
	$rows, 'every record kept, claim times included');
is($node->safe_psql('postgres', $windows_query),
	$windows, 'every window kept');
is($node->safe_psql('postgres', $counters_query),
	$counters, 'every counter kept');

is( $node->safe_psql(
		'postgres',
		q{SELECT dedup_claim('orders', 'o-1'), dedup_claim('orders', 'o-new')}
	),
	'f|t',
	'old claims are duplicates, new ones are claimed');
is( $node->safe_psql(
		'postgres',
		q{SELECT dedup_claim_many('orders', ARRAY['o-2', 'o-many'])}),
	'{f,t}',
	'batch claims');
is( $node->safe_psql(
		'postgres',
		q{SELECT dedup_try_claim('orders', 'o-3'), dedup_try_claim('orders', 'o-try')}
	),
	'duplicate|claimed',
	'try claims');
is( $node->safe_psql(
		'postgres',
		q{SELECT dedup_claim('orders', 'o-fp', '\x01'), dedup_claim('orders', 'o-fp', '\x01')}
	),
	't|f',
	'fingerprints on the upgraded table');
my ($ret, $out, $err) =
  $node->psql('postgres', q{SELECT dedup_claim('orders', 'o-fp', '\x02')});
like(
	$err,
	qr/different fingerprint/,
	'a reused id is refused after the upgrade');

is( $node->safe_psql(
		'postgres', q{
SELECT p.prosecdef, l.lanname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
 WHERE p.oid = 'dedup_claim(text, text)'::regprocedure}),
	'f|c',
	'dedup_claim runs as its caller');
is( $node->safe_psql(
		'postgres', q{
SELECT string_agg(format('%s:%s:%s', p.proname, l.lanname, p.prosqlbody IS NOT NULL), ' ' ORDER BY p.proname)
  FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
 WHERE p.proname IN ('dedup_set_retention', 'dedup_keep_forever', 'dedup_reset_retention')}
	),
	'dedup_keep_forever:sql:t dedup_reset_retention:sql:t dedup_set_retention:sql:t',
	'the retention functions are SQL bodies bound at creation');
is( $node->safe_psql(
		'postgres', q{SELECT dedup_set_retention('orders', '4 days') IS NULL}
	),
	't',
	'dedup_set_retention works after the upgrade');

# update_keeping($version): ALTER EXTENSION dedup UPDATE TO $version keeps
# every record, window and counter
sub update_keeping
{
	my ($version) = @_;
	my ($rows, $windows, $counters) =
	  map { $node->safe_psql('postgres', $_) }
	  ($rows_query, $windows_query, $counters_query);
	$node->safe_psql('postgres',
		qq{ALTER EXTENSION dedup UPDATE TO '$version'});
	is( $node->safe_psql(
			'postgres',
			q{SELECT extversion FROM pg_extension WHERE extname = 'dedup'}),
		$version,
		"updated to $version");
	is($node->safe_psql('postgres', $rows_query),
		$rows, "$version: every record kept");
	is($node->safe_psql('postgres', $windows_query),
		$windows, "$version: every window kept");
	is($node->safe_psql('postgres', $counters_query),
		$counters, "$version: every counter kept");
	return;
}

# and on to 1.2: everything kept again, the mapping's triggers replaced by
# ones that fire always
$node->safe_psql('postgres',
	q{SELECT dedup_allow_claimant('audit', 'pg_monitor')});
update_keeping('1.2');
is( $node->safe_psql(
		'postgres', q{
SELECT string_agg(format('%s:%s', tgname, tgenabled), ' ' ORDER BY tgname)
  FROM pg_trigger WHERE tgrelid = 'dedup_consumer_roles'::regclass}),
	'dedup_consumer_roles_changed:A dedup_consumer_roles_truncated:A',
	'1.2: the mapping tells every backend of a change, however it is written'
);
is( $node->safe_psql(
		'postgres',
		q{SELECT string_agg(claimant::text, ' ') FROM dedup_consumer_roles WHERE consumer_name = 'audit'}
	),
	'pg_monitor',
	'1.2: the mapping kept');
is( $node->safe_psql(
		'postgres',
		q{SELECT dedup_claim('orders', 'o-1.2'), dedup_claim('orders', 'o-1.2')}
	),
	't|f',
	'1.2: claims');

# and on to 1.3: everything kept again
update_keeping('1.3');
is( $node->safe_psql(
		'postgres',
		q{SELECT dedup_claim('orders', 'o-1.3'), dedup_claim('orders', 'o-1.3')}
	),
	't|f',
	'1.3: claims');

# the sweeper sweeps the upgraded database: 'orders' rows older than its
# window go, 'audit' (forever) keeps even its 10-year-old row
$node->safe_psql(
	'postgres',
	q{INSERT INTO processed_messages (consumer_name, message_id, processed_at)
	  VALUES ('orders', 'o-expired', now() - interval '5 days')});
is($node->sweep('postgres'),
	'done', 'a sweep of the upgraded database completes');
is( $node->safe_psql(
		'postgres', q{
SELECT (SELECT count(*) FROM processed_messages WHERE message_id = 'o-expired'),
	   (SELECT count(*) FROM processed_messages WHERE message_id = 'a-old')}),
	'0|1',
	'expired claim swept, the forever consumer kept');

$node->stop;
done_testing();
