#
# 017_forget_audit.pl: replaying on purpose leaves a trace.
#
# dedup_forget, dedup_forget_since and dedup_retire_consumer each write a
# LOG line "dedup audit: ..." naming the role that called them (also
# through the SECURITY DEFINER dedup_retire_consumer) and the session user,
# the consumer, the message id or what was forgotten, and the transaction;
# a role that was only granted EXECUTE on them can use them; application
# roles cannot, by default.  Names and ids are SQL literals on one line: a
# hostile message id can neither start a log line of its own nor make its
# line blame another consumer, and reads back exactly.
#
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupNode;
use PostgreSQL::Test::Utils;
use Test::More;

# only dedup's own lines: the statements, which log_statement would write
# too, hold the hostile text below
my $node = DedupNode->create(
	'forget',
	preload => 0,
	conf    => { log_statement => 'none' });
$node->safe_psql(
	'postgres', q{
CREATE EXTENSION dedup;
CREATE ROLE replayer;
CREATE ROLE app;
GRANT EXECUTE ON FUNCTION dedup_claim(text, text) TO app;
GRANT EXECUTE ON FUNCTION dedup_forget(text, text),
	dedup_forget_since(text, timestamptz), dedup_retire_consumer(text) TO replayer;
SELECT dedup_claim('payments', 'pay-1'), dedup_claim('payments', 'pay-2'),
	   dedup_claim('payments', 'pay-3'), dedup_claim('old-service', 'x-1');
});
my $session_user = $node->safe_psql('postgres', 'SELECT session_user');

my $offset = -s $node->logfile;
is( $node->safe_psql(
		'postgres', q{
SET ROLE replayer;
SELECT dedup_forget('payments', 'pay-1'), dedup_forget('payments', 'never'),
	   dedup_forget_since('payments', '-infinity'),
	   dedup_retire_consumer('old-service');
}),
	't|f|2|1',
	'a role with EXECUTE only forgets a record, the records since a time and a consumer'
);
my $log = $node->log_since($offset);
my $who =
  qr/LOG:  dedup audit: role 'replayer' \(session user '\Q$session_user\E'\)/;
like(
	$log,
	qr/$who deleted the record of message id 'pay-1' of consumer 'payments' in transaction \d+\n/,
	'log: dedup_forget, with the roles, the message id, the consumer and the transaction'
);
like(
	$log,
	qr/$who found no record of message id 'never' of consumer 'payments' to forget\n/,
	'log: a dedup_forget that found nothing says so');
like(
	$log,
	qr/$who deleted 2 records of consumer 'payments' claimed since -infinity in transaction \d+\n/,
	'log: dedup_forget_since, with the count and the time');
like(
	$log,
	qr/$who deleted 1 record of consumer 'old-service' claimed since -infinity in transaction \d+\n/,
	'log: dedup_retire_consumer names the calling role, not the function owner'
);
is($node->safe_psql('postgres', 'SELECT count(*) FROM processed_messages'),
	'0', 'every record is gone');

# an application role may claim, not forget
my ($ret, $out, $err) = $node->psql('postgres',
	q{SET ROLE app; SELECT dedup_forget('payments', 'pay-2')});
like(
	$err,
	qr/permission denied for function dedup_forget/,
	'an application role cannot forget');

# A forged line: a message id that closes the quotes and blames another
# consumer, then starts log lines of its own, with quotes, backslashes and
# control characters.
my $hostile =
  q{'pay-1" of consumer "test-sandbox" (no such record)' || chr(10) ||
	'2026-12-04 17:00:00.000 UTC [1] LOG:  dedup audit: role ''x'' (session user ''x'') found no record of message id ''y'' of consumer ''test-sandbox'' to forget'
	|| chr(13) || chr(10) || 'FORGED' || chr(92) || chr(9) || '''' || chr(1)
	|| chr(127) || chr(27) || '[2J' || chr(92) || 'n' || chr(92) || ''''};
$node->safe_psql('postgres',
	"INSERT INTO processed_messages (consumer_name, message_id) VALUES ('payments', $hostile)"
);
$offset = -s $node->logfile;
is( $node->safe_psql(
		'postgres',
		"SET ROLE replayer; SELECT dedup_forget('payments', $hostile)"),
	't',
	'a hostile message id is forgotten');
$log = $node->log_since($offset);
my @audit = grep { /dedup audit:/ } split /\n/, $log;
is(scalar @audit, 1, 'one audit line for the hostile id') or diag $log;

# (the stderr log indents the lines after a line break in a message)
unlike(
	$log,
	qr/^\s*(?:2026-12-04 17:00:00\.000|FORGED)/m,
	'no log line begins with the injected text');
my $literal = qr/E?'(?:[^']|'')*'/;
my ($id_literal) = $audit[0] =~
  /$who deleted the record of message id ($literal) of consumer 'payments' in transaction \d+$/;
ok(defined $id_literal, 'the audit line blames the right consumer')
  or diag $audit[0];
like($id_literal // '', qr/^E'/, 'the id is written as an escaped literal');
is($node->safe_psql('postgres', "SELECT $id_literal = ($hostile)"),
	't', 'the id in the audit line reads back exactly');

# the role set by SET ROLE and the session user, both quoted
$node->safe_psql(
	'postgres', q{
CREATE ROLE "maint'ops";
GRANT EXECUTE ON FUNCTION dedup_forget(text, text) TO "maint'ops";
});
$offset = -s $node->logfile;
$node->safe_psql('postgres',
	q{SET ROLE "maint'ops"; SELECT dedup_forget('payments', 'pay-9')});
like(
	$node->log_since($offset),
	qr/LOG:  dedup audit: role 'maint''ops' \(session user '\Q$session_user\E'\) found no record of message id 'pay-9' of consumer 'payments' to forget\n/,
	'log: a role set with SET ROLE, beside the session user');

$node->stop;
done_testing();
