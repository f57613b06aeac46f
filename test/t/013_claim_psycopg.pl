#
# 013_claim_psycopg.pl: dedup_claim from a real client driver (psycopg2).
#
# An application role "app" with nothing but EXECUTE on dedup_claim and the
# privileges its business table needs runs the consumer pattern
#
#     with conn:                                   # one transaction
#         cur.execute("SELECT dedup_claim(%s, %s)", (consumer, message_id))
#         if cur.fetchone()[0]:
#             ...do the work...
#                                                  # commit
#
# through psycopg2 on the test node's socket, and this checks that:
#   - a redelivered message is skipped and its effect applied once;
#   - a consumer that dies after its claim but before its commit (connection
#     closed, or backend terminated from another session) leaves no claim:
#     the redelivery claims again, and the effect is applied exactly once --
#     also when the redelivery was already waiting on the dying claim;
#   - app cannot read or write processed_messages directly (SQLSTATE 42501),
#     and cannot claim before it is granted EXECUTE.
#
# The Python side prints what it saw as JSON; the assertions are made here.
#
use strict;
use warnings;

use JSON::PP;
use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupNode;
use DedupTools;
use PostgreSQL::Test::Utils;
use Test::More;

my $python = require_tools(modules => ['psycopg2']);

my $node = DedupNode->create('psycopg', preload => 0);

my $db = 'shop';
$node->safe_psql('postgres', "CREATE DATABASE $db");
$node->safe_psql(
	$db, q{
CREATE EXTENSION dedup;
CREATE TABLE wallet (id int PRIMARY KEY, points int NOT NULL);
INSERT INTO wallet VALUES (1, 0), (2, 0), (3, 0), (4, 0);
CREATE ROLE app LOGIN;
GRANT USAGE ON SCHEMA public TO app;
GRANT SELECT, UPDATE ON wallet TO app;
});

my $tmpdir = PostgreSQL::Test::Utils::tempdir;
my $script = "$tmpdir/consumer.py";
PostgreSQL::Test::Utils::append_to_file($script, <<'PYTHON');
import json
import sys
import threading
import time

import psycopg2

host, port, dbname, scenario = sys.argv[1:5]
timeout = float(sys.argv[5])    # seconds, for any wait


def connect(user):
    return psycopg2.connect(host=host, port=port, dbname=dbname, user=user)


def handle(conn, consumer, message_id, wallet, points):
    """The consumer pattern: claim, work only on a first delivery, commit."""
    with conn:
        with conn.cursor() as cur:
            cur.execute("SELECT dedup_claim(%s, %s)", (consumer, message_id))
            first = cur.fetchone()[0]
            if first:
                cur.execute(
                    "UPDATE wallet SET points = points + %s WHERE id = %s",
                    (points, wallet))
    return first


def points(conn, wallet):
    with conn:
        with conn.cursor() as cur:
            cur.execute("SELECT points FROM wallet WHERE id = %s", (wallet,))
            return cur.fetchone()[0]


def error_of(conn, sql, params=None):
    """Run sql in its own transaction; return the SQLSTATE it fails with."""
    try:
        with conn:
            with conn.cursor() as cur:
                cur.execute(sql, params)
        return None
    except psycopg2.Error as e:
        return e.pgcode


def wait_for_lock_wait(admin, pid):
    deadline = time.monotonic() + timeout
    with admin.cursor() as cur:
        while time.monotonic() < deadline:
            cur.execute("SELECT wait_event_type FROM pg_stat_activity "
                        "WHERE pid = %s", (pid,))
            row = cur.fetchone()
            if row and row[0] == "Lock":
                return True
            time.sleep(0.05)
    return False


def terminate(admin, pid):
    with admin.cursor() as cur:
        cur.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))
        return cur.fetchone()[0]


out = {}
if scenario == "no-execute":
    app = connect("app")
    out["claim"] = error_of(app, "SELECT dedup_claim(%s, %s)", ("c", "m"))

elif scenario == "redelivery":
    app = connect("app")
    out["first"] = handle(app, "loyalty", "evt-1", 1, 120)
    out["second"] = handle(app, "loyalty", "evt-1", 1, 120)
    # the same message id for another consumer is another claim
    out["other_consumer"] = handle(app, "audit", "evt-1", 1, 5)
    # a new connection, as after a consumer restart
    app.close()
    app = connect("app")
    out["after_reconnect"] = handle(app, "loyalty", "evt-1", 1, 120)
    out["points"] = points(app, 1)

