#
# 019_entry_points.pl: the gate for every entry point.  Every member of the
# extension (functions with their signatures, views, tables, types, and
# whatever else pg_depend lists with deptype 'e'), and every dedup.*
# setting, has its rows in test/entry_points.tsv, and each row holds for
# each of six roles: application, monitoring, maintenance, the database
# owner, a role that can only connect, and a superuser (the control).
#
#   - The members come from the catalog: pg_depend deptype 'e' on dedup's
#     pg_extension row (but for the row types of its tables and views and
#     array types, which 17 and later list too and which have no privileges
#     of their own), the settings from pg_settings.  A member without its
#     rows fails, with the rows to add printed; a row naming no member, or
#     an action its kind does not have, fails too.
#   - Each role logs in as itself (a psql session of its own, so that
#     session_user is the role) and runs every row, each in a transaction
#     rolled back: a function's sample from the file, for the other kinds a
#     statement the test writes (see the file's header).
#   - Each row is one ok(): the outcome of every role as the file says.
#     The measured table is written to tmp_check/entry_points.measured.tsv,
#     in the file's format, to compare.
#
# The file's header says what allowed and denied mean.  dedup is installed
# by a superuser, as README "Install" says, in a schema of the superuser's
# ($schema below); here every role gets USAGE on it, so that the schema is
# no barrier and each role reaches each object's own privileges (README
# grants USAGE only to the roles that use dedup).
#
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupNode;
use PostgreSQL::Test::Utils;
use Test::More;

my $table_file = "$FindBin::Bin/../entry_points.tsv";
my @roles = qw(application monitoring maintenance owner connect superuser);
my %login = (
	application => 'gate_app',
	monitoring  => 'gate_monitor',
	maintenance => 'gate_ops',
	owner       => 'gate_owner',
	connect     => 'gate_connect',
	superuser   => 'gate_super');
my %actions = (
	function => ['EXECUTE'],
	view     => [qw(SELECT INSERT UPDATE DELETE)],
	table    => [qw(SELECT INSERT UPDATE DELETE TRUNCATE)],
	type     => ['USAGE'],
	setting  => [ 'SET', 'ALTER ROLE SET', 'ALTER DATABASE SET' ]);
my $db     = 'gate';
my $schema = 'dedup';

my $node = DedupNode->create('gate', sweeps => 'off');

# the roles, as README "Security" makes them
$node->safe_psql(
	'postgres', qq{
CREATE ROLE gate_super LOGIN SUPERUSER;
CREATE ROLE gate_owner LOGIN;
CREATE ROLE gate_app LOGIN;
CREATE ROLE gate_monitor LOGIN IN ROLE pg_monitor;
CREATE ROLE gate_ops LOGIN;
CREATE ROLE gate_connect LOGIN;
CREATE DATABASE $db OWNER gate_owner;
});

# the claim functions as README "Let the application claim", "A whole
# batch", "Catch a reused id", "Operating positions" and "Records colocated
# with the business rows" grant them, and dedup_publish as doc/outbox.md
# does; "Maintenance roles" for ops
$node->safe_psql(
	$db, qq{
SET ROLE gate_super;
CREATE SCHEMA $schema;
CREATE EXTENSION dedup SCHEMA $schema;
GRANT USAGE ON SCHEMA $schema TO PUBLIC;
GRANT EXECUTE ON FUNCTION
	$schema.dedup_claim(text, text), $schema.dedup_claim(text, text, bytea),
	$schema.dedup_claim_many(text, text[]), $schema.dedup_try_claim(text, text, bytea),
	$schema.dedup_claim_offset(text, text, integer, bigint),
	$schema.dedup_claim_offsets(text, text, integer, bigint[]),
	$schema.dedup_stream_positions(text, text),
	$schema.dedup_claim_routed(regclass, text, text, text),
	$schema.dedup_claim_routed_many(regclass, text, text, text[]),
	$schema.dedup_publish(text, text, text, jsonb)
	TO gate_app;
GRANT EXECUTE ON FUNCTION $schema.dedup_set_retention(text, interval),
	$schema.dedup_keep_forever(text), $schema.dedup_reset_retention(text),
	$schema.dedup_sweep(text), $schema.dedup_sweeper_wake()
	TO gate_ops;
});

