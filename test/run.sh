#!/usr/bin/env bash
# test/run.sh: the whole dedup test suite, on one or more PostgreSQL versions.
#
#   sudo test/run.sh [--pg 15|17|18|all] [MAKE_ARGS...]
#
# Default --pg 15.  For each version: installs the packages it needs
# (test/setup.sh), builds with warnings as errors and installs dedup, copies
# the tree to a temporary directory owned by the unprivileged user
# "postgres" and runs "make installcheck" there as that user, in three parts
# (pg_regress, isolation, TAP) so that a failure in one does not hide the
# others.  The version the host's Debian ships runs on the host (15 on
# Debian 12), where test/hygiene.sh checks test/setup.sh first and, next to
# a whole suite, the benchmark harnesses run briefly, test/demo.sh runs and
# the style gates (test/gates/check) are checked and the relay's unit tests
# (test/relay) run;
# the others run in Debian chroots made and cached by test/chroot.sh (17:
# trixie, 18: sid).  The versions run at the same time, each printing its
# lines behind its name; a summary with the time of every part and version
# ends the run.  As root, the whole suite must run: a TAP test whose tools
# (RabbitMQ, pgbouncer, psycopg, the exporter) are missing fails
# (DEDUP_REQUIRE_TOOLS).  MAKE_ARGS go to one "make installcheck" (e.g.
# REGRESS=claim ISOLATION= PROVE_TESTS=test/t/011_claim_dump_restore.pl).
# Exits non-zero if anything fails, printing the differences and logs and
# keeping the failed run's directory.  Without root it runs the host's
# version against what is installed, as the current user.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
versions=15
case ${1:-} in
--pg) versions=${2:?--pg 15|17|18|all}; shift 2 ;;
--pg=*) versions=${1#--pg=}; shift ;;
esac
[ "$versions" = all ] && versions="15 17 18"
versions=${versions//,/ }
for pg in $versions; do
	case $pg in
	15 | 17 | 18) ;;
	*) echo "test/run.sh: PostgreSQL $pg is not supported (15, 17, 18)" >&2; exit 2 ;;
	esac
done
root=
[ "$(id -u)" -ne 0 ] || root=1

# the version the host's Debian ships (runs here, not in a chroot)
host_major() {
	local codename=
	[ -r /etc/os-release ] && codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
	case $codename in
	bookworm) echo 15 ;;
	trixie) echo 17 ;;
	*) echo none ;;
	esac
}

# timed WHAT CMD...: run CMD; its result and duration as a summary line
# ("== result: ..."), which the summary at the end collects
timed() {
	local what=$1 start rc=0 outcome=passed
	shift
	start=$(date +%s)
	"$@" || rc=$?
	[ $rc -eq 0 ] || outcome=FAILED
	echo "== result: $what $outcome ($(($(date +%s) - start)) s)"
	return $rc
}

# part NAME MAKE_VARIABLES...: one "make installcheck" of suite() below, in
# its copy of the tree ($work), its output kept in $work/NAME.out
part() {
	local name=$1
	shift
	echo "== make installcheck ($name) in $work"
	(cd "$work" && timed "PostgreSQL $pg: $name" "${as[@]}" \
		env PATH="/usr/lib/postgresql/$pg/bin:$PATH" "${require[@]}" \
		make -s installcheck PG_CONFIG="/usr/lib/postgresql/$pg/bin/pg_config" \
		PROVE_FLAGS="--timer -j2" "$@") 2>&1 | tee "$work/$name.out"
}

