#
# 081_outbox.pl: the outbox where pg_regress cannot reach it (sql/outbox.sql
# has the rest).
#
# One node with dedup preloaded, wal_level logical, sweeps on request.
#
#   1. WAL mode: what dedup_publish() writes is a transactional logical
#      decoding message with the prefix 'dedup', its signature line
#      (HMAC-SHA256 with the database's key over the transaction id and the
#      JSON) and the JSON content of the spec, read back with test_decoding
#      and pgoutput (messages 'true'):
#      committed messages only (not those rolled back, nor those rolled
#      back to a savepoint), ids derived from the claim, nothing stored in
#      dedup_outbox; dedup_outbox_slots shows the slot and how far behind it
#      is.
#   2. The retention worker deletes the sent messages older than
#      dedup.outbox_retention, in batches of dedup.sweep_batch_size (each
#      batch's DELETE counted by a statement trigger on dedup_outbox: 5
#      messages in batches of 2 are deleted as 2, 2 and 1, not at once),
#      counted in dedup_sweeper; unsent messages stay however old, and so do
#      sent ones within the window; dedup.outbox_retention = -1 keeps them
#      all.
#   3. dedup_outbox_resend() and dedup_outbox_retry() as an operator's
#      role: the audit line names the role outside the SECURITY DEFINER
#      function and the session user, the message id as a literal that
#      cannot break the line, the seq and the transaction; a second call
#      finds nothing to do and says so.
#   4. pg_dump and pg_restore: the destinations, the mapping, the unsent
#      messages and the dead letters are restored, the sent ones are not,
#      nor the signing key (the restored database makes its own), and seq
#      goes on past the restored messages.
#   5. dedup_publish writes dedup_outbox directly (no SQL statement) while
#      the table is as dedup made it, and through an INSERT (SPI) otherwise:
#      with auto_explain logging nested statements in one session, a
#      publish on the untouched table logs no INSERT plan of dedup_outbox,
#      one with a CHECK constraint added logs one, and one after the
#      constraint is dropped none again (each publish followed by a marker
#      the session logs, so that the absence is read up to the marker, not
#      waited for).
#
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupNode;
use PostgreSQL::Test::Utils;
use Test::More;
use Digest::SHA qw(hmac_sha256_hex);
use JSON::PP;

my $node = DedupNode->create(
	'outbox',
	sweeps => 'on request',
	conf   => {
		wal_level             => 'logical',
		max_replication_slots => 4,
		max_wal_senders       => 4
	});
$node->safe_psql(
	'postgres', q{
CREATE SCHEMA dedup;
CREATE EXTENSION dedup SCHEMA dedup;
ALTER DATABASE postgres SET search_path = public, dedup;
});

###############################################################################
note('1. WAL mode');

$node->safe_psql(
	'postgres', q{
SELECT dedup_add_destination('events', 'wal');
CREATE PUBLICATION outbox_pub;
SELECT pg_create_logical_replication_slot('outbox_text', 'test_decoding');
SELECT pg_create_logical_replication_slot('outbox_pgoutput', 'pgoutput');
});
my $ids = $node->safe_psql(
	'postgres', q{
BEGIN;
SELECT dedup_claim('billing', 'in-1');
SELECT dedup_publish('events', E'charged "42"\n', 'cust-1', '{"type": "charged"}');
SAVEPOINT s;
SELECT dedup_publish('events', 'rolled back to a savepoint');
ROLLBACK TO s;
SELECT dedup_publish('events', 'second');
COMMIT;
BEGIN;
SELECT dedup_publish('events', 'rolled back');
ROLLBACK;
});
my @ids = grep { /^[0-9a-f-]{36}$/ } split /\n/, $ids;
is(scalar(@ids), 4, 'an id for each of the four publishes');

