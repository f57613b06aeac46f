#!/usr/bin/env bash
# test/hygiene.sh: test/setup.sh leaves the machine as it found it.
#
#   sudo test/hygiene.sh          (test/run.sh runs it before the suite)
#
# Around three runs of test/setup.sh, compares the state of what it may
# touch -- /etc/postgresql-common/createcluster.d/dedup-tests.conf (and its
# directory), /usr/sbin/policy-rc.d, temporary directories in /tmp, and every
# file of the checkout (names, sizes, times, owners: no build products, no
# root-owned files) -- before and after:
#   1. the real thing: packages, build, install (PG_MAJOR as given);
#   2. a run whose "apt-get install" fails;
#   3. a run killed with SIGTERM (its whole process group, as a terminal's
#      interrupt would) while "apt-get install" runs.
# 2 and 3 use stand-ins for apt-get and apt-cache and ask for a PostgreSQL
# that does not exist, so that they really reach the install step.
# Exit status 1: something was left behind; 2: test/setup.sh itself failed
# (packages, build with -Werror, install) -- nothing to test then.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ "$(id -u)" -ne 0 ]; then
	echo "test/hygiene.sh: run me as root" >&2
	exit 1
fi

state() {
	local f
	for f in /etc/postgresql-common/createcluster.d/dedup-tests.conf /usr/sbin/policy-rc.d; do
		if [ -e "$f" ]; then echo "$f $(md5sum <"$f" | cut -c1-32) $(stat -c '%a %U' "$f")"; else echo "$f absent"; fi
	done
	if [ -d /etc/postgresql-common/createcluster.d ]; then
		echo "createcluster.d present"
	else
		echo "createcluster.d absent"
	fi
	echo "setup scratch directories: $(find /tmp -maxdepth 1 -name 'dedup-setup.*' | wc -l)"
	find "$top" -path "$top/.git" -prune -o -printf 'tree: %P %s %T@ %U\n' | sort
}

fails=0
check() {	# check WHAT: the state now is the state before
	local after
	after=$(state)
	if [ "$after" = "$before" ]; then
		echo "ok - $1: machine and checkout as they were"
	else
		echo "not ok - $1: left changes behind:"
		diff <(echo "$before") <(echo "$after") | sed 's/^/    /' | head -n 40 || true
		fails=$((fails + 1))
	fi
}

# 1: the real run
before=$(state)
"$top/test/setup.sh" || { echo "test/hygiene.sh: test/setup.sh failed" >&2; exit 2; }
check "test/setup.sh (PG_MAJOR=${PG_MAJOR:-15})"

# stand-ins: apt-cache offers every package, apt-get update succeeds,
# apt-get install fails at once or hangs until killed
stub=$(mktemp -d /tmp/dedup-hygiene.XXXXXX)
trap 'rm -rf "$stub"' EXIT
cat >"$stub/apt-cache" <<'SH'
#!/bin/sh
echo "$2:"; echo "  Installed: (none)"; echo "  Candidate: 1.0"
SH
cat >"$stub/apt-get" <<'SH'
#!/bin/sh
case " $* " in *" update "*) exit 0 ;; esac
touch "$STUB/installing"
[ "$STUB_MODE" = fail ] && { echo "E: stand-in apt-get failing" >&2; exit 100; }
exec sleep 60
SH
chmod +x "$stub/apt-cache" "$stub/apt-get"

# 2: apt-get install fails
before=$(state)
if PATH=$stub:$PATH STUB=$stub STUB_MODE=fail PG_MAJOR=99 DEDUP_SETUP=all "$top/test/setup.sh" >/dev/null 2>&1; then
	echo "not ok - the failing setup run succeeded"
	fails=$((fails + 1))
fi
[ -e "$stub/installing" ] || { echo "not ok - the failing run never reached apt-get install"; fails=$((fails + 1)); }
check "test/setup.sh failing in apt-get install"

# 3: killed while apt-get install runs
rm -f "$stub/installing"
before=$(state)
PATH=$stub:$PATH STUB=$stub STUB_MODE=hang PG_MAJOR=99 DEDUP_SETUP=all setsid "$top/test/setup.sh" >/dev/null 2>&1 &
pid=$!
for _ in $(seq 100); do [ -e "$stub/installing" ] && break; sleep 0.1; done
[ -e "$stub/installing" ] || { echo "not ok - the run to kill never reached apt-get install"; fails=$((fails + 1)); }
kill -TERM -- "-$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
check "test/setup.sh killed by SIGTERM in apt-get install"

if [ $fails -ne 0 ]; then
	echo "test/hygiene.sh: $fails failure(s)" >&2
	exit 1
fi