elif scenario == "crash-close":
    # claimed and worked, then the connection goes away before the commit
    dying = connect("app")
    with dying.cursor() as cur:
        cur.execute("SELECT dedup_claim(%s, %s)", ("loyalty", "evt-2"))
        out["dying_claim"] = cur.fetchone()[0]
        cur.execute("UPDATE wallet SET points = points + 50 WHERE id = 2")
    dying.close()
    app = connect("app")
    out["redelivery"] = handle(app, "loyalty", "evt-2", 2, 50)
    out["again"] = handle(app, "loyalty", "evt-2", 2, 50)
    out["points"] = points(app, 2)

elif scenario == "crash-terminate":
    # the backend is killed between claim and commit; the client finds out
    # when it tries to commit
    admin = connect("postgres")
    admin.autocommit = True
    dying = connect("app")
    cur = dying.cursor()
    cur.execute("SELECT dedup_claim(%s, %s)", ("loyalty", "evt-3"))
    out["dying_claim"] = cur.fetchone()[0]
    cur.execute("UPDATE wallet SET points = points + 70 WHERE id = 3")
    out["terminated"] = terminate(admin, dying.get_backend_pid())
    try:
        dying.commit()
        out["commit"] = "committed"
    except psycopg2.Error as e:
        out["commit"] = type(e).__name__
    app = connect("app")
    out["redelivery"] = handle(app, "loyalty", "evt-3", 3, 70)
    out["again"] = handle(app, "loyalty", "evt-3", 3, 70)
    out["points"] = points(app, 3)

elif scenario == "crash-while-redelivered":
    # the redelivery arrives while the first delivery still holds its claim:
    # it waits, and when the first delivery's backend dies, it wins
    admin = connect("postgres")
    admin.autocommit = True
    dying = connect("app")
    cur = dying.cursor()
    cur.execute("SELECT dedup_claim(%s, %s)", ("loyalty", "evt-4"))
    out["dying_claim"] = cur.fetchone()[0]
    cur.execute("UPDATE wallet SET points = points + 30 WHERE id = 4")

    waiter = connect("app")
    result = {}

    def redeliver():
        try:
            result["claim"] = handle(waiter, "loyalty", "evt-4", 4, 30)
        except psycopg2.Error as e:
            result["claim"] = e.pgcode

    thread = threading.Thread(target=redeliver)
    thread.start()
    out["waited"] = wait_for_lock_wait(admin, waiter.get_backend_pid())
    out["terminated"] = terminate(admin, dying.get_backend_pid())
    thread.join(timeout)
    out["redelivery"] = result.get("claim", "still waiting")
    app = connect("app")
    out["again"] = handle(app, "loyalty", "evt-4", 4, 30)
    out["points"] = points(app, 4)

elif scenario == "privileges":
    app = connect("app")
    out["claim"] = handle(app, "loyalty", "evt-5", 1, 1)
    out["select"] = error_of(app, "SELECT * FROM processed_messages")
    out["insert"] = error_of(
        app, "INSERT INTO processed_messages (consumer_name, message_id) "
             "VALUES ('loyalty', 'forged')")
    out["update"] = error_of(
        app, "UPDATE processed_messages SET message_id = 'x'")
    out["delete"] = error_of(app, "DELETE FROM processed_messages")
    out["truncate"] = error_of(app, "TRUNCATE processed_messages")
    # the claim still holds after all those attempts
    out["claim_again"] = handle(app, "loyalty", "evt-5", 1, 1)

else:
    sys.exit("unknown scenario " + scenario)

print(json.dumps(out, sort_keys=True))
PYTHON

