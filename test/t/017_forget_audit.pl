#
# 017_forget_audit.pl: replaying on purpose leaves a trace.
#
# dedup_forget, dedup_forget_since and dedup_retire_consumer each write a
# LOG line naming the role that called them (the session's role, also
# through the SECURITY DEFINER dedup_retire_consumer), the consumer, and
# the message id or what was forgotten; a role that was only granted
# EXECUTE on them can use them; application roles cannot, by default.
#
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupTest;

my $node = PostgreSQL::Test::Cluster->new('forget');
$node->init;
$node->start;
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

my $offset = -s $node->logfile;
is( $node->safe_psql(
		'postgres', q{
SET ROLE replayer;
SELECT dedup_forget('payments', 'pay-1'), dedup_forget('payments', 'never'),
	   dedup_forget_since('payments', '-infinity'),
	   dedup_retire_consumer('old-service');
}),
	't|f|2|1',
	'a role with EXECUTE only forgets a record, the records since a time and a consumer');
my $log = log_from($node, $offset);
like($log,
	qr/LOG:  dedup: role "replayer" forgot message id "pay-1" of consumer "payments"\n/,
	'log: dedup_forget, with the role, the message id and the consumer');
like($log,
	qr/LOG:  dedup: role "replayer" forgot message id "never" of consumer "payments" \(no such record\)/,
	'log: a dedup_forget that found nothing says so');
like($log,
	qr/LOG:  dedup: role "replayer" forgot 2 records of consumer "payments" claimed since -infinity/,
	'log: dedup_forget_since, with the count and the time');
like($log,
	qr/LOG:  dedup: role "replayer" forgot 1 records of consumer "old-service" claimed since -infinity/,
	'log: dedup_retire_consumer names the calling role, not the function owner');
is($node->safe_psql('postgres', 'SELECT count(*) FROM processed_messages'),
	'0', 'every record is gone');

# an application role may claim, not forget
my ($ret, $out, $err) = $node->psql('postgres',
	q{SET ROLE app; SELECT dedup_forget('payments', 'pay-2')});
like($err, qr/permission denied for function dedup_forget/,
	'an application role cannot forget');

$node->stop;
done_testing();