# each message, "dedup-v1 " and its HMAC-SHA256 signature on a line of its
# own, then the JSON: signed with the database's key over the id of the
# transaction that test_decoding's BEGIN line gives, and the JSON
my $key = pack(
	'H*',
	$node->safe_psql(
		'postgres',
		q{SELECT encode(key, 'hex') FROM dedup_outbox_signing_key}));
my (@content, $xid);
foreach my $change (
	split /\x1e/,
	$node->safe_psql(
		'postgres', q{
SELECT string_agg(data, E'\x1e')
  FROM pg_logical_slot_get_changes('outbox_text', NULL, NULL)}))
{
	$xid = $1 if $change =~ /^BEGIN (\d+)$/;
	next
	  unless $change =~
	  /^message: transactional: 1 prefix: dedup, sz: \d+ content:dedup-v1 ([0-9a-f]{64})\n(.*)$/s;
	my ($mac, $json) = ($1, $2);
	is( $mac,
		hmac_sha256_hex("$xid\n$json", $key),
		"message of transaction $xid: signed with the key, over its transaction id and its JSON"
	);
	push @content, $json;
}
my $decoded = join "\n", map {
	my $c = decode_json($_);
	join '|', map { $_ // '' } $c->{id}, $c->{destination}, $c->{key},
	  ( defined $c->{headers}
		? JSON::PP->new->canonical->encode($c->{headers})
		: 'null'),
	  $c->{payload}
} @content;
is( $decoded,
	"$ids[0]|events|cust-1|{\"type\":\"charged\"}|charged \"42\"\n\n"
	  . "$ids[2]|events||null|second",
	'test_decoding: the two committed messages, transactional, prefix dedup, the JSON content (key and headers null when not given)'
);
is( $node->safe_psql(
		'postgres', q{
SELECT $1 = (SELECT regexp_replace(overlay(overlay(encode(substr(d, 1, 16), 'hex') PLACING '8' FROM 13 FOR 1)
		PLACING substr('89ab', (get_byte(d, 8) >> 4 & 3) + 1, 1) FROM 17 FOR 1),
		'^(.{8})(.{4})(.{4})(.{4})(.{12})$', '\1-\2-\3-\4-\5')
  FROM sha256('dedup-outbox-v1'::bytea || '\x00'::bytea
	|| int4send(7) || convert_to('billing', 'UTF8') || int4send(4) || convert_to('in-1', 'UTF8')
	|| int4send(6) || convert_to('events', 'UTF8') || int4send(3)) h(d))} =~
		  s/\$1/'$ids[2]'/r),
	't',
	'the second committed message: derived from the claim, the third publish since it (the one rolled back counts)'
);

is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FILTER (WHERE get_byte(data, 0) = ascii('M')
						 AND position(convert_to('dedup', 'UTF8') || '\x00'::bytea IN data) > 0
						 AND position(convert_to('"payload": "second"', 'UTF8') IN data) > 0),
	   count(*) FILTER (WHERE position(convert_to('rolled back', 'UTF8') IN data) > 0)
  FROM pg_logical_slot_get_binary_changes('outbox_pgoutput', NULL, NULL,
		'proto_version', '1', 'publication_names', 'outbox_pub', 'messages', 'true')}
	),
	'1|0',
	'pgoutput (messages true): the committed message as a Message record with prefix dedup, none of the rolled back ones'
);
is($node->safe_psql('postgres', 'SELECT count(*) FROM dedup_outbox'),
	'0', 'WAL mode stores nothing in dedup_outbox');

$node->safe_psql('postgres',
	q{SELECT dedup_publish('events', repeat('x', 100000))});
is( $node->safe_psql(
		'postgres', q{
SELECT slot_name, plugin, lag_bytes > 100000, wal_status
  FROM dedup_outbox_slots ORDER BY slot_name}),
	"outbox_pgoutput|pgoutput|t|reserved\noutbox_text|test_decoding|t|reserved",
	'dedup_outbox_slots: both slots, behind by the message not read yet');
