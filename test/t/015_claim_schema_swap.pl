#
# 015_claim_schema_swap.pl: claims never land outside the real table.
#
# The owner of the schema dedup is installed in (a database owner owns
# "public" on PostgreSQL 15) renames it and puts a look-alike schema in its
# place, with a processed_messages and a dedup_retention whose triggers log
# who ran them -- the attack that turned 1.0's saved claim plan, re-parsed by
# name, into the owner's code running as a superuser.  The swap is repeated
# back and forth while pgbench clients (superusers, the look-alike first on
# their search_path) claim, set windows and sweep.  Afterwards:
#   - the look-alike tables are empty and no trigger ever ran;
#   - every claim pgbench made is in the real table, exactly once.
#
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupNode;
use PostgreSQL::Test::Utils;
use Test::More;

my $clients = 4;
my $swaps   = 40;

# long enough to outlast the swaps on a loaded machine; pgbench ends by itself.
# At most 200 claims a second: each swap waits for five, and full speed would
# only take the cores that a loaded machine gives the swaps
my $pgbench_seconds = 20;
my $pgbench_rate    = 200;

my $node = DedupNode->create(
	'swap',
	preload => 0,
	conf    => { max_connections => 30 });

$node->safe_psql(
	'postgres', q{
CREATE ROLE owner LOGIN;
GRANT CREATE ON DATABASE postgres TO owner;
CREATE SCHEMA app AUTHORIZATION owner;
CREATE EXTENSION dedup SCHEMA app;
CREATE TABLE public.trap_ran (what text, by_whom name DEFAULT current_user);
GRANT INSERT ON public.trap_ran TO PUBLIC;
});

# the trap, built by the owner in advance: same names, triggers that log
$node->safe_psql(
	'postgres', q{
SET ROLE owner;
CREATE SCHEMA trap;
CREATE TABLE trap.processed_messages (consumer_name text, message_id text,
	processed_at timestamptz DEFAULT now(), PRIMARY KEY (consumer_name, message_id));
CREATE TABLE trap.dedup_retention (consumer_name text PRIMARY KEY, retention interval);
CREATE FUNCTION trap.log() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO public.trap_ran (what) VALUES (TG_TABLE_NAME || ' ' || TG_OP);
	RETURN NEW;
END $$;
CREATE TRIGGER log BEFORE INSERT OR UPDATE OR DELETE ON trap.processed_messages
	FOR EACH ROW EXECUTE FUNCTION trap.log();
CREATE TRIGGER log BEFORE INSERT OR UPDATE OR DELETE ON trap.dedup_retention
	FOR EACH ROW EXECUTE FUNCTION trap.log();
GRANT ALL ON SCHEMA trap TO PUBLIC;
GRANT ALL ON ALL TABLES IN SCHEMA trap TO PUBLIC;
});

# pgbench: warm backends claiming unqualified, whichever schema is called
# "app" at the moment first on the search_path, plus maintenance calls.
# "app" comes twice: a backend resolves the names of its path one by one,
# and may see a swap commit between two of them (one name from its cache,
# the next read after the commit); with app, app_real, app, the real schema
# is on the path whichever names it saw before the commit and which after,
# so that a client never fails to find dedup_claim at all.
my $script = $node->basedir . '/claim.sql';
PostgreSQL::Test::Utils::append_to_file(
	$script, q{
\set n random(1, 1000000000)
SET search_path = app, app_real, app, trap_parked;
SELECT dedup_claim('svc', 'c' || :client_id || '-' || :n);
SELECT dedup_set_retention('svc', '7 days');
SELECT dedup_sweep('svc');
INSERT INTO public.claimed_log VALUES ('c' || :client_id || '-' || :n);
});
$node->safe_psql('postgres',
	'CREATE TABLE claimed_log (id text); GRANT ALL ON claimed_log TO PUBLIC');

my @cmd = (
	'pgbench', '-n',          '-h', $node->host,
	'-p',      $node->port,   '-c', $clients,
	'-j',      2,             '-T', $pgbench_seconds,
	'-R',      $pgbench_rate, '-f', $script,
	'postgres');
