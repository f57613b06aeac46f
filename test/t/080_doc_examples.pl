#
# 080_doc_examples.pl: every example of README.md and doc/*.md runs as
# written, in the layout the README recommends.
#
# Each ```sql block of README.md, then of doc/use.md, streams.md,
# operations.md, citus.md, security.md, reference.md, performance.md and
# outbox.md, is run in that order, file by file, in one database of a
# server with dedup preloaded, through psql with ON_ERROR_STOP: the
# README's own blocks make the layout (schema dedup owned by the
# superuser, the roles, the grants, the application role's search_path), so
# every later block sees what a reader who pasted everything before it
# would see.  What the markdown says about a block is an HTML comment on
# the line before it:
#
#   <!-- not run: WHY -->     the block is skipped (Citus, a DROP EXTENSION)
#   <!-- run as ROLE ... -->  run as ROLE (a block without it: as the
#                             superuser, in a session that first sets
#                             search_path = dedup, "$user", public, as the
#                             README tells a DBA to)
#   ... fails with XXXXX      the block must stop at an error of SQLSTATE
#                             XXXXX (what it runs before that must succeed)
#   ... at the end, twice     run after the file's other blocks, twice
#                             (the README's opening example: pasted twice,
#                             it applies its work once; checked below)
#   <!-- run: python ... -->  a ```python block, run as below
#
# A block that fails fails the test with its file and line.
#
# What a statement returns, as the text shows it in a run block, is
# compared with what it returned (the block still runs whole, in order, in
# one session; psql echoes a marker before and after each such statement):
#
#   SELECT dedup_sweep('surprise');   -- → 3: prose after the value
#                             one value, the word after "→ " in a comment
#                             on the statement's last line or on a line
#                             after it (a trailing : ; or , is prose), as
#                             psql -At prints it; true and false stand for
#                             psql's t and f
#   SELECT * FROM dedup_seen('payments', 'pay-4812');
#   --  seen | processed_at
#   -- ------+--------------
#   --  t    | ...
#                             a table, comment lines after the statement
#                             as psql prints it aligned: a header, the rule
#                             under it, the rows, and "(N rows)" if the text
#                             shows it; fields are compared trimmed
#   SELECT ...;  -- ERROR: UD001
#                             the statement fails with that SQLSTATE (its
#                             block is marked "fails with UD001")
#
# In a value or a field, "..." stands for any characters: write it for what
# cannot be stable (an id, a time, a transaction number, an LSN).  Blocks
# marked "not run" are not compared.  A result that differs fails the test
# with its file and line, what the text shows and what psql printed; the
# number of results compared must reach a floor.
#
# Every ```sql and ```python block must be either run or marked "not run":
# the number of blocks found by the parser is compared with a plain count
# of fence lines, the number that ran is printed and must reach a floor, so
# a parser that finds nothing fails.
#
# The Python blocks: one that defines handle(conn, event) (the README's and
# doc/use.md's) is run with psycopg 3 and with psycopg2, on a connection
# of the role app: a message handled twice changes the table once, and the
# connection is still usable afterwards (psycopg 3's "with conn:" closed
# it).  The Kafka consumer of doc/streams.md is compiled (py_compile), then
# run with stand-ins for confluent_kafka (not packaged by Debian): a poll of
# five records of payments/3 delivered twice, then a stop; every record must
# be applied once, and the positions must have moved past them.
#
# Then what the README and doc/operations.md say of what ran: the batch of
# the retention example was swept only after the later claim (the audit
# trail's line comes after that claim's statement), a sweep as the README's
# sweep role ends done with the README's grants (its query finds them all),
# and the application role has the README's search_path and cannot create
# in schema dedup.
#
use strict;
use warnings;

use FindBin;
use IPC::Run;
use lib "$FindBin::Bin/../perl";
use DedupNode;
use DedupTools;
use PostgreSQL::Test::Utils;
use Test::More;

my @python = (
	require_tools(modules => ['psycopg']),
	require_tools(modules => ['psycopg2']));

my $top   = "$FindBin::Bin/../..";
my @files = map { "$top/$_" } (
	'README.md',
	map { "doc/$_.md" }
	  qw(use streams operations citus security reference performance outbox));

# postgresql.conf as the README's quick start has it (sweeps on request)
my $node = DedupNode->create(
	'docs',
	sweeps => 'on request',
	conf   => { 'dedup.sweep_role' => 'dedup_sweeper' });
my $db = 'shop';
$node->safe_psql('postgres', "CREATE DATABASE $db");