$node->safe_psql(
	'postgres', q{
SELECT count(*) FROM pg_logical_slot_get_changes('outbox_text', NULL, NULL);
SELECT pg_drop_replication_slot('outbox_text');
SELECT pg_drop_replication_slot('outbox_pgoutput');
});

###############################################################################
note('2. the retention worker');

$node->safe_psql(
	'postgres', q{
SELECT dedup_add_destination('q');
SELECT dedup_publish('q', 'm' || i) FROM generate_series(1, 9) i;
-- 5 sent two hours ago, 1 sent ten minutes ago, 3 unsent (published a year ago)
UPDATE dedup_outbox SET sent_at = now() - interval '2 hours' WHERE seq <= 5;
UPDATE dedup_outbox SET sent_at = now() - interval '10 minutes' WHERE seq = 6;
UPDATE dedup_outbox SET created_at = now() - interval '1 year' WHERE seq > 6;
});
$node->set_config('dedup.outbox_retention', '-1', '-1');
is($node->sweep('postgres'),
	'done', 'a sweep with dedup.outbox_retention = -1');
is($node->safe_psql('postgres', 'SELECT count(*) FROM dedup_outbox'),
	'9', '-1: every message kept');

# each DELETE of the outbox step (one per batch) counts what it deleted
# into outbox_batches, in order: the sweeper's search_path is pg_catalog's,
# so the tables are qualified
$node->safe_psql(
	'postgres', q{
CREATE TABLE public.outbox_batches (
	batch bigint GENERATED ALWAYS AS IDENTITY,
	deleted bigint NOT NULL);
CREATE FUNCTION public.count_outbox_batch() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO public.outbox_batches (deleted) SELECT count(*) FROM deleted_rows;
	RETURN NULL;
END $$;
CREATE TRIGGER count_outbox_batch AFTER DELETE ON dedup.dedup_outbox
	REFERENCING OLD TABLE AS deleted_rows
	FOR EACH STATEMENT EXECUTE FUNCTION public.count_outbox_batch();
});
$node->set_config('dedup.outbox_retention', '1h', '1h');
$node->set_config('dedup.sweep_batch_size', '2',  '2');
my $before = $node->safe_psql('postgres',
	'SELECT total_rows_deleted FROM dedup_sweeper');
is($node->sweep('postgres'),
	'done', 'a sweep with dedup.outbox_retention = 1h');
is( $node->safe_psql(
		'postgres',
		q{SELECT string_agg(deleted::text, ',' ORDER BY batch) FROM outbox_batches}
	),
	'2,2,1',
	'in batches of dedup.sweep_batch_size (2): 2, 2, then the last 1, which ends the step'
);
$node->safe_psql('postgres',
	'DROP TABLE outbox_batches; DROP FUNCTION count_outbox_batch() CASCADE');
is( $node->safe_psql(
		'postgres',
		q{SELECT string_agg(seq || ':' || (sent_at IS NOT NULL), ',' ORDER BY seq) FROM dedup_outbox}
	),
	'6:true,7:false,8:false,9:false',
	'the 5 messages sent two hours ago are deleted; the one sent ten minutes ago and the unsent ones stay'
);
is( $node->safe_psql('postgres',
		'SELECT total_rows_deleted FROM dedup_sweeper') - $before,
	5,
	'dedup_sweeper counts them');
is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FROM dedup_outbox_backlog WHERE destination = 'q' AND unsent = 3}
	),
	'1',
	'dedup_outbox_backlog: 3 unsent');

###############################################################################
note('3. the audited resend');

$node->safe_psql(
	'postgres', q{
CREATE ROLE outbox_ops LOGIN;
GRANT USAGE ON SCHEMA dedup TO outbox_ops;
GRANT EXECUTE ON FUNCTION dedup.dedup_outbox_resend(text) TO outbox_ops;
UPDATE dedup_outbox SET message_id = E'evil\nLOG:  forged', sent_at = now() WHERE seq = 7;
});
my $offset = -s $node->logfile;
is( $node->safe_psql(
		'postgres',
		q{SELECT dedup_outbox_resend(E'evil\nLOG:  forged'), dedup_outbox_resend(E'evil\nLOG:  forged')},
		extra_params => [ '-U', 'outbox_ops' ]),
	't|f',
	'resent once; the second call finds it unsent');
