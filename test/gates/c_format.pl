#!/usr/bin/perl
#
# test/gates/c_format.pl [--fix] [--typedefs FILE] FILE|DIR...: dedup's C
# formatted the way PostgreSQL formats its own.  Runs pg_bsd_indent (Debian
# package pg-bsd-indent) with the options of PostgreSQL's pgindent and a
# typedef list (test/gates/typedefs.pl, made at run time unless --typedefs
# names one) over every .c and .h file given or found under the
# directories given.  Without --fix, prints a unified diff of what would
# change and exits 1 if anything would; with --fix, rewrites the files.
#
# What it does around pg_bsd_indent, as pgindent does: before, "//"
# comments become "/* */" ones and a block comment that begins with dashes
# is protected from being refilled; after, that protection is taken off,
# two comments run together get a tab between them, and a function's return
# type on its own line ends in " *" (one space) when it is a pointer.  How
# it differs from pgindent: see test/README.md, "Gates".
#
use strict;
use warnings;

use File::Find;
use File::Temp qw(tempdir);
use FindBin;

my @options = qw(
  -bad -bap -bbb -bc -bl -cli1 -cp33 -cdb -nce -d0 -di12 -nfc1 -i4 -l79 -lp
  -lpl -nip -npro -sac -tpg -ts4
);
my $indent = $ENV{PG_BSD_INDENT} // 'pg_bsd_indent';

my ($fix, $typedefs) = (0, undef);
while (@ARGV && $ARGV[0] =~ /^--/)
{
	my $opt = shift @ARGV;
	if    ($opt eq '--fix')      { $fix = 1; }
	elsif ($opt eq '--typedefs') { $typedefs = shift @ARGV; }
	else                         { die "c_format.pl: unknown option $opt\n"; }
}
die "usage: c_format.pl [--fix] [--typedefs FILE] FILE|DIR...\n" unless @ARGV;

my $version = `$indent --version 2>&1`;
die "c_format.pl: $indent not found (Debian package pg-bsd-indent)\n"
  if $? || $version !~ /pg_bsd_indent/;

my $tmp = tempdir(CLEANUP => 1);
if (!defined $typedefs)
{
	$typedefs = "$tmp/typedefs";
	system("$FindBin::Bin/typedefs.pl @ARGV > $typedefs") == 0
	  or die "c_format.pl: typedefs.pl failed\n";
}

my @files;
find(
	{
		wanted => sub { push @files, $File::Find::name if /\.[ch]\z/ && -f },
		no_chdir => 1
	},
	@ARGV);

# before($source), after($source): pgindent's edits around pg_bsd_indent
sub before
{
	my ($s) = @_;
	$s =~ s!^([ \t]*)//(.*)$!$1/* $2 */!gm;
	$s =~ s!/\* +---!/*---X_X!g;
	return $s;
}

sub after
{
	my ($s) = @_;
	$s =~ s!/\*---X_X!/* ---!g;
	$s =~ s!\*/(/\*.*\*/)$!*/\t$1!gm;
	$s =~ s!^([A-Za-z_]\S*)[ \t]+\*$!$1 *!gm;
	return $s;
}

my ($changed, $failed) = (0, 0);
for my $file (sort @files)
{
	open(my $fh, '<', $file) or die "$file: $!";
	my $source = do { local $/; <$fh> };
	close $fh;
	my $work = "$tmp/work.c";
	open($fh, '>', $work) or die "$work: $!";
	print $fh before($source);
	close $fh;
	my $errors = `$indent @options -U$typedefs $work $work.out 2>&1`;

	if ($? || $errors ne '')
	{
		print STDERR "$file: pg_bsd_indent failed: $errors\n";
		$failed++;
		next;
	}
	open($fh, '<', "$work.out") or die "$work.out: $!";
	my $formatted = after(do { local $/; <$fh> });
	close $fh;
	next if $formatted eq $source;
	$changed++;
	if ($fix)
	{
		open($fh, '>', $file) or die "$file: $!";
		print $fh $formatted;
		close $fh;
	}
	else
	{
		open($fh, '>', "$tmp/formatted") or die $!;
		print $fh $formatted;
		close $fh;
		print
		  `diff -u --label '$file' --label '$file (formatted)' '$file' '$tmp/formatted'`;
	}
}
print STDERR "c_format.pl: $changed of "
  . scalar(@files)
  . " files @{[ $fix ? 'reformatted' : 'not formatted as pgindent would' ]}\n"
  if $changed;
exit($failed ? 2 : ($changed && !$fix) ? 1 : 0);
