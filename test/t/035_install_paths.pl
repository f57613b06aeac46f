#
# 035_install_paths.pl: a fresh install of the current version, from its
# own script, gives exactly the objects that every update path gives.
#
# The versions come from the extension's scripts in sql/ (dedup--V.sql
# installs V, dedup--V--W.sql updates V to W) and the current one from
# dedup.control, so that a new version needs nothing here.  Each path gets
# a database: "fresh" runs CREATE EXTENSION dedup (the current version's
# script alone), "from_1_0" and so on CREATE EXTENSION dedup VERSION 'V'
# (dedup--1.0.sql and the updates up to V) then ALTER EXTENSION dedup
# UPDATE.  Nothing else is created in these databases, so that every
# object past the ones initdb makes (OID >= 16384) is the extension's.
#
# What is compared, by name and never by OID (a toast table is named after
# its table):
#   - the members (pg_depend deptype 'e') and every dependency of an object
#     of the extension, both ends described (pg_describe_object);
#   - tables, views, indexes and sequences: kind, options, owner, ACL,
#     columns in order (type, NOT NULL, default, collation, storage,
#     identity, generated, options, ACL; not the "pg_attver" entry that
#     recent minor releases store among the options, which differs between
#     any two creations of a column), constraints (definition, validated,
#     deferrable), indexes (definition, flags), triggers (definition and
#     when they fire: enabled, always, replica), view definitions, rules;
#   - functions: pg_get_functiondef() (arguments, result, language, body,
#     SET, volatility, strictness, SECURITY DEFINER, parallel safety, cost,
#     rows) and each attribute once more on its own, owner and ACL;
#   - types: kind, owner, ACL, an enum's labels in order;
#   - event triggers: event, function, tags, enabled;
#   - privileges: every ACL above, the initial privileges of
#     pg_init_privs, default privileges (pg_default_acl);
#   - comments (pg_description);
#   - the pg_extension row: version, schema, relocatable, and the tables
#     registered for pg_dump with their conditions (extconfig,
#     extcondition);
#   - members of a kind this test does not know in detail fail (so that a
#     version that adds, say, an operator class also teaches it here).
# A difference is shown per part, as a unified diff of the fresh install
# (---) and the update path (+++).
#
# It also checks that the current version has its own install script and
# that dedup--1.0.sql is the only other one (one current script; see the
# header of the current script for how it is kept in step).
#
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupNode;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run ();

my $top = "$FindBin::Bin/../..";

# the versions: from the scripts' names, and the control file's default
my (%versions, @installs);
opendir(my $dh, "$top/sql") or die "sql/: $!";
for my $file (sort readdir $dh)
{
	if ($file =~ /^dedup--([^-]+)\.sql$/)
	{
		$versions{$1} = 1;
		push @installs, $1;
	}
	elsif ($file =~ /^dedup--([^-]+)--([^-]+)\.sql$/)
	{
		$versions{$1} = $versions{$2} = 1;
	}
}
closedir $dh;
my $control = slurp_file("$top/dedup.control");
my ($current) = $control =~ /^default_version\s*=\s*'([^']+)'/m
  or die "no default_version in dedup.control";
is_deeply(
	[ sort @installs ],
	[ sort('1.0', $current) ],
	"install scripts: the current version's ($current) and 1.0's only");
my @older = sort grep { $_ ne $current } keys %versions;
ok(scalar @older, 'versions to update from: ' . join(', ', @older));

my $node = DedupNode->create('paths', preload => 0);

# the object types whose members are compared in detail below
my @known_classes = qw(pg_class pg_proc pg_type pg_event_trigger);

# One query, in parts: each row a part, a key and a value.  Nothing here
# may create an object in the database it describes.
my $snapshot = <<'SQL';
WITH ext AS (
	SELECT e.oid, e.extnamespace FROM pg_catalog.pg_extension e WHERE e.extname = 'dedup'),
rels AS (
	SELECT c.* FROM pg_catalog.pg_class c
	 WHERE c.oid >= 16384 AND c.relnamespace <> 'pg_toast'::regnamespace),
