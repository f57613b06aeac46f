#
# 011_claim_dump_restore.pl: claims survive pg_dump / pg_restore.
#
# processed_messages is registered with pg_extension_config_dump, so its rows
# are user data that pg_dump must carry: a database restored from a dump must
# still answer "duplicate" for every message claimed before the dump, and only
# for those.  Checked with a custom-format dump restored by pg_restore, a
# plain-format dump restored by psql, and an extension installed in a schema
# of its own (CREATE EXTENSION dedup SCHEMA dedup).
#
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupNode;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = DedupNode->create(
	'dump',
	preload => 0,
	init    => { extra         => [ '--encoding=UTF8', '--locale=C' ] },
	conf    => { log_statement => 'none' });

my $tmpdir = PostgreSQL::Test::Utils::tempdir;
my @conn   = ('-h', $node->host, '-p', $node->port);

# a role to check that privileges on dedup_claim travel with the dump
$node->safe_psql('postgres',
	'CREATE ROLE app LOGIN; CREATE ROLE outsider LOGIN');

# --- extension in public ---------------------------------------------------------

$node->safe_psql('postgres', 'CREATE DATABASE src');
$node->safe_psql(
	'src', q{
CREATE EXTENSION dedup;
GRANT EXECUTE ON FUNCTION dedup_claim(text, text) TO app;
SELECT dedup_claim('orders', 'o-1');
SELECT dedup_claim('orders', 'o-2');
SELECT dedup_claim('billing', 'o-1');
-- a quote, a backslash, a tab and non-ASCII text must round-trip through COPY
SELECT dedup_claim('orders', E'o-\'3\\\\\t\u00e9');
BEGIN;
SELECT dedup_claim('orders', 'rolled-back');
ROLLBACK;
SELECT dedup_set_retention('orders', '3 days');
SELECT dedup_allow_claimant('payments', 'app');
});

my $rows_query = q{
SELECT string_agg(format('%s/%s/%s', consumer_name, message_id, processed_at),
				  ' ' ORDER BY consumer_name, message_id)
  FROM processed_messages};
my $src_rows = $node->safe_psql('src', $rows_query);
is($node->safe_psql('src', 'SELECT count(*) FROM processed_messages'),
	'4', 'source database holds the four committed claims');

# Checks made on every restored copy of "src".
sub check_restored
{
	my ($db, $how) = @_;

	is( $node->safe_psql($db, $rows_query),
		$src_rows,
		"$how: processed_messages restored row for row, processed_at included"
	);

	is( $node->safe_psql(
			$db, q{
SELECT count(*) FROM pg_depend d JOIN pg_extension e ON d.refobjid = e.oid
 WHERE e.extname = 'dedup' AND d.deptype = 'e'
   AND d.classid = 'pg_class'::regclass
   AND d.objid = 'processed_messages'::regclass}),
		'1',
		"$how: processed_messages still belongs to the extension");
	is( $node->safe_psql(
			$db, q{
SELECT 'processed_messages'::regclass = ANY (extconfig)
  FROM pg_extension WHERE extname = 'dedup'}),
		't',
		"$how: processed_messages is still a configuration table, for the next dump"
	);

	# every claim made before the dump is a duplicate in the copy ...
	is( $node->safe_psql(
			$db, q{
SELECT dedup_claim('orders', 'o-1'), dedup_claim('orders', 'o-2'),
	   dedup_claim('billing', 'o-1'), dedup_claim('orders', E'o-\'3\\\\\t\u00e9')}
		),
		'f|f|f|f',
		"$how: claims made before the dump are duplicates after the restore");

	# ... and nothing else is
	is( $node->safe_psql(
			$db, q{
SELECT dedup_claim('orders', 'o-new'), dedup_claim('billing', 'o-2'),
	   dedup_claim('orders', 'rolled-back')}),
		't|t|t',
		"$how: new keys, other consumers' keys and rolled-back claims are first deliveries"
	);
	is($node->safe_psql($db, q{SELECT dedup_claim('orders', 'o-new')}),
		'f',
		"$how: a key claimed in the restored database is recorded there");

	# the configuration came along: windows, and claimants by role name
	is( $node->safe_psql(
			$db, q{
SELECT (SELECT string_agg(consumer_name || '=' || retention, ',') FROM dedup_retention),
	   (SELECT string_agg(consumer_name || '=' || claimant, ',') FROM dedup_consumer_roles)}
		),
		'orders=3 days|payments=app',
		"$how: retention windows and consumer claimants restored");
	is( $node->psql(
			$db,
			q{SELECT dedup_claim('payments', 'by-app')},
			connstr => $node->connstr($db) . ' user=app'),
		0,
		"$how: the mapped role claims for its consumer");

	# privileges came along: app may claim, PUBLIC (outsider) still may not
	is( $node->safe_psql(
			$db, q{
SELECT has_function_privilege('app', 'dedup_claim(text, text)', 'EXECUTE'),
	   has_function_privilege('outsider', 'dedup_claim(text, text)', 'EXECUTE'),
	   has_table_privilege('outsider', 'processed_messages', 'SELECT'),
	   has_table_privilege('outsider', 'processed_messages', 'INSERT')}),
		't|f|f|f',
		"$how: EXECUTE for app restored, nothing granted to PUBLIC");
	is( $node->psql(
			$db,
			q{SELECT dedup_claim('orders', 'by-app')},
			connstr => $node->connstr($db) . ' user=app'),
		0,
		"$how: app can claim in the restored database");
	my ($ret, $out, $err) = $node->psql(
		$db,
		q{SELECT dedup_claim('orders', 'by-outsider')},
		connstr => $node->connstr($db) . ' user=outsider');
	like(
		$err,
		qr/permission denied for function dedup_claim/,
		"$how: outsider still cannot claim");
	return;
}