ok( $node->wait_log_count(
		$offset,
		qr/dedup audit: role 'outbox_ops' \(session user 'outbox_ops'\) made outbox message id E'evil\\nLOG:  forged' \(seq 7\) unsent again in transaction \d+/,
		1),
	'the resend is in the server log, with the id quoted on one line');
ok( $node->wait_log_count(
		$offset,
		qr/dedup audit: role 'outbox_ops' \(session user 'outbox_ops'\) found no sent outbox message with id E'evil\\nLOG:  forged' to send again/,
		1),
	'so is the call that found nothing');
is( $node->safe_psql(
		'postgres',
		'SELECT sent_at IS NULL, lease_holder IS NULL FROM dedup_outbox WHERE seq = 7'
	),
	't|t',
	'the message is unsent, without a lease');

# a dead letter retried: the same audit, its new seq
$node->safe_psql(
	'postgres', q{
GRANT EXECUTE ON FUNCTION dedup.dedup_outbox_retry(text) TO outbox_ops;
INSERT INTO dedup_outbox_dead_letters
	   (message_id, seq, destination, key, payload, created_at, attempts, reason)
VALUES (E'dead\nLOG:  forged', 1000, 'orders', NULL, 'refused', now(), 10, '312 NO_ROUTE');
});
$offset = -s $node->logfile;
is( $node->safe_psql(
		'postgres',
		q{SELECT dedup_outbox_retry(E'dead\nLOG:  forged'), dedup_outbox_retry(E'dead\nLOG:  forged')},
		extra_params => [ '-U', 'outbox_ops' ]),
	't|f',
	'retried once; the second call finds no dead letter');
my $new_seq = $node->safe_psql('postgres',
	q{SELECT seq FROM dedup_outbox WHERE message_id = E'dead\nLOG:  forged' AND sent_at IS NULL}
);
ok( $node->wait_log_count(
		$offset,
		qr/dedup audit: role 'outbox_ops' \(session user 'outbox_ops'\) moved the dead letter id E'dead\\nLOG:  forged' \(seq $new_seq\) back into the outbox in transaction \d+/,
		1),
	'the retry is in the server log, with the id quoted on one line and its new seq'
);
ok( $node->wait_log_count(
		$offset,
		qr/dedup audit: role 'outbox_ops' \(session user 'outbox_ops'\) found no dead letter with id E'dead\\nLOG:  forged' to send again/,
		1),
	'so is the call that found none');

###############################################################################
note('4. pg_dump and pg_restore');

my $tmpdir = PostgreSQL::Test::Utils::tempdir;
my @conn   = ('-h', $node->host, '-p', $node->port);
$node->safe_psql(
	'postgres', q{
CREATE ROLE publisher;
SELECT dedup_allow_publisher('q', 'publisher');
INSERT INTO dedup_outbox_dead_letters
	   (message_id, seq, destination, payload, created_at, attempts, reason)
VALUES ('dead-1', 900, 'q', 'kept', now(), 10, 'nacked');
CREATE DATABASE restored;
});
command_ok(
	[ 'pg_dump', @conn, '-Fc', '-f', "$tmpdir/outbox.dump", 'postgres' ],
	'pg_dump -Fc');
command_ok(
	[
		'pg_restore',      @conn,
		'--exit-on-error', '-d',
		'restored',        "$tmpdir/outbox.dump"
	],
	'pg_restore');
