#
# test/perl/DedupCitus.pm: the Citus cluster of the TAP tests that need
# Citus (060, 061): a coordinator and two workers, DedupNode clusters with
# shared_preload_libraries = 'citus,dedup', joined over their Unix sockets,
# each with the citus extension.  Citus is not packaged by Debian and is
# built by hand (doc/citus.md): where its extension is not
# installed, the test file is skipped, saying so (CI has none, and
# DEDUP_REQUIRE_TOOLS does not ask for it).
#
#   my ($coordinator, @workers) = DedupCitus::cluster(
#       conf => {name => value},          # every node
#       coordinator => {DedupNode->create options});
#
package DedupCitus;

use strict;
use warnings;

use DedupNode;
use Test::More;

# skip the whole file unless Citus is installed
sub require_citus
{
	my $sharedir = `pg_config --sharedir`;
	chomp $sharedir;
	plan(skip_all =>
		  "the citus extension is not installed ($sharedir/extension/citus.control is missing): Citus is built by hand, see doc/citus.md"
	) unless -e "$sharedir/extension/citus.control";
	return;
}

sub cluster
{
	my (%opt) = @_;
	require_citus();
	my %conf = (
		shared_preload_libraries  => 'citus,dedup',
		max_connections           => 100,
		max_prepared_transactions => 100,
		'citus.shard_count'       => 4,
		'dedup.sweep_enabled'     => 'off',
		%{ $opt{conf} // {} });
	my %coordinator = %{ $opt{coordinator} // {} };
	my $coordinator = DedupNode->create(
		'coordinator',
		%coordinator,
		preload => 0,
		conf    => { %conf, %{ $coordinator{conf} // {} } });
	my @workers =
	  map { DedupNode->create("worker$_", preload => 0, conf => \%conf) }
	  (1, 2);

	# Citus connects back to its own node (shard moves) at
	# citus.local_hostname, by default localhost over TCP: here, the socket
	for my $node ($coordinator, @workers)
	{
		$node->safe_psql('postgres',
			"ALTER SYSTEM SET citus.local_hostname = '" . $node->host . "'");
		$node->reload;
		$node->safe_psql('postgres', 'CREATE EXTENSION citus');
	}
	$coordinator->safe_psql('postgres',
			"SELECT citus_set_coordinator_host('"
		  . $coordinator->host . "', "
		  . $coordinator->port
		  . ')');
	$coordinator->safe_psql('postgres',
		"SELECT citus_add_node('" . $_->host . "', " . $_->port . ')')
	  for @workers;
	return ($coordinator, @workers);
}

1;