lines(part, key, value) AS (
	SELECT 'extension', 'row',
		   format('version %s, schema %s, relocatable %s', e.extversion,
				  e.extnamespace::regnamespace, e.extrelocatable)
	  FROM pg_catalog.pg_extension e WHERE e.extname = 'dedup'
	UNION ALL
	SELECT 'extension', 'pg_dump keeps ' || c.cfg::regclass::text,
		   format('condition %L', c.cond)
	  FROM pg_catalog.pg_extension e,
		   unnest(e.extconfig, e.extcondition) AS c(cfg, cond)
	 WHERE e.extname = 'dedup'
	UNION ALL
	SELECT 'members', pg_describe_object(d.classid, d.objid, d.objsubid), 'member'
	  FROM pg_catalog.pg_depend d, ext
	 WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid
	   AND d.deptype = 'e'
	UNION ALL
	SELECT 'members', 'of a kind not compared here: ' || pg_describe_object(d.classid, d.objid, d.objsubid),
		   d.classid::regclass::text
	  FROM pg_catalog.pg_depend d, ext
	 WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid
	   AND d.deptype = 'e' AND d.classid::regclass::text <> ALL (:'known'::text[])
	UNION ALL
	SELECT 'dependencies',
		   format('%s -> %s (%s)', pg_describe_object(d.classid, d.objid, d.objsubid),
				  pg_describe_object(d.refclassid, d.refobjid, d.refobjsubid), d.deptype),
		   pg_catalog.count(*)::text
	  FROM pg_catalog.pg_depend d
	 WHERE d.objid >= 16384 OR d.refobjid >= 16384
	 GROUP BY 2
	UNION ALL
	SELECT 'relations', c.relname,
		   format('kind %s, persistence %s, options %s, owner %s, ACL %s, replica identity %s, row security %s/%s, of type %s',
				  c.relkind, c.relpersistence, c.reloptions, c.relowner::regrole, c.relacl,
				  c.relreplident, c.relrowsecurity, c.relforcerowsecurity,
				  NULLIF(c.reloftype, 0)::regtype)
	  FROM rels c
	UNION ALL
	SELECT 'columns', format('%s column %s', c.relname,
							 pg_catalog.row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum)),
		   format('%I %s, not null %s, default %s, collation %s, storage %s, identity %s, generated %s, options %s, ACL %s',
				  a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
				  pg_get_expr(ad.adbin, ad.adrelid), NULLIF(a.attcollation, 0)::regcollation,
				  a.attstorage, a.attidentity, a.attgenerated,
				  (SELECT array_agg(o) FROM unnest(a.attoptions) o
					WHERE o NOT LIKE 'pg\_attver=%'), a.attacl)
	  FROM rels c
	  JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
	  LEFT JOIN pg_catalog.pg_attrdef ad ON ad.adrelid = c.oid AND ad.adnum = a.attnum
	UNION ALL
	SELECT 'constraints', format('%s on %s', o.conname, c.relname),
		   format('%s; validated %s, deferrable %s/%s, local %s, inherited %s, no inherit %s',
				  pg_get_constraintdef(o.oid), o.convalidated, o.condeferrable,
				  o.condeferred, o.conislocal, o.coninhcount, o.connoinherit)
	  FROM pg_catalog.pg_constraint o JOIN rels c ON c.oid = o.conrelid
	UNION ALL
	SELECT 'constraints', format('%s on type %s', o.conname, o.contypid::regtype),
		   pg_get_constraintdef(o.oid)
	  FROM pg_catalog.pg_constraint o WHERE o.contypid >= 16384
	UNION ALL
	SELECT 'indexes', i.indexrelid::regclass::text,
		   format('%s; primary %s, exclusion %s, clustered %s, valid %s, replica identity %s',
				  pg_get_indexdef(i.indexrelid), i.indisprimary, i.indisexclusion,
				  i.indisclustered, i.indisvalid, i.indisreplident)
	  FROM pg_catalog.pg_index i JOIN rels c ON c.oid = i.indrelid
	UNION ALL
	SELECT 'triggers', format('%s on %s', t.tgname, c.relname),
		   format('%s; enabled %s', pg_get_triggerdef(t.oid), t.tgenabled)
	  FROM pg_catalog.pg_trigger t JOIN rels c ON c.oid = t.tgrelid
	 WHERE NOT t.tgisinternal
	UNION ALL
	SELECT 'rules', format('%s on %s', r.rulename, c.relname), pg_get_ruledef(r.oid)
	  FROM pg_catalog.pg_rewrite r JOIN rels c ON c.oid = r.ev_class
	 WHERE r.rulename <> '_RETURN'
	UNION ALL
	SELECT 'views', c.relname, pg_get_viewdef(c.oid)
	  FROM rels c WHERE c.relkind IN ('v', 'm')
	UNION ALL
	SELECT 'sequences', c.relname,
		   format('%s from %s by %s, %s to %s, cache %s, cycle %s',
				  s.seqtypid::regtype, s.seqstart, s.seqincrement, s.seqmin, s.seqmax,
				  s.seqcache, s.seqcycle)
	  FROM pg_catalog.pg_sequence s JOIN rels c ON c.oid = s.seqrelid
	UNION ALL
	SELECT 'policies', format('%s on %s', p.polname, c.relname),
		   format('%s %s to %s using %s check %s', p.polcmd, p.polpermissive, p.polroles::regrole[],
				  pg_get_expr(p.polqual, p.polrelid), pg_get_expr(p.polwithcheck, p.polrelid))
	  FROM pg_catalog.pg_policy p JOIN rels c ON c.oid = p.polrelid
	UNION ALL
	SELECT 'functions', p.oid::regprocedure::text,
		   CASE WHEN p.prokind IN ('f', 'p', 'w') THEN pg_get_functiondef(p.oid) ELSE '' END
		   || format(E'\n-- kind %s, volatility %s, strict %s, security definer %s, leakproof %s, parallel %s, cost %s, rows %s, config %s, support %s, owner %s, ACL %s',
					 p.prokind, p.provolatile, p.proisstrict, p.prosecdef, p.proleakproof,
					 p.proparallel, p.procost, p.prorows, p.proconfig,
					 NULLIF(p.prosupport, 0)::regproc, p.proowner::regrole, p.proacl)
	  FROM pg_catalog.pg_proc p WHERE p.oid >= 16384
	UNION ALL
	SELECT 'types', t.oid::regtype::text,
		   format('kind %s, category %s, owner %s, ACL %s, labels %s', t.typtype, t.typcategory,
				  t.typowner::regrole, t.typacl,
				  (SELECT string_agg(quote_literal(l.enumlabel), ', ' ORDER BY l.enumsortorder)
					 FROM pg_catalog.pg_enum l WHERE l.enumtypid = t.oid))
	  FROM pg_catalog.pg_type t WHERE t.oid >= 16384
	UNION ALL
	SELECT 'event triggers', v.evtname,
		   format('on %s execute %s, tags %s, enabled %s, owner %s',
				  v.evtevent, v.evtfoid::regprocedure, v.evttags, v.evtenabled,
				  v.evtowner::regrole)
	  FROM pg_catalog.pg_event_trigger v
	UNION ALL
	SELECT 'initial privileges',
		   pg_describe_object(i.classoid, i.objoid, i.objsubid),
		   format('%s %s', i.privtype, i.initprivs)
	  FROM pg_catalog.pg_init_privs i WHERE i.objoid >= 16384
	UNION ALL
	SELECT 'default privileges',
		   format('%s in %s, type %s', d.defaclrole::regrole, NULLIF(d.defaclnamespace, 0)::regnamespace,
				  d.defaclobjtype),
		   d.defaclacl::text
	  FROM pg_catalog.pg_default_acl d
	UNION ALL
	SELECT 'comments', pg_describe_object(d.classoid, d.objoid, d.objsubid), d.description
	  FROM pg_catalog.pg_description d WHERE d.objoid >= 16384
),
named AS (
	-- a toast table by its table's name
	SELECT l.part,
		   regexp_replace(l.key, 'pg_toast_[0-9]+', 'pg_toast_of_' || COALESCE(
				(regexp_match(l.key, 'pg_toast_([0-9]+)'))[1]::oid::regclass::text, '?'), 'g') AS key,
		   l.value
	  FROM lines l
)
SELECT string_agg(n.part || chr(31) || n.key || chr(31) || COALESCE(n.value, '(null)'),
				  chr(30) ORDER BY n.part, n.key, n.value)
  FROM named n