# run one scenario; returns the decoded JSON it printed
sub scenario
{
	my ($name) = @_;
	my ($stdout, $stderr);
	my $ok = IPC::Run::run(
		[
			$python, $script, $node->host, $node->port, $db, $name,
			$PostgreSQL::Test::Utils::timeout_default
		],
		'>',
		\$stdout,
		'2>',
		\$stderr,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	ok($ok, "$name: python scenario ran") or diag($stderr);
	note("$name: $stdout");
	my $result = eval { decode_json($stdout) } // {};
	return $result;
}

sub points
{
	my ($wallet) = @_;
	return $node->safe_psql($db,
		"SELECT points FROM wallet WHERE id = $wallet");
}

sub claims
{
	my ($consumer, $message_id) = @_;
	return $node->safe_psql($db,
		"SELECT count(*) FROM processed_messages WHERE consumer_name = '$consumer' AND message_id = '$message_id'"
	);
}

my $r;

# --- no privileges until EXECUTE is granted ------------------------------------

$r = scenario('no-execute');
is($r->{claim}, '42501', 'app cannot claim without EXECUTE on dedup_claim');
$node->safe_psql($db,
	'GRANT EXECUTE ON FUNCTION dedup_claim(text, text) TO app');

# --- redelivery ---------------------------------------------------------------------

$r = scenario('redelivery');
is( join(',',
		map { !defined $_ ? 'undef' : $_ ? 'true' : 'false' }
		  @$r{qw(first second other_consumer after_reconnect)}),
	'true,false,true,false',
	'redelivery: first delivery true, redeliveries false (also after reconnecting), other consumer true'
);
is($r->{points}, 125, 'redelivery: points as seen by the client');
is(points(1), '125',  'redelivery: loyalty effect applied once, audit once');
is(claims('loyalty', 'evt-1'), '1', 'redelivery: one claim recorded');

# --- consumer dies between claim and commit ---------------------------------------

$r = scenario('crash-close');
is($r->{dying_claim}, JSON::PP::true,
	'crash-close: the dying consumer had claimed the message');
is($r->{redelivery}, JSON::PP::true,
	'crash-close: the redelivery claims again (the claim died with its transaction)'
);
is($r->{again}, JSON::PP::false,
	'crash-close: a further redelivery is a duplicate');
is(points(2), '50', 'crash-close: effect applied exactly once');
is(claims('loyalty', 'evt-2'), '1', 'crash-close: one claim recorded');

$r = scenario('crash-terminate');
is($r->{dying_claim}, JSON::PP::true,
	'crash-terminate: the dying consumer had claimed the message');
is($r->{terminated}, JSON::PP::true,
	'crash-terminate: its backend was terminated');
isnt($r->{commit}, 'committed', 'crash-terminate: its commit failed');
is($r->{redelivery}, JSON::PP::true,
	'crash-terminate: the redelivery claims again');
is($r->{again}, JSON::PP::false,
	'crash-terminate: a further redelivery is a duplicate');
is(points(3), '70', 'crash-terminate: effect applied exactly once');
is(claims('loyalty', 'evt-3'), '1', 'crash-terminate: one claim recorded');

$r = scenario('crash-while-redelivered');
is($r->{dying_claim}, JSON::PP::true,
	'crash-while-redelivered: the dying consumer had claimed the message');
is($r->{waited}, JSON::PP::true,
	'crash-while-redelivered: the concurrent redelivery waited on that claim'
);
is($r->{terminated}, JSON::PP::true,
	'crash-while-redelivered: the claiming backend was terminated');
is($r->{redelivery}, JSON::PP::true,
	'crash-while-redelivered: the waiting redelivery then claims the message'
);
is($r->{again}, JSON::PP::false,
	'crash-while-redelivered: a further redelivery is a duplicate');
is(points(4), '30', 'crash-while-redelivered: effect applied exactly once');
is(claims('loyalty', 'evt-4'),
	'1', 'crash-while-redelivered: one claim recorded');

# --- app reaches processed_messages only through dedup_claim --------------------------

$r = scenario('privileges');
is($r->{claim}, JSON::PP::true,
	'privileges: app can claim with only EXECUTE');
is($r->{claim_again}, JSON::PP::false,
	'privileges: and its claim is recorded');
for my $op (qw(select insert update delete truncate))
{
	is($r->{$op}, '42501',
		"privileges: app cannot $op processed_messages directly");
}
is( $node->safe_psql(
		$db,
		q{SELECT count(*) FROM processed_messages WHERE message_id IN ('forged', 'x')}
	),
	'0',
	'privileges: no forged or altered claim');
is($node->safe_psql($db, 'SELECT count(*) FROM processed_messages'),
	'6', 'privileges: all claims are still there, nothing else');

$node->stop;
done_testing();
