#
# 043_jdbc.pl: doc/examples/jdbc/DedupConsumer.java on pgjdbc, directly and through
# pgbouncer in transaction pooling mode.
#
# Real parts: Debian's pgjdbc (libpostgresql-jdbc-java) and JDK, Debian's
# pgbouncer, a server that logs every statement (log_statement = all), so
# that each execution shows whether the client ran it as a named
# (server-side) prepared statement ("execute S_3: ...") or an unnamed one
# ("execute <unnamed>: ..."), by which backend and for which client
# (application_name).  The consumers run as role "app", which holds only
# EXECUTE on dedup.dedup_claim and what its table needs.
#
# 1. Direct connection, pgjdbc's default prepareThreshold (5): the claim's
#    first four executions are unnamed, the fifth and every later one the
#    same named statement; a redelivered message is a duplicate.
# 2. Through pgbouncer (pool of 2 server connections, round robin) with
#    prepareThreshold=0: three consumers, all connected before the first
#    message, each get every message (each delivered three times, in three
#    orders).  No named statement is executed; each consumer's transactions
#    run on both server connections; every message is claimed exactly once,
#    the other two deliveries are duplicates, the balances are the sums.
# 3. Through pgbouncer with the default prepareThreshold, two consumers one
#    after the other on a pool of one server connection: pgbouncer older
#    than 1.21 does not track prepared statements, so the second consumer's
#    first COMMIT (which pgjdbc prepares as "S_1") fails with 42P05 and its
#    claim is rolled back.  pgbouncer 1.21 and later with
#    max_prepared_statements keeps them apart (it prepares each on the
#    server under a name of its own) and both consumers succeed.
#
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupNode;
use DedupPgbouncer;
use DedupTools;

my $jar = '/usr/share/java/postgresql.jar';
require_tools(
	programs => [ '/usr/bin/java', '/usr/bin/javac', '/usr/sbin/pgbouncer' ]);

# a jar is not executable: name it only when it is missing (skip, or fail
# under test/run.sh)
require_tools(programs => [$jar]) unless -r $jar;

my $tmp     = PostgreSQL::Test::Utils::tempdir;
my $classes = "$tmp/classes";
my ($javac_out, $javac_err);
ok( IPC::Run::run(
		[
			'javac', '-Xlint:all', '-Werror', '-cp', $jar, '-d', $classes,
			"$FindBin::Bin/../../doc/examples/jdbc/DedupConsumer.java"
		],
		'>',
		\$javac_out,
		'2>',
		\$javac_err),
	'DedupConsumer.java compiles without warnings') or BAIL_OUT($javac_err);

my $node = DedupNode->create('jdbc',
	conf => { listen_addresses => '127.0.0.1', log_statement => 'all' });
my $db = 'bank';
$node->safe_psql('postgres', "CREATE DATABASE $db");
$node->safe_psql(
	$db, q{
CREATE SCHEMA dedup;
CREATE EXTENSION dedup SCHEMA dedup;
CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL);
INSERT INTO accounts SELECT g, 0 FROM generate_series(1, 5) g;
CREATE ROLE app LOGIN;
GRANT USAGE ON SCHEMA dedup TO app;
GRANT EXECUTE ON FUNCTION dedup.dedup_claim(text, text) TO app;
GRANT SELECT, UPDATE ON accounts TO app;
});

sub sql { return $node->safe_psql($db, $_[0]); }

my %balance;

# messages($prefix, $n): "id account amount" lines, and the expected balances
sub messages
{
	my ($prefix, $n) = @_;
	my @m;
	for my $i (1 .. $n)
	{
		my ($id, $account, $amount) =
		  (sprintf('%s-%04d', $prefix, $i), 1 + $i % 5, 1 + ($i * 37) % 100);
		push @m, "$id $account $amount\n";
		$balance{$account} += $amount;
	}
	return @m;
}

