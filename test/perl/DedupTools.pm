#
# test/perl/DedupTools.pm: the programs and Python modules a test needs
# (test/setup.sh installs them as Debian packages).  Needs no PostgreSQL
# test module (test/demo_broker.pl uses it too).
#
# Exports:
#   find_python(@modules)            a python3 that imports every one of
#                                    them, or undef
#   require_tools(modules => [...], programs => [...])
#                                    the python3 (undef without modules),
#                                    or stop: with DEDUP_REQUIRE_TOOLS set
#                                    (test/run.sh, which installs them all)
#                                    a missing one is a failure (BAIL_OUT),
#                                    without it the test is skipped, saying
#                                    what is missing
#
package DedupTools;

use strict;
use warnings;

use Exporter 'import';
use Test::More;

our @EXPORT = qw(find_python require_tools);

sub find_python
{
	my $imports = join(', ', @_);
	for my $candidate ('python3', '/usr/bin/python3')
	{
		return $candidate
		  if system("$candidate -c 'import $imports' >/dev/null 2>&1") == 0;
	}
	return undef;
}

sub require_tools
{
	my %opt     = @_;
	my @missing = grep { !-x $_ } @{ $opt{programs} // [] };
	my $python;
	if ($opt{modules})
	{
		$python = find_python(@{ $opt{modules} });
		push @missing, 'python3 with ' . join(', ', @{ $opt{modules} })
		  unless defined $python;
	}
	return $python unless @missing;
	my $why =
		'missing: '
	  . join('; ', @missing)
	  . ' (sudo test/setup.sh installs them)';
	BAIL_OUT($why) if $ENV{DEDUP_REQUIRE_TOOLS};
	plan(skip_all => $why);
}

1;