# custom format, pg_restore into a fresh database
command_ok([ 'pg_dump', @conn, '-Fc', '-f', "$tmpdir/src.dump", 'src' ],
	'pg_dump -Fc of a database with claims');
$node->safe_psql('postgres', 'CREATE DATABASE dst');
command_ok(
	[
		'pg_restore',      @conn,
		'--exit-on-error', '-d',
		'dst',             "$tmpdir/src.dump"
	],
	'pg_restore into a new database');
check_restored('dst', 'pg_restore');

# the source is untouched by all that
is($node->safe_psql('src', $rows_query),
	$src_rows, 'the source database did not see the claims made in the copy');

# plain format, replayed with psql
command_ok([ 'pg_dump', @conn, '-Fp', '-f', "$tmpdir/src.sql", 'src' ],
	'pg_dump -Fp of a database with claims');
$node->safe_psql('postgres', 'CREATE DATABASE dst_plain');
command_ok(
	[
		'psql', @conn,             '-X', '-q',
		'-v',   'ON_ERROR_STOP=1', '-f', "$tmpdir/src.sql",
		'dst_plain'
	],
	'plain dump replays without error');
check_restored('dst_plain', 'plain dump');

# --- extension in a schema of its own ---------------------------------------------

$node->safe_psql('postgres', 'CREATE DATABASE src_schema');
$node->safe_psql(
	'src_schema', q{
CREATE SCHEMA dedup;
CREATE EXTENSION dedup SCHEMA dedup;
CREATE TABLE public.processed_messages (decoy text);
SELECT dedup.dedup_claim('orders', 'o-1');
SELECT dedup.dedup_claim('orders', 'o-2');
});
is( $node->safe_psql(
		'src_schema',
		'SELECT count(*) FROM dedup.processed_messages; SELECT count(*) FROM public.processed_messages'
	),
	"2\n0",
	'non-public schema: claims go to dedup.processed_messages, not to the public decoy'
);

command_ok(
	[
		'pg_dump', @conn, '-Fc', '-f', "$tmpdir/src_schema.dump",
		'src_schema'
	],
	'pg_dump -Fc of a database with dedup in schema "dedup"');
$node->safe_psql('postgres', 'CREATE DATABASE dst_schema');
command_ok(
	[
		'pg_restore',      @conn,
		'--exit-on-error', '-d',
		'dst_schema',      "$tmpdir/src_schema.dump"
	],
	'pg_restore of it into a new database');

is( $node->safe_psql(
		'dst_schema', q{
SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
 WHERE e.extname = 'dedup'}),
	'dedup',
	'non-public schema: the extension is restored into schema dedup');
is( $node->safe_psql(
		'dst_schema', q{
SELECT string_agg(consumer_name || '/' || message_id, ' ' ORDER BY message_id)
  FROM dedup.processed_messages}),
	'orders/o-1 orders/o-2',
	'non-public schema: claims restored into dedup.processed_messages');

# claim with a search_path that does not contain the extension's schema, and
# one that puts the decoy table first: the claim must use its own table
is( $node->safe_psql(
		'dst_schema', q{
SET search_path = public;
SELECT dedup.dedup_claim('orders', 'o-1'), dedup.dedup_claim('orders', 'o-3');
SET search_path = pg_catalog;
SELECT dedup.dedup_claim('orders', 'o-2'), dedup.dedup_claim('orders', 'o-4');
}),
	"f|t\nf|t",
	'non-public schema: old keys are duplicates, new keys first deliveries, whatever the search_path'
);
is( $node->safe_psql(
		'dst_schema',
		'SELECT count(*) FROM dedup.processed_messages; SELECT count(*) FROM public.processed_messages'
	),
	"4\n0",
	'non-public schema: new claims recorded in dedup.processed_messages only'
);

$node->stop;
done_testing();