sub balances_ok
{
	my ($label) = @_;
	is( sql(q{SELECT string_agg(id || '=' || balance, ',' ORDER BY id) FROM accounts}
		),
		join(',', map { "$_=" . ($balance{$_} // 0) } 1 .. 5),
		"$label: balances are the sums of the messages, each applied once");
}

# consumers(@specs): a DedupConsumer per spec {app, port, options, consumer,
# messages}; once every one is connected (or has failed), each is given its
# messages, the stand-in for a broker's deliveries, and its end is awaited.
# Sets out, err and code in each spec.
sub consumers
{
	my @c = @_;
	my @cmd;
	for my $c (@c)
	{
		@$c{qw(in out err)} = ('', '', '');
		push @cmd, '&' if @cmd;
		push @cmd,
		  [
			'java',
			'-cp',
			"$jar:$classes",
			'DedupConsumer',
			"jdbc:postgresql://127.0.0.1:$c->{port}/$db?user=app&ApplicationName=$c->{app}"
			  . ($c->{options} // ''),
			$c->{consumer}
		  ],
		  '<', \$c->{in}, '>', \$c->{out}, '2>', \$c->{err};
	}
	my $h = IPC::Run::start(@cmd,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	$h->pump while grep { $_->{out} !~ /^ready$/m && $_->{err} eq '' } @c;
	$_->{in} = join('', @{ $_->{messages} }) for @c;
	$h->finish;
	my @codes = $h->results;
	$c[$_]{code} = $codes[$_] for 0 .. $#c;
	return @c;
}

# consumer($app, $port, $consumer, \@messages): one DedupConsumer, as
# consumers() runs it
sub consumer
{
	my ($app, $port, $consumer, $messages) = @_;
	my ($c) = consumers(
		{
			app      => $app,
			port     => $port,
			consumer => $consumer,
			messages => $messages
		});
	return $c;
}

# answers($spec): the consumer's "claimed"/"duplicate" lines, as id => answer
sub answers
{
	my ($c) = @_;
	return
	  map { (split / /)[ 1, 0 ] } grep { /^(claimed|duplicate) / } split /\n/,
	  $c->{out};
}

# executions($log, $app, $sql): client $app's executions of $sql (a regexp),
# in order, as [statement name, backend pid]
sub executions
{
	my ($log, $app, $sql) = @_;
	my @e;
	while ($log =~ /\[(\d+)\] \Q$app\E LOG:  execute ([^:]+): (.*)$/mg)
	{
		my ($pid, $name, $text) = ($1, $2, $3);
		push @e, [ $name, $pid ] if $text =~ $sql;
	}
	return @e;
}

my $claim_sql = qr/^SELECT dedup\.dedup_claim\(\$1, \$2\)$/;

sub bouncer
{
	my ($name, %settings) = @_;
	my $b = start_pgbouncer(
		dir      => "$tmp/$name",
		host     => $node->host,
		port     => $node->port,
		dbname   => $db,
		users    => [ 'postgres', 'app' ],
		settings => {

			# pgjdbc sends it in the startup packet, which pgbouncer
			# refuses unless told to ignore it
			ignore_startup_parameters => 'extra_float_digits',
			%settings
		});
	ok($b->{ready}, "$name: pgbouncer listens on port $b->{port}")
	  or BAIL_OUT($b->{error});
	return $b;
}

# ---------------------------------------------------------------------------
# 1. direct connection, default prepareThreshold
# ---------------------------------------------------------------------------

my $offset      = -s $node->logfile;
my @direct_msgs = messages('d', 10);
my $direct      = consumer('direct', $node->port, 'ledger-direct',
	[ @direct_msgs, $direct_msgs[1] ]);    # d-0002 redelivered
is($direct->{code}, 0, 'direct: the consumer ended cleanly')
  or diag($direct->{err});
my @lines = grep { /^(claimed|duplicate) / } split /\n/, $direct->{out};
is( join(',', @lines[ 9, 10 ]),
	'claimed d-0010,duplicate d-0002',
	'direct: 10 messages claimed, the redelivery of d-0002 a duplicate');
is(scalar(grep { /^claimed / } @lines),
	10, 'direct: ... and nothing else claimed');
balances_ok('direct');

my @names =
  map { $_->[0] } executions($node->log_since($offset), 'direct', $claim_sql);
my $named = $names[4] // '';
like($named, qr/^S_\d+$/,
	"direct: the fifth execution of the claim is server-side prepared ($named)"
);
is_deeply(
	\@names,
	[ ('<unnamed>') x 4, ($named) x 7 ],
	'direct: the first four executions are unnamed, the fifth to the eleventh the same named statement'
);

# ---------------------------------------------------------------------------
# 2. through pgbouncer in transaction mode, prepareThreshold=0
# ---------------------------------------------------------------------------

my $pool = bouncer('pool', default_pool_size => 2, server_round_robin => 1);
$offset = -s $node->logfile;
my @pool_msgs = messages('p', 100);
my @orders    = (
	[@pool_msgs],
	[ reverse @pool_msgs ],
	[
		@pool_msgs[ grep { $_ % 2 } 0 .. $#pool_msgs ],
		@pool_msgs[ grep { !($_ % 2) } 0 .. $#pool_msgs ]
	]);
my @pooled = consumers(
	map {
		{
			app      => "pool-$_",
			port     => $pool->{port},
			options  => '&prepareThreshold=0',
			consumer => 'ledger-pool',
			messages => $orders[ $_ - 1 ]
		}
	} 1 .. 3);
is(join(',', map { $_->{code} } @pooled),
	'0,0,0', 'pool: three consumers ended cleanly')
  or diag(join("\n", map { $_->{err} } @pooled));

my %claimed;
for my $c (@pooled)
{
	my %a = answers($c);
	is(scalar(keys %a),
		100, "$c->{app}: answered every one of the 100 messages");
	$a{$_} eq 'claimed' and $claimed{$_}++ for keys %a;
}
is(scalar(keys %claimed),
	100, 'pool: every message claimed by one of the consumers');
is(scalar(grep { $_ != 1 } values %claimed),
	0,
	'pool: ... and by one only (the other two deliveries were duplicates)');
balances_ok('pool');
is( sql(q{SELECT count(*) FROM dedup.processed_messages WHERE consumer_name = 'ledger-pool'}
	),
	'100',
	'pool: dedup.processed_messages holds the 100 claims');
is( sql(q{SELECT claims || '|' || duplicates FROM dedup.dedup_stats WHERE consumer = 'ledger-pool'}
	),
	'100|200',
	'pool: dedup_stats counts 100 claims and 200 duplicates');

my $log = $node->log_since($offset);
for my $c (@pooled)
{
	my @e = executions($log, $c->{app}, qr/./);
	my @claims =
	  grep { $_->[0] eq '<unnamed>' } executions($log, $c->{app}, $claim_sql);
	is( scalar(grep { $_->[0] ne '<unnamed>' } @e),
		0,
		"$c->{app}: none of its "
		  . scalar(@e)
		  . ' executions used a server-side prepared statement');
	is(scalar(@claims), 100,
		"$c->{app}: its 100 claims ran as unnamed statements");
	my %backends = map { $_->[1] => 1 } @claims;
	is( scalar(keys %backends),
		2,
		"$c->{app}: its transactions ran on both server connections of the pool"
	);
}
ok(defined stop_pgbouncer($pool), 'pool: pgbouncer stopped');

# ---------------------------------------------------------------------------
# 3. through pgbouncer with the default prepareThreshold
# ---------------------------------------------------------------------------

my ($version) = `/usr/sbin/pgbouncer --version` =~ /(\d+\.\d+)/;
my $tracks    = $version >= 1.21;
my $single    = bouncer(
	'single',
	default_pool_size => 1,
	$tracks ? (max_prepared_statements => 100) : ());
$offset = -s $node->logfile;
my $first = consumer('default-a', $single->{port}, 'ledger-default',
	[ messages('a', 6) ]);
is($first->{code}, 0,
	'default threshold: the first consumer on the server connection ends cleanly'
) or diag($first->{err});
my %b_before = %balance;
my $second   = consumer('default-b', $single->{port}, 'ledger-default',
	[ messages('b', 6) ]);
if ($tracks)
{
	is($second->{code}, 0,
		"default threshold: pgbouncer $version with max_prepared_statements keeps the second consumer's prepared statements apart"
	) or diag($second->{err});
	like(
		$node->log_since($offset),
		qr/\] default-b LOG:  execute PGBOUNCER_\d+: SELECT dedup\.dedup_claim/,
		'default threshold: ... under names of its own on the server (PGBOUNCER_n)'
	);
	balances_ok('default threshold');
}
else
{
	is($second->{code}, 1,
		"default threshold: pgbouncer $version: the second consumer failed");
	like(
		$second->{err},
		qr/prepared statement "S_1" already exists \(SQLSTATE 42P05\)/,
		'default threshold: ... at its first COMMIT, which the first consumer had prepared as S_1 on the same server connection'
	);
	like(
		$node->log_since($offset),
		qr/\] default-b ERROR:  prepared statement "S_1" already exists\n.*STATEMENT:  COMMIT\n/,
		'default threshold: the server says so in its log');
	%balance = %b_before;
	balances_ok('default threshold');
	is( sql(q{SELECT count(*) FROM dedup.processed_messages WHERE message_id LIKE 'b-%'}
		),
		'0',
		'default threshold: the failed transaction kept no claim: the redelivery will claim again'
	);
}
ok(defined stop_pgbouncer($single), 'default threshold: pgbouncer stopped');

$node->stop;
done_testing();