# suite N MAKE_ARGS...: make installcheck for PostgreSQL N on this system,
# in a private copy of the tree the tests may write into
suite() {
	local pg=$1
	shift
	local as=() require=() work
	if [ -n "$root" ]; then
		as=(runuser -u postgres --)
		require=(DEDUP_REQUIRE_TOOLS=1)
	fi
	work=$(mktemp -d /tmp/dedup-test.XXXXXX)
	tar -C "$top" --exclude=.git --exclude='*.o' --exclude='*.so' --exclude='*.bc' \
		--exclude=./results --exclude=./tmp_check --exclude=./tmp_check_iso \
		--exclude=./tmp_check_regress --exclude=./output_iso -cf - . | tar -C "$work" -xf -
	[ -z "$root" ] || chown -R postgres: "$work"

	# pg_regress, then the isolation specs, next to the TAP files, two of
	# them at a time: most of a TAP file's time is spent waiting (for
	# sweeps, brokers, restarts), not computing; each part starts its own
	# temporary instances (MAKE_ARGS: one make run)
	local rc=0
	if [ $# -ne 0 ]; then
		part installcheck "$@" || rc=1
	else
		(
			r=0
			part pg_regress ISOLATION= TAP_TESTS= || r=1
			part isolation REGRESS= TAP_TESTS= || r=1
			exit $r
		) &
		part TAP REGRESS= ISOLATION= || rc=1
		wait $! || rc=1
	fi
	if [ $rc -eq 0 ]; then
		rm -rf "$work"
		return 0
	fi
	local f failed
	# the TAP files prove's summary names
	failed=$(sed -n 's|^test/t/\([^ ]*\.pl\) *(Wstat: .*|\1|p' "$work"/*.out | tr '\n' ' ')
	[ -z "$failed" ] || echo "== result: PostgreSQL $pg: the TAP files that failed: $failed"
	for f in "$work"/regression.diffs "$work"/output_iso/regression.diffs; do
		[ -f "$f" ] && { echo "== $f"; cat "$f"; }
	done
	for f in "$work"/tmp_check/log/regress_log_*; do
		[ -f "$f" ] && grep -Eq '^\[[0-9:.]+\]\([0-9.]+s\) not ok|Bail out!' "$f" &&
			{ echo "== tail of $f"; tail -n 60 "$f"; }
	done
	echo "== the failed run is kept in ${DEDUP_CHROOT:-}$work"
	return 1
}

# extras N: the benchmark harnesses end to end (they fail when something is
# broken, never because of a ratio) and the README's first command (it fails
# unless every message of its broker run was applied exactly once), against
# the installed dedup; one after the other: two pg_virtualenv clusters that
# start at once could take the same port
extras() {
	local pg=$1 rc=0
	export PG_MAJOR=$pg DEDUP_SETUP=none
	timed "PostgreSQL $pg: benchmark smoke run" "$top/test/bench/run.sh" --smoke || rc=1
	timed "PostgreSQL $pg: instructions per key" "$top/test/bench/instructions.sh" --smoke || rc=1
	timed "PostgreSQL $pg: demo" "$top/test/demo.sh" || rc=1
	return $rc
}

# gates N: the style gates (test/gates/check: C and Perl formatting, the
# ereport() form, #includes not needed, DedupNode's POD), against the
# server headers of PostgreSQL N, and the relay's unit tests (test/relay:
# no server, no broker; with the relay's python3, its #! line)
gates() {
	local pg=$1 rc=0
	PG_CONFIG="/usr/lib/postgresql/$pg/bin/pg_config" "$top/test/gates/check" || rc=1
	timed "relay unit tests" env ${root:+DEDUP_REQUIRE_TOOLS=1} \
		/usr/bin/python3 -m unittest discover -s "$top/test/relay" || rc=1
	return $rc
}

# in_chroot N MAKE_ARGS...: PostgreSQL N in its chroot (made or checked
# first), where this script runs again: build and install, then the suite
in_chroot() {
	local pg=$1
	shift
	timed "PostgreSQL $pg: chroot" "$top/test/chroot.sh" "$pg" || return 1
	"$top/test/chroot.sh" "$pg" run "$top" bash test/run.sh --pg "$pg" "$@"
}

# job NAME CMD...: CMD with its output behind "[NAME] " on the standard
# output (fd 3), kept in $logs/NAME.log, its exit status in $logs/NAME.rc
# and returned
job() {
	local name=$1
	shift
	(
		rc=0
		timed "$name, in all:" "$@" || rc=$?
		echo $rc >"$logs/$name.rc"
	) 2>&1 | tee "$logs/$name.log" | sed -u "s/^/[$name] /" >&3
	return "$(cat "$logs/$name.rc")"
}

# inside a chroot: the packages are there; test/setup.sh's hygiene is
# checked on the host
if [ -n "${DEDUP_IN_CHROOT:-}" ]; then
	timed "PostgreSQL $versions: build -Werror, install" \
		env PG_MAJOR="$versions" DEDUP_SETUP=build "$top/test/setup.sh"
	suite "$versions" "$@"
	exit
fi

logs=$(mktemp -d /tmp/dedup-run.XXXXXX)
trap 'rm -rf "$logs"' EXIT
began=$(date +%s)
here= chroots=
for pg in $versions; do
	if [ "$pg" = "$(host_major)" ]; then here=$pg; else chroots+=" $pg"; fi
done
if [ -n "$chroots" ]; then
	if [ -z "$root" ]; then
		echo "test/run.sh: PostgreSQL$chroots run in chroots: run me as root" >&2
		exit 1
	fi
	# once, not in each test/chroot.sh
	if ! command -v mmdebstrap >/dev/null || ! command -v ip >/dev/null; then
		echo "== installing mmdebstrap iproute2"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			mmdebstrap iproute2 >/dev/null
	fi
fi

# every version at once: the chroots' first, then the host's once it is
# set up, and next to it, when the whole suite runs, the extras
exec 3>&1
for pg in $chroots; do
	job "PostgreSQL $pg" in_chroot "$pg" "$@" &
done
if [ -n "$here" ]; then
	hrc=0
	[ -z "$root" ] || job "PostgreSQL $here setup" env PG_MAJOR="$here" "$top/test/hygiene.sh" || hrc=$?
	if [ $hrc -le 1 ]; then	# 2: no build, nothing to test
		job "PostgreSQL $here" suite "$here" "$@" &
		[ $# -ne 0 ] || [ -z "$root" ] || job "PostgreSQL $here extras" extras "$here" &
		[ $# -ne 0 ] || job "PostgreSQL $here gates" gates "$here" &
	fi
fi
wait

failed=0
for pg in $versions; do
	[ "$(cat "$logs/PostgreSQL $pg.rc" 2>/dev/null)" = 0 ] || failed=1
done
for f in "$logs"/*.rc; do
	[ "$(cat "$f")" = 0 ] || failed=1
done
echo "== summary"
for pg in $versions; do
	for f in "PostgreSQL $pg setup" "PostgreSQL $pg" "PostgreSQL $pg extras" "PostgreSQL $pg gates"; do
		[ ! -f "$logs/$f.log" ] || sed -n 's/^== result: /== /p' "$logs/$f.log"
	done
done
echo "== $(($(date +%s) - began)) s in all"
if [ $failed -ne 0 ]; then
	echo "== FAILED"
	exit 1
fi
echo "== all dedup tests passed"