SQL

# snapshot($db): { part => { key => value } } of what dedup made in $db;
# a key twice in a part gets its values joined
sub snapshot
{
	my ($db)  = @_;
	my $known = '{' . join(',', @known_classes) . '}';
	my $out   = $node->safe_psql($db, "\\set known '$known'\n$snapshot");
	my %parts;
	for my $row (split /\x1e/, $out)
	{
		my ($part, $key, $value) = split /\x1f/, $row, 3;
		$parts{$part}{$key} =
		  exists $parts{$part}{$key}
		  ? "$parts{$part}{$key}\n$value"
		  : $value;
	}
	return \%parts;
}

# render($part): a part as text, a key then its value's lines indented
sub render
{
	my ($part) = @_;
	return join '', map { my $v = $part->{$_}; $v =~ s/^/    /mg; "$_\n$v\n" }
	  sort keys %$part;
}

# unified_diff($a, $b, $path): diff -u of two texts, labelled
sub unified_diff
{
	my ($a, $b, $path) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir;
	open(my $fa, '>', "$dir/a") or die $!;
	print $fa $a;
	close $fa;
	open(my $fb, '>', "$dir/b") or die $!;
	print $fb $b;
	close $fb;
	my ($stdout, $stderr);
	IPC::Run::run(
		[
			'diff',    '-u',  '--label', "fresh install of $current",
			'--label', $path, "$dir/a",  "$dir/b"
		],
		'>',
		\$stdout,
		'2>',
		\$stderr);
	return $stdout . $stderr;
}