# this file's own queries as the DBA, with the search_path the README gives
$node->safe_psql($db,
	q{ALTER ROLE CURRENT_USER IN DATABASE shop SET search_path = dedup, "$user", public}
);
my $dba_path = q{SET search_path = dedup, "$user", public;};

# blocks(FILE): the fenced blocks of FILE as hashes (lang, line, text,
# marker), and the number of ```sql and ```python fence lines in it
sub blocks
{
	my ($file) = @_;
	my @lines  = split /\n/, slurp_file($file), -1;
	my (@found, $open, $fences);
	for my $i (0 .. $#lines)
	{
		my $line = $lines[$i];
		$fences++ if $line =~ /^\s*```(sql|python)\s*$/;
		if (!$open && $line =~ /^(\s*)```(\w*)\s*$/)
		{
			my ($indent, $lang) = ($1, $2);
			my $j = $i - 1;
			$j-- while $j >= 0 && $lines[$j] =~ /^\s*$/;
			my $marker =
			  $j >= 0 && $lines[$j] =~ /^\s*<!--\s*(.*?)\s*-->\s*$/ ? $1 : '';
			$open = {
				lang   => $lang,
				line   => $i + 1,
				indent => $indent,
				marker => $marker,
				text   => ''
			};
		}
		elsif ($open && $line =~ /^\s*```\s*$/)
		{
			push @found, $open;
			undef $open;
		}
		elsif ($open)
		{
			(my $text = $line) =~ s/^\Q$open->{indent}\E//;
			$open->{text} .= "$text\n";
		}
	}
	die "$file: a fence opened at line $open->{line} is never closed\n"
	  if $open;
	return (\@found, $fences // 0);
}

# results(FILE, BLOCK): the block's text with markers around each statement
# that shows its result, and those results (line, kind, expected lines)
sub results
{
	my ($name, $b) = @_;
	my @lines = split /\n/, $b->{text}, -1;
	my (@expect, @ends, $dollar);
	my $last_end = -1;    # the line that ended the previous statement
	my $code     = -1;    # the last line with code
	for my $i (0 .. $#lines)
	{
		my $line = $lines[$i];
		my $sql  = $line;
		$sql =~ s/--.*$// unless $dollar;
		$dollar = !$dollar for $sql =~ /\$\w*\$/g;
		my $where = "$name:" . ($b->{line} + 1 + $i);
		if ($sql =~ /\S/)
		{
			$code = $i;
			if (!$dollar && $sql =~ /;\s*$/)
			{
				push @ends, [ $last_end, $i ];
				$last_end = $i;
			}
		}

		# the arrow → as the UTF-8 bytes slurp_file reads
		my $value =
		  $line =~ /--\s*\xe2\x86\x92\s*(\S+?)[:;,]?(?:\s|$)/ ? $1 : undef;
		my $table =
			 $line =~ /^\s*--\s*\S/
		  && $i < $#lines
		  && $lines[ $i + 1 ] =~ /^\s*--\s*-+(?:\+-+)*\s*$/;
		my $error = $line =~ /--\s*ERROR:\s+(\w{5})\b/ ? $1 : undef;
		next unless defined $value || $table || defined $error;
		die "$where: a result that follows no statement ending in ;\n"
		  unless @ends && $ends[-1][1] == $code;
		my @rows;
		if ($table)
		{
			for my $j ($i .. $#lines)
			{
				last unless $lines[$j] =~ /^\s*--(?: (.*))?$/;
				my $row    = $1 // '';
				my $footer = $row =~ /^\(\d+ rows?\)$/;
				last
				  if $j > $i + 1
				  && !$footer
				  && $row !~ /\|/
				  && $row !~ /^\s*\S+\s*$/;
				push @rows, $row;
				last if $footer;
			}
		}
		push @expect,
		  {
			line  => $b->{line} + 1 + $i,
			table => $table,
			error => $error,
			rows  => $table ? \@rows : [ $value // "ERROR:  $error" ],
			from  => $ends[-1][0],
			to    => $ends[-1][1]
		  };
	}
	my (%before, %after);
	for my $n (0 .. $#expect)
	{
		my $e      = $expect[$n];
		my $format = $e->{table} ? 'aligned' : 'unaligned';
		my $tuples = $e->{table} ? 'off'     : 'on';
		$before{ $e->{from} } .=
		  "\\pset format $format\n\\pset tuples_only $tuples\n\\echo \@\@080-begin $n\n";
		$after{ $e->{to} } .=
		  "\\echo \@\@080-end $n\n\\pset format unaligned\n\\pset tuples_only on\n";
	}
	my $text = $before{-1} // '';
	$text .= "$lines[$_]\n" . ($after{$_} // '') . ($before{$_} // '')
	  for 0 .. $#lines;
	return ($text, \@expect);
}

# same(EXPECTED, GOT): a field or value as the text shows it matches what
# psql printed; "..." in it stands for any characters, true and false for
# psql's t and f
sub same
{
	my ($expected, $got) = map { s/^\s+|\s+$//gr } @_;
	$expected = { true => 't', false => 'f' }->{$expected} // $expected;
	my $pattern = join '.*', map { quotemeta } split /\.\.\./, $expected, -1;
	return $got =~ /^$pattern$/s;
}

# check_results(FILE, STDOUT, STDERR, EXPECTED): compare each result the
# block shows with what psql printed between its markers; an error: psql
# began the statement, never ended it, and reported that SQLSTATE
my $compared = 0;

sub check_results
{
	my ($name, $out, $err, $expect) = @_;
	for my $n (0 .. $#$expect)
	{
		my $e = $expect->[$n];
		if (defined $e->{error})
		{
			$compared++;
			ok( $out      =~ /^\@\@080-begin $n$/m
				  && $out !~ /^\@\@080-end $n$/m
				  && $err =~ /ERROR:\s+\Q$e->{error}\E:/,
				"$name:$e->{line}: the statement fails with $e->{error}")
			  or diag("$name:$e->{line}: expected ERROR $e->{error}, got\n"
				  . "$out\n$err");
			next;
		}
		my @got =
		  $out =~ /^\@\@080-begin $n\n(.*?)^\@\@080-end $n$/ms
		  ? split(/\n/, $1)
		  : ('(no output: the statement did not run)');
		pop @got while @got && $got[-1] !~ /\S/;
		my @want = @{ $e->{rows} };
		pop @got
		  if $e->{table}
		  && $want[-1] !~ /^\(\d+ rows?\)$/
		  && @got
		  && $got[-1] =~ /^\(\d+ rows?\)$/;
		my $match = @got == @want;
		for my $i (0 .. $#want)
		{
			last unless $match;
			my @w = $e->{table} ? split(/\|/, $want[$i], -1) : ($want[$i]);
			my @g =
			  $e->{table} ? split(/\|/, $got[$i] // '', -1) : ($got[$i]);
			next if $e->{table} && $i == 1;    # the rule under the header
			$match = (@w == @g && !grep { !same($w[$_], $g[$_]) } 0 .. $#w);
		}
		$compared++;
		ok($match, "$name:$e->{line}: the result is as the text shows")
		  or diag("$name:$e->{line}: expected\n"
			  . join("\n", @want)
			  . "\ngot\n"
			  . join("\n", @got));
	}
}

# run_sql(FILE, BLOCK): run one SQL block as its marker says; ok() it
sub run_sql
{
	my ($name, $b) = @_;
	my $where = "$name:$b->{line}";
	my $role  = $b->{marker} =~ /\brun as (\w+)/ ? $1 : undef;
	my ($text, $expect) = results($name, $b);
	my $sql = defined $role ? $text : "$dba_path\n$text";
	my ($ret, $out, $err) = $node->psql(
		$db, $sql,
		on_error_stop => 1,
		extra_params  =>
		  [ '-v', 'VERBOSITY=verbose', defined $role ? ('-U', $role) : () ]);
	if ($b->{marker} =~ /\bfails with (\w{5})\b/)
	{
		my $state = $1;
		ok( $ret != 0 && $err =~ /ERROR:\s+\Q$state\E:/,
			"$where fails with $state as the text says"
		) or diag("$where: exit $ret, stderr:\n$err");
		check_results($name, $out, $err, $expect);
		return;
	}
	ok($ret == 0 && $err !~ /ERROR:/,
		"$where runs" . (defined $role ? " as $role" : ''))
	  or diag(
		"$where: the block failed (exit $ret):\n$err\n--- the block:\n$b->{text}"
	  );
	check_results($name, $out, $err, $expect);
}

my $tmp     = PostgreSQL::Test::Utils::tempdir;
my $connstr = sprintf('host=%s port=%d dbname=%s user=app',
	$node->host, $node->port, $db);

# the harness of the handle(conn, event) examples: DRIVER, CONNSTR, FILE
append_to_file("$tmp/handle.py", <<'PYTHON');
import importlib, sys
driver, connstr, path, event_id = sys.argv[1:5]
module = importlib.import_module(driver)
sys.modules["psycopg"] = module             # the example's "import psycopg2 as psycopg"
code = open(path).read()
scope = {"__name__": "doc_example"}
exec(compile(code, path, "exec"), scope)
conn = module.connect(connstr)

def points():
    with conn.cursor() as cur:
        cur.execute("SELECT points FROM public.loyalty WHERE customer_id = 'CUS-291'")
        value = cur.fetchone()[0]
    conn.rollback()
    return value

event = {"event_id": event_id, "customer_id": "CUS-291", "amount": 7}
before = points()
scope["handle"](conn, event)
scope["handle"](conn, event)                 # the redelivery
scope["handle"](conn, dict(event, event_id=event_id + "-b"))
print(points() - before)
PYTHON

# the stand-in confluent_kafka of the Kafka example, and its harness:
# CONNSTR, FILE
append_to_file("$tmp/kafka.py", <<'PYTHON');
import json, sys, types
connstr, path = sys.argv[1:3]

class Stop(Exception):
    pass

class TopicPartition:
    def __init__(self, topic, partition, offset=-1001):
        self.topic, self.partition, self.offset = topic, partition, offset

class Record:
    def __init__(self, topic, partition, offset):
        self._t, self._p, self._o = topic, partition, offset
    def error(self): return None
    def topic(self): return self._t
    def partition(self): return self._p
    def offset(self): return self._o
    def value(self):
        return json.dumps({"amount": 1, "account": 1 + self._o % 10}).encode()

class Consumer:
    polls = 0
    def __init__(self, conf):
        assert conf["enable.auto.commit"] is False
    def subscribe(self, topics, on_assign):
        on_assign(self, [TopicPartition(t, 3) for t in topics])
    def assign(self, partitions):
        self.start = {(tp.topic, tp.partition): tp.offset for tp in partitions}
    def consume(self, num_messages, timeout):
        Consumer.polls += 1
        if Consumer.polls > 2:              # one poll, then its replay (a rebalance)
            raise Stop()
        (topic, partition), start = next(iter(self.start.items()))
        return [Record(topic, partition, start + i) for i in range(5)]
    def commit(self, offsets, asynchronous):
        pass

kafka = types.ModuleType("confluent_kafka")
kafka.Consumer, kafka.TopicPartition = Consumer, TopicPartition
sys.modules["confluent_kafka"] = kafka
import psycopg
connect = psycopg.connect
psycopg.connect = lambda *args, **kwargs: connect(connstr)  # the example's DSN is the reader's
try:
    exec(compile(open(path).read(), path, "exec"), {"__name__": "__main__"})
except Stop:
    pass
print("polled", Consumer.polls)
PYTHON

# run_python(FILE, BLOCK): the handle() examples with both drivers, the
# Kafka consumer with its stand-in
my $handled = 0;

sub run_python
{
	my ($name, $b) = @_;
	my $where  = "$name:$b->{line}";
	my $script = "$tmp/example_$handled.py";
	$handled++;
	append_to_file($script, $b->{text});
	if ($b->{marker} =~ /stand-in Kafka/)
	{
		my ($out, $err);
		my $compiled =
		  IPC::Run::run([ $python[0], '-m', 'py_compile', $script ],
			'>', \$out, '2>', \$err);
		ok($compiled, "$where compiles") or diag($err);
		my $position =
		  "SELECT next_offset FROM dedup.dedup_stream_positions('billing', 'payments') WHERE partition = 3";
		my $before =
		  $node->safe_psql($db, "SELECT sum(balance) FROM public.accounts");
		my $from = $node->safe_psql($db, $position);
		my $ran =
		  IPC::Run::run([ $python[0], "$tmp/kafka.py", $connstr, $script ],
			'>', \$out, '2>', \$err);
		ok($ran && $out =~ /polled 3/,
			"$where runs with a stand-in Kafka: a poll and its replay")
		  or diag("$where: $out\n$err");
		is( $node->safe_psql(
				$db, "SELECT sum(balance) - $before FROM public.accounts"),
			'5',
			"$where: five records, each applied once");
		is($node->safe_psql($db, "SELECT ($position) - $from"),
			'5', "$where: the position moved past the five records");
		return;
	}
	die "$where: a python block marked to run is neither handle() nor Kafka\n"
	  unless $b->{text} =~ /^def handle\(conn, event\):/m;
	for my $i (0, 1)
	{
		my $driver = $i ? 'psycopg2' : 'psycopg';
		my ($out, $err);
		my $ran = IPC::Run::run(
			[
				$python[$i], "$tmp/handle.py",
				$driver,     $connstr,
				$script,     "evt-doc-$handled-$driver"
			],
			'>',
			\$out,
			'2>',
			\$err);
		ok($ran, "$where runs with $driver") or diag("$where: $err");
		is($out, "14\n",
			"$where with $driver: two messages applied once each, a redelivery skipped, the connection kept"
		);
	}
}

my ($ran, $skipped) = (0, 0);
for my $file (@files)
{
	(my $name = $file) =~ s{^\Q$top\E/}{};
	my ($blocks, $fences) = blocks($file);
	my @mine = grep { $_->{lang} =~ /^(sql|python)$/ } @$blocks;
	is(scalar @mine, $fences,
		"$name: every ```sql and ```python block parsed");
	my ($file_ran, @later) = (0);
	for my $b (@mine)
	{
		if ($b->{marker} =~ /^not run:\s*\S/)
		{
			$skipped++;
			next;
		}
		if ($b->{lang} eq 'python')
		{
			die
			  "$name:$b->{line}: a python block is neither run nor marked <!-- not run: why -->\n"
			  unless $b->{marker} =~ /^run: python/;
			run_python($name, $b);
		}
		elsif ($b->{marker} =~ /\bat the end\b/)
		{
			push @later, $b;
			next;
		}
		else
		{
			run_sql($name, $b);
		}
		$file_ran++;
	}
	for my $b (@later)
	{
		my $points =
		  "SELECT points FROM public.loyalty WHERE customer_id = 'CUS-291'";
		my $before = $node->safe_psql($db, $points);
		run_sql($name, $b);
		my $once = $node->safe_psql($db, $points);
		if ($b->{marker} =~ /\btwice\b/)
		{
			run_sql($name, $b);
			is($node->safe_psql($db, $points),
				$once,
				"$name:$b->{line} pasted a second time changes nothing");
			isnt($once, $before,
				"$name:$b->{line} did its work the first time");
		}
		$file_ran++;
	}
	note("$name: $file_ran blocks ran");
	$ran += $file_ran;
}
note("$ran blocks ran, $skipped not run");
cmp_ok($ran, '>=', 35, "$ran blocks of the documentation ran (at least 35)");
cmp_ok($compared, '>=', 14,
	"$compared results of the documentation compared (at least 14)");

# doc/operations.md's example of the retention rule: the batch claimed in
# one transaction stayed (its first dedup_sweep swept nothing, which writes
# no audit line) until a later claim, then went: the one audit line of the
# consumer's sweeps, 3 records, comes after that claim's statement in the log
my $log   = slurp_file($node->logfile);
my @swept = $log =~ /swept (\d+) expired records? of consumer 'surprise'/g;
is(join(',', @swept), '3', "operations.md: the consumer's batch swept once");
my $later = index($log, "statement: SELECT dedup_claim('surprise', 'd')");
ok( $later >= 0
	  && index($log, "swept 3 expired records of consumer 'surprise'") >
	  $later,
	"operations.md: a consumer's latest transaction stays until a later claim"
);
is( $node->safe_psql(
		$db,
		"SELECT string_agg(message_id, ',') FROM dedup.processed_messages WHERE consumer_name = 'surprise'"
	),
	'd',
	'operations.md: the later claim is what is left');

# the sweep role of the README's postgresql.conf sweeps with the README's
# grants, and the README's query finds them all
is($node->sweep($db), 'done', 'a sweep as dedup_sweeper ends done');
is( $node->safe_psql(
		$db, q{
SELECT schema_usage AND records AND windows
  FROM (SELECT has_schema_privilege(r, 'dedup', 'USAGE') AS schema_usage,
               has_table_privilege(r, 'dedup.processed_messages', 'SELECT')
                 AND has_table_privilege(r, 'dedup.processed_messages', 'DELETE') AS records,
               has_table_privilege(r, 'dedup.dedup_retention', 'SELECT') AS windows
          FROM (SELECT current_setting('dedup.sweep_role') AS r) AS s) AS c}),
	't',
	"the sweep role's grants are all there");

# the layout the README makes: the application role reaches dedup through
# its search_path, and cannot create in the schema
is( $node->safe_psql(
		$db, 'SHOW search_path', extra_params => [ '-U', 'app' ]),
	'dedup, "$user", public',
	'app has the README\'s search_path');
$node->psql_fails_like(
	$db,
	'CREATE TABLE dedup.planted (i int)',
	qr/permission denied for schema dedup/,
	'app cannot create in schema dedup',
	extra_params => [ '-U', 'app' ]);

done_testing();
