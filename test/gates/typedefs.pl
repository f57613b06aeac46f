#!/usr/bin/perl
#
# test/gates/typedefs.pl [DIR|FILE]...: the typedef names that
# pg_bsd_indent must know (its -U file), one a line, sorted: those declared
# in the installed server headers (pg_config --includedir-server, or
# $PG_CONFIG's), those declared in the files and directories given (dedup's
# src/), and the C library's that the server headers use without declaring.
#
# PostgreSQL's own list (src/tools/pgindent/typedefs.list) is made by the
# buildfarm from the debug symbols of complete builds and is not installed
# by any Debian package; this one is read from the declarations themselves:
# "typedef ... NAME;", "typedef ... (*NAME)(...);" and the names after the
# closing brace of "typedef struct/union/enum {...} NAME, *NAMEPtr;", with
# comments, literals and preprocessor lines left out.  Left out as well are
# a few names that the headers declare as types but that code uses as
# variable or field names more often than as types, which would make
# pg_bsd_indent format "x * y" as a declaration (pgindent excludes a list
# of the same kind).
#
use strict;
use warnings;

use File::Find;

my @not_types = qw(
  ANY FD_SET U abs allocfunc boolean date digit ilist interval iterator
  other pointer printfunc reference string timestamp type wrap
);
my @libc = qw(
  DIR FILE bool int8_t int16_t int32_t int64_t intptr_t jmp_buf locale_t
  mode_t off_t pid_t pthread_t sig_atomic_t sigjmp_buf size_t socklen_t
  ssize_t time_t uint8_t uint16_t uint32_t uint64_t uintptr_t va_list
  wchar_t
);

my $pg_config = $ENV{PG_CONFIG} // 'pg_config';
chomp(my $server = `$pg_config --includedir-server`);
die "typedefs.pl: $pg_config --includedir-server failed\n"
  if $? || !-d $server;

my @files;
find(
	{
		wanted => sub { push @files, $File::Find::name if /\.[ch]\z/ && -f },
		no_chdir => 1
	},
	$server, @ARGV);

my %names = map { $_ => 1 } @libc;
for my $file (@files)
{
	open(my $fh, '<', $file) or die "$file: $!";
	my $s = do { local $/; <$fh> };
	close $fh;

	# comments, literals, preprocessor lines (with their continuations)
	$s =~ s{/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'}{ }gs;
	$s =~ s{^[ \t]*#(?:[^\n]*\\\n)*[^\n]*}{}gm;
	while ($s =~ /\btypedef\b/g)
	{
		my $start = pos($s);

		# the declaration, up to its semicolon outside braces
		my ($depth, $i) = (0, $start);
		for (; $i < length $s; $i++)
		{
			my $c = substr($s, $i, 1);
			$depth++ if $c eq '{';
			$depth-- if $c eq '}';
			last     if $c eq ';' && $depth == 0;
		}
		my $decl = substr($s, $start, $i - $start);
		pos($s) = $i;

		# the declarators: after the last closing brace, if any
		$decl =~ s/^.*\}//s;
		if ($decl =~ /\(\s*\*\s*(\w+)\s*\)\s*\(/)
		{
			$names{$1} = 1;    # a pointer to a function
			next;
		}
		if ($decl =~ /\b(\w+)\s*\(/ && $decl !~ /\(\s*\*/)
		{
			$names{$1} = 1;    # a function type
			next;
		}
		for my $d (split /,/, $decl)
		{
			$d =~ s/\[[^\]]*\]//g;    # array dimensions
			$names{$1} = 1 if $d =~ /(\w+)\s*$/;
		}
	}
}
delete @names{@not_types};
print "$_\n" for sort grep { !/^\d/ } keys %names;
