#
# 018_audit.pl: every change of a retention window, and every record
# deleted by dedup_sweep(), is in the server log.
#
# A maintenance role with the README's grants can erase a keep-forever
# consumer's records with dedup_set_retention(c, '1 microsecond'),
# dedup_sweep(c) and dedup_keep_forever(c): each step leaves a "dedup
# audit:" line naming the calling role (not the owner of the SECURITY
# DEFINER functions) and the session user, the consumer and the old and new
# windows or the records swept.  The trigger behind the window lines also
# audits dedup_reset_retention, dedup_retire_consumer, a superuser's own
# INSERT, UPDATE, DELETE and TRUNCATE, and does so with
# session_replication_role = replica.  Claims and sweeps work with it.
#
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupNode;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = DedupNode->create('audit', preload => 0);
$node->safe_psql(
	'postgres', q{
CREATE EXTENSION dedup;
CREATE ROLE ops;
GRANT EXECUTE ON FUNCTION dedup_set_retention(text, interval),
	dedup_keep_forever(text), dedup_reset_retention(text),
	dedup_sweep(text), dedup_sweeper_wake() TO ops;
CREATE ROLE app;
GRANT EXECUTE ON FUNCTION dedup_claim(text, text) TO app;
});
my $session_user = $node->safe_psql('postgres', 'SELECT session_user');
my $audit        = 'LOG:  dedup audit: role';
my $ops          = qr/\Q$audit\E 'ops' \(session user '\Q$session_user\E'\)/;
my $su =
  qr/\Q$audit\E '\Q$session_user\E' \(session user '\Q$session_user\E'\)/;

# the ledger is kept forever; three records, a day apart
my $offset = -s $node->logfile;
$node->safe_psql(
	'postgres', q{
SELECT dedup_keep_forever('ledger');
INSERT INTO processed_messages (consumer_name, message_id, processed_at)
	 VALUES ('ledger', 'l-1', now() - interval '3 days'),
			('ledger', 'l-2', now() - interval '2 days'),
			('ledger', 'l-3', now() - interval '1 day');
});

# the erasure, by the maintenance role
is( $node->safe_psql(
		'postgres', q{
SET ROLE ops;
SELECT dedup_set_retention('ledger', '1 microsecond');
SELECT dedup_sweep('ledger');
SELECT dedup_keep_forever('ledger');
SELECT dedup_sweep('ledger');
}),
	"\n2\n\n0",
	'a maintenance role sweeps a keep-forever consumer through a tiny window'
);
my $log = $node->log_since($offset);
like(
	$log,
	qr/$su changed the retention window of consumer 'ledger' from dedup\.retention \(the default\) to forever in transaction \d+\n/,
	'log: dedup_keep_forever of a consumer on the default');
like(
	$log,
	qr/$ops changed the retention window of consumer 'ledger' from forever to interval '00:00:00\.000001' in transaction \d+\n/,
	'log: dedup_set_retention, old and new window, the calling role');
like(
	$log,
	qr/$ops swept 2 expired records of consumer 'ledger' claimed before [^\n]+ in transaction \d+\n/,
	'log: dedup_sweep, with the rows deleted');
like(
	$log,
	qr/$ops changed the retention window of consumer 'ledger' from interval '00:00:00\.000001' to forever in transaction \d+\n/,
	'log: dedup_keep_forever back');
is($node->log_count($offset, qr/\Q$audit\E/),
	4, 'three window changes and one sweep that deleted something');

# every other path: reset, retire, a superuser's own statements, a rename
$offset = -s $node->logfile;
$node->safe_psql(
	'postgres', q{
SET ROLE ops;
SELECT dedup_set_retention('svc', '2 days');
SELECT dedup_reset_retention('svc');
RESET ROLE;
SELECT dedup_retire_consumer('ledger');
INSERT INTO dedup_retention VALUES ('direct', '1 hour');
UPDATE dedup_retention SET retention = NULL WHERE consumer_name = 'direct';
UPDATE dedup_retention SET consumer_name = 'renamed';
DELETE FROM dedup_retention;
});
$log = $node->log_since($offset);
like(
	$log,
	qr/$ops changed the retention window of consumer 'svc' from interval '2 days' to dedup\.retention \(the default\) in transaction \d+\n/,
	'log: dedup_reset_retention');
