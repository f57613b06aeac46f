#
# 086_outbox_chain_wal.pl: exactly once across two services joined by the
# outbox in wal mode and dedup_relay, with a kill -9 of each service, the
# relay dying before and after the broker's confirm, a broker restart and
# an immediate PostgreSQL restart (test/perl/DedupOutboxChain.pm says what
# runs and what is asserted).
#
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl";
use DedupOutboxChain;
use Test::More;

run_chain('wal');
done_testing();
