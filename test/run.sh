#!/usr/bin/env bash
# test/run.sh: the whole dedup test suite, on one or more PostgreSQL versions.
#
#   sudo test/run.sh [--pg 15|17|18|all] [MAKE_ARGS...]
#
# Default --pg 15.  For each version: installs the packages it needs
# (test/setup.sh), builds with warnings as errors and installs dedup, copies
# the tree to a temporary directory owned by the unprivileged user
# "postgres" and runs "make installcheck" there as that user: pg_regress
# (sql/, expected/) and the isolation specs (test/isolation/) on temporary
# instances configured by test/dedup.conf, the TAP tests (test/t/) on their
# own clusters.  The version the host's Debian ships runs on the host (15 on
# Debian 12); the others run in Debian chroots made and cached by
# test/chroot.sh (15: bookworm, 17: trixie, 18: sid).  As root, the whole
# suite must run: a TAP test whose tools (RabbitMQ, pgbouncer, psycopg, the
# exporter) a suite does not have fails (DEDUP_REQUIRE_TOOLS).  MAKE_ARGS go to
# make installcheck (e.g. REGRESS=claim ISOLATION= PROVE_TESTS=test/t/011_claim_dump_restore.pl).
# Exits non-zero if anything fails, printing the differences and logs.
# Without root it runs against what is installed, as the current user.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
versions=15
case ${1:-} in
--pg) versions=${2:?--pg 15|17|18|all}; shift 2 ;;
--pg=*) versions=${1#--pg=}; shift ;;
esac
[ "$versions" = all ] && versions="15 17 18"
versions=${versions//,/ }

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

# run_here N MAKE_ARGS...: the suite for PostgreSQL N on this system
run_here() {
	local pg=$1
	shift
	local pg_config=/usr/lib/postgresql/$pg/bin/pg_config as=() hygiene_failed= require=()
	if [ "$(id -u)" -eq 0 ]; then
		# test/setup.sh (packages, build, install), checking that it leaves
		# the machine and the checkout as they were; in a chroot made by
		# test/chroot.sh the packages are there already
		local setup=all hrc=0
		[ -z "${DEDUP_IN_CHROOT:-}" ] || setup=build
		PG_MAJOR=$pg DEDUP_SETUP=$setup "$top/test/hygiene.sh" || hrc=$?
		case $hrc in
		0) echo "PostgreSQL $pg: setup hygiene passed" >>"$summary" ;;
		1) echo "PostgreSQL $pg: setup hygiene FAILED" >>"$summary"; hygiene_failed=1 ;;
		*)	# no build, nothing to test
			echo "PostgreSQL $pg: setup (packages, build -Werror, install) FAILED" >>"$summary"
			return 1 ;;
		esac
		as=(runuser -u postgres --)
		require=(DEDUP_REQUIRE_TOOLS=1)
	fi

	# a private copy the tests may write into (results/, tmp_check*/)
	work=$(mktemp -d /tmp/dedup-test.XXXXXX)
	tar -C "$top" --exclude=.git --exclude='*.o' --exclude='*.so' --exclude='*.bc' \
		--exclude=./results --exclude=./tmp_check --exclude=./tmp_check_iso \
		--exclude=./tmp_check_regress --exclude=./output_iso -cf - . | tar -C "$work" -xf -
	[ "$(id -u)" -eq 0 ] && chown -R postgres: "$work"

	# the three parts of make installcheck one after the other, so that a
	# failure in one does not hide the others (MAKE_ARGS: one make run)
	local parts=("pg_regress:ISOLATION= TAP_TESTS=" "isolation:REGRESS= TAP_TESTS=" "TAP:REGRESS= ISOLATION=")
	[ $# -eq 0 ] || parts=("installcheck:")
	local part name vars rc=0
	for part in "${parts[@]}"; do
		name=${part%%:*}
		read -r -a vars <<<"${part#*:}"
		echo "== PostgreSQL $pg: make installcheck ($name) in $work"
		if (cd "$work" && "${as[@]}" env PATH="/usr/lib/postgresql/$pg/bin:$PATH" "${require[@]}" \
			make -s installcheck PG_CONFIG="$pg_config" PROVE_FLAGS="--timer" \
			"${vars[@]}" "$@"); then
			echo "PostgreSQL $pg: $name passed" >>"$summary"
		else
			echo "PostgreSQL $pg: $name FAILED" >>"$summary"
			rc=1
		fi
	done
	# on the host only: the benchmark harnesses end to end in a minute (they
	# fail when something is broken, never because of a ratio), and
	# the README's first command (it fails unless every message of its
	# broker run was applied exactly once)
	if [ $# -eq 0 ] && [ -z "${DEDUP_IN_CHROOT:-}" ] && [ "$(id -u)" -eq 0 ]; then
		echo "== PostgreSQL $pg: benchmark smoke run"
		if PG_BIN=/usr/lib/postgresql/$pg/bin PGPORT=54339 "$top/test/bench/run.sh" --smoke &&
			PG_MAJOR=$pg "$top/test/bench/instructions.sh" 100; then
			echo "PostgreSQL $pg: benchmark smoke run passed" >>"$summary"
		else
			echo "PostgreSQL $pg: benchmark smoke run FAILED" >>"$summary"
			rc=1
		fi
		echo "== PostgreSQL $pg: the demo (test/demo.sh)"
		if PG_MAJOR=$pg PGPORT=54349 "$top/test/demo.sh"; then
			echo "PostgreSQL $pg: demo passed" >>"$summary"
		else
			echo "PostgreSQL $pg: demo FAILED" >>"$summary"
			rc=1
		fi
	fi
	[ -z "${hygiene_failed:-}" ] || rc=1
	if [ $rc -ne 0 ]; then
		for f in "$work"/regression.diffs "$work"/output_iso/regression.diffs; do
			[ -f "$f" ] && { echo "== $f"; cat "$f"; }
		done
		for f in "$work"/tmp_check/log/regress_log_*; do
			[ -f "$f" ] && grep -Eq '^\[[0-9:.]+\]\([0-9.]+s\) not ok|Bail out!' "$f" &&
				{ echo "== tail of $f"; tail -n 60 "$f"; }
		done
		echo "== PostgreSQL $pg: the failed run is kept in ${DEDUP_CHROOT:+$DEDUP_CHROOT}$work"
		work=	# not removed
	fi
	return $rc
}

summary=$(mktemp /tmp/dedup-summary.XXXXXX)
work=
cleanup() { rm -rf "$summary" "$summary.in" ${work:+"$work"}; }
trap cleanup EXIT

for pg in $versions; do
	case $pg in
	15 | 17 | 18) ;;
	*) echo "test/run.sh: PostgreSQL $pg is not supported (15, 17, 18)" >&2; exit 2 ;;
	esac