# the fresh install, from the current script alone
$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('fresh',    'CREATE EXTENSION dedup');
is( $node->safe_psql(
		'fresh',
		q{SELECT extversion FROM pg_extension WHERE extname = 'dedup'}),
	$current,
	"a fresh install is $current");
my $fresh = snapshot('fresh');
ok(scalar keys %{ $fresh->{members} }, 'the fresh install has members')
  or BAIL_OUT('nothing to compare');
is_deeply(
	[
		grep { /^of a kind not compared here/ }
		sort keys %{ $fresh->{members} }
	],
	[],
	'every member is of a kind this test compares in detail (pg_class, pg_proc, pg_type, pg_event_trigger)'
);

# The guard at the top of the current script names every relation, type,
# function and index that it creates and dedup--1.0.sql does not (those
# stop a fresh install with PostgreSQL's own error, as they always have),
# and only those.
my $created = q{
SELECT string_agg(o.object, chr(30)) FROM (
	SELECT pg_describe_object(d.classid, d.objid, 0) AS object
	  FROM pg_depend d
	  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'dedup'
	  LEFT JOIN pg_type t ON d.classid = 'pg_type'::regclass AND t.oid = d.objid
	 WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
	   AND d.classid IN ('pg_class'::regclass, 'pg_type'::regclass, 'pg_proc'::regclass)
	   AND (t.oid IS NULL OR (t.typrelid = 0 AND t.typcategory <> 'A'))
	UNION ALL
	SELECT pg_describe_object('pg_class'::regclass, i.indexrelid, 0)
	  FROM pg_index i
	  JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = i.indrelid
	  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'dedup'
	 WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e') o};
my $script = slurp_file("$top/sql/dedup--$current.sql");
my @listed =
  $script =~
  /^\s*'((?:table|sequence|view|index|type|function) [^' ]+)',?$/mg;
my $listed_q = q{
SELECT string_agg(COALESCE(pg_describe_object(l.classid, l.objid, 0), 'not created: ' || l.object),
				  chr(30))
  FROM (SELECT n.object,
			   CASE w.kind WHEN 'function' THEN 'pg_proc'::regclass
						   WHEN 'type' THEN 'pg_type'::regclass
						   ELSE 'pg_class'::regclass END AS classid,
			   CASE w.kind WHEN 'function' THEN to_regprocedure(q.name)::oid
						   WHEN 'type' THEN to_regtype(q.name)::oid
						   ELSE to_regclass(q.name)::oid END AS objid
		  FROM pg_extension e,
			   unnest(:'listed'::text[]) AS n(object),
			   LATERAL (SELECT split_part(n.object, ' ', 1) AS kind,
							   split_part(n.object, ' ', 2) AS name) w,
			   LATERAL (SELECT format('%I.%s', e.extnamespace::regnamespace, w.name) AS name) q
		 WHERE e.extname = 'dedup') l};
$node->safe_psql('postgres',    'CREATE DATABASE install_1_0');
$node->safe_psql('install_1_0', q{CREATE EXTENSION dedup VERSION '1.0'});
my %of_1_0 = map { $_ => 1 } split /\x1e/,
  $node->safe_psql('install_1_0', $created);
my $listed_array = '{' . join(',', map { qq{"$_"} } @listed) . '}';
my %guarded      = map { $_ => 1 } split /\x1e/,
  $node->safe_psql('fresh', "\\set listed '$listed_array'\n$listed_q");
my %new = map { $_ => 1 } grep { !$of_1_0{$_} } split /\x1e/,
  $node->safe_psql('fresh', $created);
my @unguarded = sort grep { !$guarded{$_} } keys %new;
my @stray     = sort grep { !$new{$_} } keys %guarded;
ok( !@unguarded && !@stray,
	"the guard of dedup--$current.sql names what it creates and 1.0 did not")
  or diag(
	join(
		"\n",
		(map { "not in the guard: $_" } @unguarded),
		(   map { "in the guard, but not created or created by 1.0: $_" }
			  @stray)));

# every path from an older version
for my $from (@older)
{
	(my $db = "from_$from") =~ s/\W/_/g;
	my $path = "$from, updated to $current";
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db,        "CREATE EXTENSION dedup VERSION '$from'");
	$node->safe_psql($db,        'ALTER EXTENSION dedup UPDATE');
	is( $node->safe_psql(
			$db,
			q{SELECT extversion FROM pg_extension WHERE extname = 'dedup'}),
		$current,
		"$path: the version is $current");
	my $updated = snapshot($db);
	my %parts   = map { $_ => 1 } keys %$fresh, keys %$updated;

	for my $part (sort keys %parts)
	{
		my $want = render($fresh->{$part}   // {});
		my $got  = render($updated->{$part} // {});
		ok($got eq $want, "$path: $part as in a fresh install")
		  or diag(unified_diff($want, $got, $path));
	}
}

done_testing();
