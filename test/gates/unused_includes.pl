#!/usr/bin/perl
#
# test/gates/unused_includes.pl [--fix] [FILE.c...]: no #include that a .c
# file of dedup does not use.  Each #include of each file (default: every
# object of the Makefile) is left out in turn, its line blanked so that no
# line number moves, and the file compiled with the build's own command
# (from make -n, at -O0 and without -g).  When that compiles with the same
# warnings to an object file identical to the one of the whole file, and
# the header is then no longer included at all (one that another header
# still brings in may be used by the file, and the next PostgreSQL version
# may not bring it in; for a catalog header, the _d.h made from it counts
# as the header), the #include is not used: listed as FILE:LINE, exit
# status 1.  --fix deletes them, one after the other, each only if the
# file still compiles to the same object without it and the ones deleted
# before it.
#
# Not tried: "postgres.h" (always first), an #include inside #if/#ifdef
# (it is there for one version or configuration), and one whose line says
# why it stays with a comment beginning "keep:", e.g. an #include that only
# PostgreSQL 17 or 18 needs:
#
#	#include "utils/backend_status.h"	/* keep: pgstat_report_wait_* on 17 */
#
# The compilations run as many at a time as there are processors
# (DEDUP_GATE_JOBS to choose).  PG_CONFIG picks the server, as for make.
#
use strict;
use warnings;

use Cwd            qw(abs_path);
use File::Basename qw(dirname);
use File::Temp     qw(tempdir);
use FindBin;