is( $node->safe_psql(
		'restored', q{
SET search_path = dedup;
SELECT (SELECT string_agg(destination || ':' || mode, ',' ORDER BY destination) FROM dedup_outbox_destinations),
	   (SELECT string_agg(destination || ':' || publisher, ',') FROM dedup_outbox_publishers),
	   (SELECT string_agg(seq || ':' || payload, ',' ORDER BY seq) FROM dedup_outbox)}
	),
	"events:wal,q:table|q:publisher|7:m7,8:m8,9:m9,$new_seq:refused",
	'restored: the destinations, the mapping, the unsent messages (not the sent one)'
);
is( $node->safe_psql(
		'restored', q{
SET search_path = dedup;
SELECT (SELECT string_agg(message_id || ':' || seq || ':' || reason, ',') FROM dedup_outbox_dead_letters),
	   (SELECT count(*) FROM dedup_outbox_signing_key),
	   (SELECT key FROM dedup_outbox_signing_key) <> $1} =~
		  s/\$1/'\\x@{[unpack('H*', $key)]}'::bytea/r),
	'dead-1:900:nacked|1|t',
	'restored: the dead letters; a signing key of its own, not the dumped database\'s (never dumped)'
);
is( $node->safe_psql(
		'restored', q{
SET search_path = dedup;
SELECT dedup_publish('q', 'after the restore') IS NOT NULL;
SELECT max(seq) > 9 FROM dedup_outbox}),
	"t\nt",
	'a publish after the restore takes a seq past the restored ones');

###############################################################################
note('5. the direct write and the INSERT');

# One session with auto_explain logging every plan, also those of the
# statements dedup_publish runs through SPI (log_nested_statements): a
# publish through SPI logs the plan of its INSERT into dedup_outbox, a direct
# write none.  Each publish is followed by a marker the session logs
# (RAISE LOG) after it: an INSERT plan of that publish is logged before its
# marker, or not at all.
$offset = -s $node->logfile;
$node->safe_psql(
	'postgres', q{
LOAD 'auto_explain';
SET auto_explain.log_min_duration = 0;
SET auto_explain.log_nested_statements = on;
SELECT dedup_publish('q', 'as dedup made the table');
DO $$ BEGIN RAISE LOG 'outbox test marker: untouched'; END $$;
ALTER TABLE dedup_outbox ADD CONSTRAINT short_payload CHECK (length(payload) < 100);
SELECT dedup_publish('q', 'with a CHECK constraint');
DO $$ BEGIN RAISE LOG 'outbox test marker: CHECK added'; END $$;
ALTER TABLE dedup_outbox DROP CONSTRAINT short_payload;
SELECT dedup_publish('q', 'the CHECK constraint dropped');
DO $$ BEGIN RAISE LOG 'outbox test marker: CHECK dropped'; END $$;
});
ok( $node->wait_log_count(
		$offset, qr/LOG:  outbox test marker: CHECK dropped/, 1),
	'the last marker is logged');
my (%inserts, $plans);
my $log  = $node->log_since($offset);
my $from = 0;
while ($log =~ /LOG:  outbox test marker: (.+)$/mg)
{
	my ($marker, $phase) = ($1, substr($log, $from, $-[0] - $from));
	$from = $+[0];
	$inserts{$marker} = () = $phase =~ /Insert on dedup_outbox\s/g;
	$plans += () = $phase =~ /Query Text: SELECT dedup_publish\(/g;
}
is($plans, 3, 'auto_explain logs the plan of each of the three publishes');
is( join(',',
		map { "$_=" . ($inserts{$_} // 'none') } 'untouched',
		'CHECK added', 'CHECK dropped'),
	'untouched=0,CHECK added=1,CHECK dropped=0',
	'the table as dedup made it is written directly (no INSERT plan), with a CHECK constraint through an INSERT, once it is dropped directly again'
);
is( $node->safe_psql(
		'postgres',
		q{SELECT string_agg(payload, ',' ORDER BY seq) FROM dedup_outbox WHERE payload LIKE '%table%' OR payload LIKE '%CHECK%'}
	),
	'as dedup made the table,with a CHECK constraint,the CHECK constraint dropped',
	'each of the three publishes wrote its message');

done_testing();
