#
# test/perl/DedupTest.pm: helpers shared by the TAP tests in test/t/.
#
package DedupTest;

use strict;
use warnings;

use Exporter 'import';
our @EXPORT = qw(find_python);

# find_python(@modules): a Python 3 that can import every one of @modules
# (test/setup.sh installs them as Debian packages), or undef
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

1;