like(
	$log,
	qr/$su changed the retention window of consumer 'ledger' from forever to dedup\.retention \(the default\) in transaction \d+\n/,
	'log: dedup_retire_consumer');
like(
	$log,
	qr/$su changed the retention window of consumer 'direct' from dedup\.retention \(the default\) to interval '01:00:00' in transaction \d+\n/,
	'log: a direct INSERT');
like(
	$log,
	qr/$su changed the retention window of consumer 'direct' from interval '01:00:00' to forever in transaction \d+\n/,
	'log: a direct UPDATE');
like(
	$log,
	qr/$su changed the retention window of consumer 'direct' from forever to dedup\.retention \(the default\) in transaction \d+\n[^\n]*$su changed the retention window of consumer 'renamed' from dedup\.retention \(the default\) to forever in transaction \d+\n/,
	'log: a rename is one consumer back on the default and another off it');
like(
	$log,
	qr/$su changed the retention window of consumer 'renamed' from forever to dedup\.retention \(the default\) in transaction \d+\n/,
	'log: a direct DELETE');

# with session_replication_role = replica (as logical replication applies)
$offset = -s $node->logfile;
$node->safe_psql(
	'postgres', q{
SET session_replication_role = replica;
INSERT INTO dedup_retention VALUES ('replica', '5 minutes'), ('replica-2', NULL);
TRUNCATE dedup_retention;
});
$log = $node->log_since($offset);
like(
	$log,
	qr/$su changed the retention window of consumer 'replica' from dedup\.retention \(the default\) to interval '00:05:00' in transaction \d+\n/,
	'log: an INSERT with session_replication_role = replica');
like(
	$log,
	qr/$su changed the retention window of consumer 'replica' from interval '00:05:00' to dedup\.retention \(the default\) in transaction \d+\n/,
	'log: TRUNCATE, each window it removes');
like(
	$log,
	qr/$su changed the retention window of consumer 'replica-2' from forever to dedup\.retention \(the default\) in transaction \d+\n/,
	'log: TRUNCATE of a keep-forever window');

# claims and sweeps work with the triggers on dedup_retention
is( $node->safe_psql(
		'postgres', q{
SET ROLE app;
SELECT dedup_claim('svc', 'e-1'), dedup_claim('svc', 'e-1');
RESET ROLE;
SET ROLE ops;
SELECT dedup_sweep();
}),
	"t|f\n0",
	'claims and a sweep of every consumer work with the audit triggers');

# the trigger function refuses any other use
my ($ret, $out, $err) = $node->psql(
	'postgres', q{
CREATE TABLE look_alike (consumer_name text, retention interval);
CREATE TRIGGER t AFTER INSERT ON look_alike
	FOR EACH ROW EXECUTE FUNCTION dedup_retention_audit();
INSERT INTO look_alike VALUES ('x', '1 day');
});
like(
	$err,
	qr/ERROR:  function dedup_retention_audit can only be a trigger of table dedup_retention of extension "dedup"/,
	'the trigger function refuses another table');
($ret, $out, $err) = $node->psql(
	'postgres', q{
CREATE TRIGGER t BEFORE INSERT ON dedup_retention
	FOR EACH ROW EXECUTE FUNCTION dedup_retention_audit();
INSERT INTO dedup_retention VALUES ('x', '1 day');
});
like(
	$err,
	qr/ERROR:  function dedup_retention_audit must be fired AFTER each row or BEFORE TRUNCATE/,
	'the trigger function refuses to be a BEFORE row trigger');
($ret, $out, $err) = $node->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT dedup_retention_audit()");
like(
	$err,
	qr/ERROR:  39P01: function dedup_retention_audit must be called as a trigger/,
	'the trigger function refuses a direct call');

$node->stop;
done_testing();
