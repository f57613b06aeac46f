#
# 085_outbox_chain_table.pl: exactly once across two services joined by the
# outbox in table mode and dedup_relay, with a kill -9 of each service, the
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

run_chain('table');
done_testing();