done

# the chroots the other versions need, made (or checked) in parallel first
if [ -z "${DEDUP_IN_CHROOT:-}" ]; then
	if [ "$(id -u)" -eq 0 ] && ! command -v debootstrap >/dev/null &&
		[ -n "$(for pg in $versions; do [ "$pg" = "$(host_major)" ] || echo "$pg"; done)" ]; then
		echo "== installing debootstrap"	# once, not in each parallel test/chroot.sh
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
	fi
	pids=()
	for pg in $versions; do
		[ "$pg" = "$(host_major)" ] && continue
		if [ "$(id -u)" -ne 0 ]; then
			echo "test/run.sh: PostgreSQL $pg runs in a chroot: run me as root" >&2
			exit 1
		fi
		"$top/test/chroot.sh" "$pg" > >(sed -u "s/^/[chroot $pg] /") 2>&1 &
		pids+=($!)
	done
	for p in ${pids[@]+"${pids[@]}"}; do
		wait "$p" || { echo "test/run.sh: making a chroot failed" >&2; exit 1; }
	done
fi

failed=0
for pg in $versions; do
	start=$(date +%s)
	rc=0
	if [ -n "${DEDUP_IN_CHROOT:-}" ] || [ "$pg" = "$(host_major)" ]; then
		run_here "$pg" "$@" || rc=$?
		rm -rf "$work"
		work=
	else
		DEDUP_SUMMARY_COPY=$summary.in "$top/test/chroot.sh" "$pg" run "$top" \
			bash test/run.sh --pg "$pg" "$@" || rc=$?
		# the parts' results from inside
		[ -f "$summary.in" ] && grep -v ': \(passed\|FAILED\) (' "$summary.in" >>"$summary"
		rm -f "$summary.in"
	fi
	took=$(($(date +%s) - start))
	if [ $rc -eq 0 ]; then
		echo "PostgreSQL $pg: passed (${took} s)" >>"$summary"
	else
		echo "PostgreSQL $pg: FAILED (${took} s)" >>"$summary"
		failed=1
	fi
done

# inside a chroot, test/chroot.sh hands the summary to the outer run
[ -n "${DEDUP_IN_CHROOT:-}" ] && cp "$summary" "$top/.summary"
echo "== summary"
sed 's/^/== /' "$summary"
if [ $failed -ne 0 ]; then
	echo "== FAILED"
	exit 1
fi
echo "== all dedup tests passed"