my $pgbench_err = $node->basedir . '/pgbench.err';
my $stdout      = '';
my $pgbench     = IPC::Run::start(\@cmd, '>', \$stdout, '2>', $pgbench_err);

# let the clients warm up, then swap back and forth
$node->poll_query_until('postgres', 'SELECT count(*) > 20 FROM claimed_log')
  or die 'pgbench made no claims: ' . slurp_file($pgbench_err);
my $claims_before =
  $node->safe_psql('postgres', 'SELECT count(*) FROM claimed_log');

# Each swap commits, and stays until the clients have committed claims with
# the look-alike in place: one more than there are clients, so that at
# least one claim began after the swap.  (In a DO block: every query of it
# sees the clients' commits.)
my $timeout = $PostgreSQL::Test::Utils::timeout_default;
$node->safe_psql(
	'postgres', qq{
SET ROLE owner;
DO \$\$
DECLARE
	seen bigint;
	deadline timestamptz;
BEGIN
	FOR i IN 1 .. $swaps LOOP
		ALTER SCHEMA app RENAME TO app_real;
		ALTER SCHEMA trap RENAME TO app;
		COMMIT;
		seen := (SELECT count(*) FROM public.claimed_log);
		deadline := clock_timestamp() + interval '$timeout s';
		WHILE (SELECT count(*) FROM public.claimed_log) <= seen + $clients LOOP
			IF clock_timestamp() > deadline THEN
				RAISE EXCEPTION 'swap %: the clients made no claim in $timeout s', i;
			END IF;
			PERFORM pg_sleep(0.01);
		END LOOP;
		ALTER SCHEMA app RENAME TO trap_parked;
		ALTER SCHEMA app_real RENAME TO app;
		ALTER SCHEMA trap_parked RENAME TO trap;
		COMMIT;
	END LOOP;
END
\$\$;
});
my $claims_during_swaps =
  $node->safe_psql('postgres', 'SELECT count(*) FROM claimed_log') -
  $claims_before;
$pgbench->finish;
note("pgbench: $stdout");
my $stderr = slurp_file($pgbench_err);
unlike($stderr, qr/ERROR|aborted/, 'pgbench clients saw no errors')
  or diag($stderr);

# ... and once more with the swap left in place, from a fresh backend
$node->safe_psql(
	'postgres', q{
SET ROLE owner;
ALTER SCHEMA app RENAME TO app_real;
ALTER SCHEMA trap RENAME TO app;
});
is( $node->safe_psql(
		'postgres', q{
SET search_path = app, app_real;
SELECT dedup_claim('svc', 'after-swap'), dedup_set_retention('svc', '1 day') IS NULL;
INSERT INTO public.claimed_log VALUES ('after-swap');
}),
	"t|t",
	'a fresh backend claims and sets windows with the look-alike first on its path'
);

cmp_ok($claims_during_swaps, '>', 0,
	"pgbench committed $claims_during_swaps claims during $swaps swaps");
is($node->safe_psql('postgres', 'SELECT count(*) FROM public.trap_ran'),
	'0', 'no trigger of the look-alike ever ran');
is( $node->safe_psql(
		'postgres', 'SELECT count(*) FROM app.processed_messages'),
	'0',
	'no claim landed in the look-alike processed_messages');
is( $node->safe_psql('postgres', 'SELECT count(*) FROM app.dedup_retention'),
	'0',
	'no window landed in the look-alike dedup_retention');
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM claimed_log l
 WHERE NOT EXISTS (SELECT FROM app_real.processed_messages m
                    WHERE m.consumer_name = 'svc' AND m.message_id = l.id)}),
	'0',
	'every committed claim is in the real processed_messages');
is( $node->safe_psql(
		'postgres',
		q{SELECT retention FROM app_real.dedup_retention WHERE consumer_name = 'svc'}
	),
	'1 day',
	'windows were written to the real dedup_retention');

$node->stop;
done_testing();