my $top       = abs_path("$FindBin::Bin/../..");
my $fix       = @ARGV && $ARGV[0] eq '--fix' ? shift @ARGV : 0;
my $pg_config = $ENV{PG_CONFIG} // 'pg_config';
chomp(my $jobs = $ENV{DEDUP_GATE_JOBS} // `nproc` // 2);
$jobs ||= 2;

chdir $top or die "$top: $!";
my %command;    # source => compile command without -o and the source
for (`make -n -B PG_CONFIG=$pg_config 2>/dev/null`)
{
	chomp;
	next unless /^(\S*(?:gcc|cc|clang)\S*\s.*)\s-c\s+-o\s+\S+\.o\s+(\S+\.c)$/;
	my ($cmd, $src) = ($1, $2);
	$cmd =~ s/(?<=\s)-g\S*(?=\s)//g;
	$command{$src} = $cmd;
}
die "unused_includes.pl: no compile commands from make -n\n" unless %command;
my @sources = @ARGV ? @ARGV : sort keys %command;

my $tmp = tempdir(CLEANUP => 1);

# compile($src, $text, $name): compile $text as $src would be, with $src's
# own directory first for its "..." includes, into $tmp/$name.o, its
# warnings into $tmp/$name.err; true if it compiled
sub compile
{
	my ($src, $text, $name) = @_;
	my $in = "$tmp/$name.c";
	open(my $fh, '>', $in) or die $!;
	print $fh $text;
	close $fh;
	my $dir = dirname($src);

	# from standard input: the same name (<stdin>) in every object file
	my $err =
	  `$command{$src} -O0 -iquote $dir -MD -MF $tmp/$name.d -x c -c -o $tmp/$name.o - <$in 2>&1`;
	my $ok = $? == 0;
	$err =~ s/<stdin>/$src/g;
	open($fh, '>', "$tmp/$name.err") or die $!;
	print $fh $err;
	close $fh;
	unlink $in;
	return $ok;
}

sub slurp
{
	my ($file) = @_;
	open(my $fh, '<:raw', $file) or return undef;
	my $data = do { local $/; <$fh> };
	close $fh;
	return $data;
}

# in_parallel(@tasks): run each code reference in a child process, $jobs
# at a time; true if every child exited 0
sub in_parallel
{
	my ($ok, @running) = (1);
	for my $task (@_)
	{
		if (@running >= $jobs)
		{
			waitpid(shift @running, 0);
			$ok &&= $? == 0;
		}
		my $pid = fork // die "fork: $!";
		if ($pid == 0)
		{
			exit($task->() ? 0 : 1);
		}
		push @running, $pid;
	}
	for (@running)
	{
		waitpid($_, 0);
		$ok &&= $? == 0;
	}
	return $ok;
}

# candidates($text): the line indexes of the #includes to try
sub candidates
{
	my @lines = split /\n/, $_[0], -1;
	my ($depth, @try) = (0);
	for my $i (0 .. $#lines)
	{
		local $_ = $lines[$i];
		$depth++ if /^\s*#\s*if/;
		$depth-- if /^\s*#\s*endif/;
		next unless /^\s*#\s*include\s*[<"]([^>"]+)[>"]/;
		next if $1 eq 'postgres.h' || $depth > 0 || m{/\*\s*keep:};
		push @try, [ $i, $1 ];
	}
	return @try;
}

# still_included($deps, $header): does the dependency list $deps (a .d
# file) still name $header, or, for a catalog header, the one generated
# from it (catalog/pg_type.h: catalog/pg_type_d.h, with the OIDs and the
# column numbers that a file uses, which many server headers bring in
# without the catalog header itself)?
sub still_included
{
	my ($deps, $header) = @_;
	my @names = ($header);
	push @names, "$1_d.h" if $header =~ m{^(catalog/\w+)\.h\z};
	return grep { $deps =~ m{(?:^|[\s/])\Q$_\E(?:\s|$)} } @names;
}

my (%text, @jobs);
for my $k (0 .. $#sources)
{
	my $src = $sources[$k];
	die "unused_includes.pl: $src is not built by the Makefile\n"
	  unless $command{$src};
	$text{$src} = slurp($src) // die "$src: $!";
	push @jobs, map { [ $src, $k, @$_ ] } candidates($text{$src});
}

# each file whole, then each without one of its #includes
in_parallel(
	map {
		my ($src, $k) = ($sources[$_], $_);
		sub {
			compile($src, $text{$src}, "base$k")
			  or print STDERR "unused_includes.pl: $src does not compile:\n"
			  . slurp("$tmp/base$k.err");
		}
	} 0 .. $#sources) or exit 2;
in_parallel(
	map {
		my ($src, $k, $line, $header) = @$_;
		sub {
			my @lines = split /\n/, $text{$src}, -1;
			$lines[$line] = '';
			my $name = "try$k.$line";
			if (   compile($src, join("\n", @lines), $name)
				&& slurp("$tmp/$name.err") eq slurp("$tmp/base$k.err")
				&& slurp("$tmp/$name.o") eq slurp("$tmp/base$k.o")
				&& !still_included(slurp("$tmp/$name.d"), $header))
			{
				open(my $fh, '>', "$tmp/$name.unused") or die $!;
				close $fh;
			}
			unlink "$tmp/$name.o";
			return 1;
		}
	} @jobs);

my (%unused, $count);
for my $job (@jobs)
{
	my ($src, $k, $line) = @$job;
	next unless -e "$tmp/try$k.$line.unused";
	push @{ $unused{$src} }, $line;
	$count++;
}

# --fix: per file, the lines listed dropped one after the other, each only
# if the file without it and the ones dropped before it still compiles to
# the same object (two that stand in for each other: one stays)
if ($fix)
{
	in_parallel(
		map {
			my $src = $_;
			my $k   = (grep { $sources[$_] eq $src } 0 .. $#sources)[0];
			sub {
				my @lines = split /\n/, $text{$src}, -1;
				my @dropped;
				for my $line (@{ $unused{$src} })
				{
					my @try = @lines;
					$try[$line] = '';
					my $name = "fix$k.$line";
					next
					  unless compile($src, join("\n", @try), $name)
					  && slurp("$tmp/$name.err") eq slurp("$tmp/base$k.err")
					  && slurp("$tmp/$name.o") eq slurp("$tmp/base$k.o");
					@lines = @try;
					push @dropped, $line;
				}
				my %drop = map { $_ => 1 } @dropped;
				my @orig = split /\n/, $text{$src}, -1;
				open(my $fh, '>', $src) or die "$src: $!";
				print $fh join("\n",
					map { $orig[$_] } grep { !$drop{$_} } 0 .. $#orig);
				close $fh;
				return 1;
			}
		} sort keys %unused);
}
for my $src (sort keys %unused)
{
	my @lines = split /\n/, $text{$src}, -1;
	print "$src:" . ($_ + 1) . ": $lines[$_] is not used\n"
	  for @{ $unused{$src} };
}
printf STDERR
  "unused_includes.pl: %d #include lines of %d tried in %d files are not used%s\n",
  $count, scalar @jobs, scalar @sources,
  $fix ? ' (removed, but for any one that stood in for another)' : ''
  if $count;
exit($count && !$fix ? 1 : 0);
