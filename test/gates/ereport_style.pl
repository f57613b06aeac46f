#!/usr/bin/perl
#
# test/gates/ereport_style.pl [--fix] FILE...: one ereport() style, the one
# PostgreSQL's contrib modules use, with the auxiliary calls in parentheses:
#
#	ereport(ERROR,
#			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
#			 errmsg("...")));
#
# Without --fix it lists every ereport() written in the bare form
# (ereport(ERROR, errcode(...), errmsg(...))) as FILE:LINE and exits 1 if
# there is one; with --fix it puts the parentheses in (the lines keep their
# indentation; test/gates/c_format.pl --fix aligns them after).  Comments,
# string and character literals are skipped; a macro that passes its
# arguments on (ereport(elevel, __VA_ARGS__)) is not an ereport() call of
# either form and is left alone.
#
use strict;
use warnings;

my $fix   = @ARGV && $ARGV[0] eq '--fix' ? shift @ARGV : 0;
my $found = 0;

# mask($source): the source with comments and the insides of string and
# character literals blanked (same length, newlines kept)
sub mask
{
	my ($s) = @_;
	$s =~ s{(/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')}
	  { my $m = $1; (my $b = $m) =~ s/[^\n]/ /g;
		$m =~ /^["']/ ? substr($m, 0, 1) . substr($b, 1, -1) . substr($m, -1) : $b }gse;
	return $s;
}

# close_of($masked, $open): the offset of the parenthesis that closes the
# one at $open, and of the first comma at its level (undef if none)
sub close_of
{
	my ($m,     $open)  = @_;
	my ($depth, $comma) = (0, undef);
	for my $i ($open .. length($m) - 1)
	{
		my $c = substr($m, $i, 1);
		if    ($c eq '(') { $depth++; }
		elsif ($c eq ')') { return ($i, $comma) if --$depth == 0; }
		elsif ($c eq ',' && $depth == 1 && !defined $comma) { $comma = $i; }
	}
	return;
}

for my $file (@ARGV)
{
	open(my $fh, '<', $file) or die "$file: $!";
	my $source = do { local $/; <$fh> };
	close $fh;
	my $masked = mask($source);
	my @edits;    # [offset, text to insert], applied from the end
	while ($masked =~ /\bereport\s*\(/g)
	{
		my $open = pos($masked) - 1;
		my ($close, $comma) = close_of($masked, $open);
		next unless defined $close && defined $comma;
		my $rest = substr($masked, $comma + 1, $close - $comma - 1);
		next if $rest =~ /^\s*\(/ || $rest =~ /__VA_ARGS__/;
		my ($lead) = $rest =~ /^(\s*)/;
		my $line   = 1 + (() = substr($source, 0, $open) =~ /\n/g);
		print
		  "$file:$line: ereport() without parentheses around its auxiliary calls\n"
		  unless $fix;
		$found++;
		push @edits, [ $comma + 1 + length($lead), '(' ], [ $close, ')' ];
	}
	next unless $fix && @edits;
	for my $e (sort { $b->[0] <=> $a->[0] } @edits)
	{
		substr($source, $e->[0], 0) = $e->[1];
	}
	open($fh, '>', $file) or die "$file: $!";
	print $fh $source;
	close $fh;
}
exit($found && !$fix ? 1 : 0);