# --- the table ---

my (@rows, %row_of, @table_problems);
open(my $fh, '<', $table_file) or die "$table_file: $!";
while (my $line = <$fh>)
{
	chomp $line;
	next if $line =~ /^\s*(#|$)/;
	my @f = split /\t+/, $line;
	if (@f != 10)
	{
		push @table_problems,
		  "line $.: " . scalar(@f) . " fields, not 10: $line";
		next;
	}
	my %r = (line => $.);
	@r{ 'kind', 'member', 'action', @roles, 'sample' } = @f;
	my $key = "$r{kind}\t$r{member}\t$r{action}";
	if (grep { $r{$_} !~ /^(allowed|denied|-)$/ } @roles)
	{
		push @table_problems,
		  "line $.: an outcome is neither allowed, denied nor -: $line";
		next;
	}
	if ($row_of{$key})
	{
		push @table_problems,
		  "line $.: the same row as line $row_of{$key}{line}: $key";
		next;
	}
	$row_of{$key} = \%r;
	push @rows, \%r;
}
close $fh;
is(join("\n", @table_problems), '', 'test/entry_points.tsv is well formed');

# --- the members, from the catalog ---

my $members = $node->safe_psql(
	$db, qq{
SET search_path = $schema, pg_catalog;
SELECT CASE
		 WHEN d.classid = 'pg_proc'::regclass THEN 'function'
		 WHEN d.classid = 'pg_class'::regclass THEN
		   CASE c.relkind WHEN 'r' THEN 'table' WHEN 'p' THEN 'table'
			 WHEN 'v' THEN 'view' ELSE (pg_identify_object(d.classid, d.objid, 0)).type END
		 WHEN d.classid = 'pg_type'::regclass THEN 'type'
		 ELSE (pg_identify_object(d.classid, d.objid, 0)).type
	   END,
	   CASE
		 WHEN d.classid = 'pg_proc'::regclass THEN d.objid::regprocedure::text
		 WHEN d.classid = 'pg_class'::regclass THEN c.relname::text
		 WHEN d.classid = 'pg_type'::regclass THEN format_type(d.objid, NULL)
		 ELSE (pg_identify_object(d.classid, d.objid, 0)).identity
	   END
  FROM pg_depend d
  JOIN pg_extension e ON e.oid = d.refobjid
  LEFT JOIN pg_class c ON d.classid = 'pg_class'::regclass AND c.oid = d.objid
  LEFT JOIN pg_type t ON d.classid = 'pg_type'::regclass AND t.oid = d.objid
 WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
   AND e.extname = 'dedup'
   -- not a relation's row type, nor an array type (17 and later list both)
   AND NOT coalesce(t.typrelid <> 0 OR t.typcategory = 'A', false)
 UNION ALL
SELECT 'setting', name FROM pg_settings WHERE name LIKE 'dedup.%'
 ORDER BY 1, 2});
my @members = map { [ split /\|/, $_, 2 ] } split /\n/, $members;

# every member's entry points: the file's rows, or the rows it lacks
my (@points, @missing);
my %member_seen;
for my $m (@members)
{
	my ($kind, $name) = @$m;
	$member_seen{"$kind\t$name"} = 1;
	for my $action (@{ $actions{$kind} // ['-'] })
	{
		my $r = $row_of{"$kind\t$name\t$action"};
		if ($r)
		{
			push @points, $r;
		}
		else
		{
			push @missing,
			  { kind => $kind, member => $name, action => $action };
		}
	}
}

# rows of no member, or of an action the member's kind does not have
my @gone = grep {
	my $r = $_;
	!$member_seen{"$r->{kind}\t$r->{member}"}
	  || !grep { $_ eq $r->{action} }
	  @{ $actions{ $r->{kind} } // ['-'] }
} @rows;

# --- the statements ---

sub quote_literal
{
	my ($s) = @_;
	$s =~ s/'/''/g;
	return "'$s'";
}

my %setting_value = map { split /\|/, $_, 2 } split /\n/,
  $node->safe_psql($db,
	q{SELECT name, setting FROM pg_settings WHERE name LIKE 'dedup.%'});
my %first_column = map { split /\|/, $_, 2 } split /\n/, $node->safe_psql(
	$db, qq{
SELECT c.relname, quote_ident(a.attname)
  FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
 WHERE c.relnamespace = '$schema'::regnamespace AND a.attnum = 1});

# the statement of an entry point, as the roles run it
sub statement
{
	my ($p) = @_;
	my ($kind, $member, $action) = @$p{qw(kind member action)};
	if ($kind eq 'function')
	{
		(my $sample = $p->{sample}) =~ s/\@extschema\@/$schema/g;
		return $sample;
	}
	my $rel = "$schema."
	  . ($member =~ /^[a-z_][a-z0-9_]*$/ ? $member : qq{"$member"});
	if ($kind eq 'table' || $kind eq 'view')
	{
		return {
			SELECT => "SELECT count(*) FROM $rel",
			INSERT => "INSERT INTO $rel SELECT WHERE false",
			UPDATE =>
			  "UPDATE $rel SET $first_column{$member} = DEFAULT WHERE false",
			DELETE   => "DELETE FROM $rel WHERE false",
			TRUNCATE => "TRUNCATE $rel",
		}->{$action};
	}
	return "CREATE TEMP TABLE gate_type_usage (c $schema.$member)"
	  if $kind eq 'type';
	if ($kind eq 'setting')
	{
		my $value = quote_literal($setting_value{$member});
		return {
			'SET'            => "SET $member = $value",
			'ALTER ROLE SET' =>
			  "ALTER ROLE CURRENT_USER SET $member = $value",
			'ALTER DATABASE SET' => "ALTER DATABASE $db SET $member = $value",
		}->{$action};
	}
	return undef;
}

# allowed, denied, or undef for an outcome no row may have (a broken sample)
sub verdict
{
	my ($kind, $sqlstate) = @_;
	return undef unless defined $sqlstate;
	return 'allowed' if $sqlstate eq '00000';
	return 'denied'  if $sqlstate eq '42501';
	return undef     if $sqlstate =~ /^(42|25P02|55P03|57014|XX|08)/;
	return 'allowed' if $kind eq 'function';
	return 'denied'  if $sqlstate =~ /^(55P02|55000)$/;
	return undef;
}

# --- every entry point as every role ---

my @checked = grep { defined statement($_) } @points;
my %outcome;   # role => [ [sqlstate, message], ... ] in the order of @checked
for my $role (@roles)
{
	my $script = "SET lock_timeout = '10s';\nSET statement_timeout = '60s';\n"
	  . "CREATE TEMP TABLE gate_own (x integer);\n";
	for my $i (0 .. $#checked)
	{
		my $sql = statement($checked[$i]);
		$script .=
			"BEGIN;\n$sql;\n\\if :ERROR\n"
		  . "\\echo gate-check $i :SQLSTATE :LAST_ERROR_MESSAGE\n"
		  . "\\else\n\\echo gate-check $i 00000\n\\endif\nROLLBACK;\n";
	}
	my ($ret, $out, $err) = $node->psql(
		$db, $script,
		extra_params  => [ '-U', $login{$role} ],
		on_error_stop => 0);
	my @got;
	for my $line (split /\n/, $out)
	{
		$got[$1] = [ $2, $3 // '' ]
		  if $line =~ /^gate-check (\d+) (\w{5})(?: (.*))?$/;
	}
	is(scalar(grep { defined } @got),
		scalar(@checked), "every entry point was run as $role");
	$outcome{$role} = \@got;
}

my $measured = "#kind\tmember\taction\t" . join("\t", @roles) . "\tsample\n";
for my $i (0 .. $#checked)
{
	my $p = $checked[$i];
	my (@wrong, @got, @seen);
	for my $role (@roles)
	{
		my ($sqlstate, $message) =
		  @{ $outcome{$role}[$i] // [ undef, 'not run' ] };
		my $v = verdict($p->{kind}, $sqlstate);
		my $said =
		  ($sqlstate // 'nothing') . ($message ne '' ? " ($message)" : '');
		push @seen, "$role $said";
		push @got,  $v // 'broken';
		push @wrong,
		  defined $v
		  ? "as $role: expected $p->{$role}, got $v: $said"
		  : "as $role: $said, which no harmless statement"
		  . " raises: fix the row's sample"
		  if !defined $v || $v ne $p->{$role};
	}
	note(   "$p->{kind} $p->{member} $p->{action}: "
		  . statement($p) . "\n  "
		  . join("\n  ", @seen));
	$measured .=
	  join("\t", @$p{qw(kind member action)}, @got, $p->{sample}) . "\n";
	ok(!@wrong,
		"test/entry_points.tsv line $p->{line}: $p->{kind} $p->{member} $p->{action}"
	) or diag(join("\n", "statement: " . statement($p), @wrong));
}
PostgreSQL::Test::Utils::append_to_file(
	"$PostgreSQL::Test::Utils::tmp_check/entry_points.measured.tsv",
	$measured);

# --- what the table lacks, and what it names that is gone ---

# a missing member's rows, each role's outcome as the catalog grants it today
sub template
{
	my ($m) = @_;
	my ($kind, $member, $action) = @$m{qw(kind member action)};
	my @cells;
	if ($kind eq 'function')
	{
		my $args = $node->safe_psql(
			$db, qq{
SELECT string_agg('NULL::' || format_type(t, NULL), ', ' ORDER BY i)
  FROM pg_proc p, unnest(p.proargtypes::oid[]) WITH ORDINALITY AS a(t, i)
 WHERE p.oid = '$schema.$member'::regprocedure});
		(my $name = $member) =~ s/\(.*//;
		@cells = map { $_ eq 't' ? 'allowed' : 'denied' } split /\|/,
		  $node->safe_psql(
			$db,
			"SELECT " . join(
				', ',
				map {
					"has_function_privilege('$login{$_}', '$schema.$member', 'EXECUTE')"
				} @roles));
		return join("\t",
			$kind, $member, $action, @cells,
			"SELECT \@extschema\@.$name($args)");
	}
	return join("\t", $kind, $member, $action, ('-') x @roles, '-')
	  unless $actions{$kind};
	my $granted =
		$kind eq 'type' ? "has_type_privilege(%s, '$schema.$member', 'USAGE')"
	  : $kind eq 'setting'
	  ? "(SELECT context = 'user' OR (context = 'superuser' AND %s = 'gate_super') FROM pg_settings WHERE name = '$member')"
	  : "has_table_privilege(%s, '$schema.$member', '$action')";
	@cells = map { $_ eq 't' ? 'allowed' : 'denied' } split /\|/,
	  $node->safe_psql(
		$db,
		"SELECT "
		  . join(', ', map { sprintf($granted, "'$login{$_}'") } @roles));
	return join("\t", $kind, $member, $action, @cells, '-');
}

ok(!@missing,
	'every member of the extension and every dedup.* setting has its rows in test/entry_points.tsv'
  )
  or diag(
	"Add these rows to test/entry_points.tsv (the outcomes are what the catalog "
	  . "grants today: check each against README \"Security\", and give a "
	  . "function a sample with harmless arguments):\n"
	  . join("\n", map { template($_) } @missing));
ok(!@gone,
	'every row of test/entry_points.tsv names a member of the extension or a setting, and an action of its kind'
  )
  or diag(
	"Remove these rows from test/entry_points.tsv, or fix their member or action:\n"
	  . join("\n",
		map { "line $_->{line}: $_->{kind}\t$_->{member}\t$_->{action}" }
		  @gone));

my %kinds;
$kinds{ $_->[0] }++ for @members;
diag(
	sprintf(
		'entry points: %d members (%s), %d rows (member x action), '
		  . '%d roles: %d checks',
		scalar(@members),
		join(', ', map { "$_ $kinds{$_}" } sort keys %kinds),
		scalar(@checked),
		scalar(@roles),
		scalar(@checked) * scalar(@roles)));

done_testing();
