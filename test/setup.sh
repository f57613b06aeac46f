#!/usr/bin/env bash
# test/setup.sh: install what dedup needs on Debian, then build and install it.
#
#   sudo test/setup.sh              PG_MAJOR (default 15) picks the PostgreSQL version
#   DEDUP_SETUP=packages ...        only install the packages
#   DEDUP_SETUP=build ...           only build and install dedup
#   DEDUP_SETUP=none ...            nothing (for callers that ran it already)
#
# Idempotent, warnings are errors.  Apart from the packages and the installed
# extension it leaves the machine as it found it, also when it fails or is
# interrupted:
#   * it builds in a temporary copy of the tree: nothing is written into the
#     checkout (no root-owned build products);
#   * the two files that keep Debian from creating a default cluster and from
#     starting services while the packages install
#     (/etc/postgresql-common/createcluster.d/dedup-tests.conf and
#     /usr/sbin/policy-rc.d) are put back as they were: removed if they did
#     not exist, their old contents restored if they did.
# An optional package the Debian suite does not have is reported and skipped:
# the demo and a plain "make installcheck" do without it (the TAP tests that
# need it are skipped), test/run.sh fails those tests.
set -euo pipefail

PG_MAJOR=${PG_MAJOR:-15}
DEDUP_SETUP=${DEDUP_SETUP:-all}
[ "$DEDUP_SETUP" != none ] || exit 0
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
required=(
	"postgresql-$PG_MAJOR" "postgresql-server-dev-$PG_MAJOR"
	build-essential libipc-run-perl
)
optional=(
	python3-psycopg2
	prometheus-postgres-exporter prometheus rabbitmq-server python3-pika
	pgbouncer python3-psycopg
	libpostgresql-jdbc-java default-jdk-headless
)
# for test/bench/instructions.sh, the plot of test/bench/run.sh's soak
# (soak_plot.py) and the style gates (test/gates/check: pg_bsd_indent,
# perltidy), which test/run.sh runs on the host only
[ -n "${DEDUP_IN_CHROOT:-}" ] || optional+=(valgrind python3-matplotlib pg-bsd-indent perltidy)

if [ "$(id -u)" -ne 0 ]; then
	echo "test/setup.sh: run me as root (sudo $0)" >&2
	exit 1
fi

# --- undo log: everything below that changes the machine registers here ---
scratch=$(mktemp -d /tmp/dedup-setup.XXXXXX)
restore=()	# files to put back: "path" (backup in $scratch/saved) or absent
made_dirs=()	# directories we created, removed again if empty
cleanup() {
	local f d
	for f in "${restore[@]}"; do
		if [ -e "$scratch/saved$f" ] || [ -L "$scratch/saved$f" ]; then
			cp -a "$scratch/saved$f" "$f"
		else
			rm -f "$f"
		fi
	done
	for ((i = ${#made_dirs[@]} - 1; i >= 0; i--)); do
		d=${made_dirs[i]}
		# unless a package installed meanwhile claims it
		dpkg-query -S "$d" >/dev/null 2>&1 || rmdir "$d" 2>/dev/null || true
	done
	rm -rf "$scratch"
}
trap cleanup EXIT

# put_file PATH MODE CONTENT: write PATH for the duration of this script
put_file() {
	local path=$1 mode=$2 content=$3 d
	if [ -e "$path" ] || [ -L "$path" ]; then
		mkdir -p "$scratch/saved$(dirname "$path")"
		cp -a "$path" "$scratch/saved$path"
	fi
	d=$(dirname "$path")
	local todo=()
	while [ ! -d "$d" ]; do todo=("$d" "${todo[@]}"); d=$(dirname "$d"); done
	for d in "${todo[@]}"; do mkdir "$d"; made_dirs+=("$d"); done
	restore+=("$path")
	printf '%s' "$content" >"$path"
	chmod "$mode" "$path"
}

# (no "| grep -q": under pipefail its early exit can fail the pipeline)
installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = 'install ok installed' ]; }
available() {
	local c
	c=$(apt-cache policy "$1" 2>/dev/null | sed -n 's/^ *Candidate: //p')
	[ -n "$c" ] && [ "$c" != '(none)' ]
}

if [ "$DEDUP_SETUP" != build ]; then
	missing=() update=
	for p in "${required[@]}"; do
		installed "$p" || { missing+=("$p"); update=1; }
	done
	lists=$(find /var/lib/apt/lists -maxdepth 1 -name '*_Packages*' 2>/dev/null | head -n 1)
	for p in "${optional[@]}"; do
		installed "$p" && continue
		missing+=("$p")
		# an optional package this suite of Debian lacks
		# is no reason to update the package lists at every run
		if [ -z "$lists" ] || available "$p"; then update=1; fi
	done
	if [ -z "$update" ]; then
		for p in "${missing[@]}"; do
			echo "== package $p is not available here: the tests that need it cannot run"
		done
	else
		# keep Debian from creating and starting its own default cluster, and
		# its services from starting: tests start what they need themselves
		put_file /etc/postgresql-common/createcluster.d/dedup-tests.conf 644 \
			$'create_main_cluster = false\n'
		put_file /usr/sbin/policy-rc.d 755 $'#!/bin/sh\nexit 101\n'
		apt-get update -qq
		install=()
		for p in "${missing[@]}"; do
			if available "$p"; then
				install+=("$p")
			elif [[ " ${required[*]} " == *" $p "* ]]; then
				echo "test/setup.sh: package $p is required and not available from apt" >&2
				exit 1
			else
				echo "== package $p is not available here: the tests that need it cannot run"
			fi
		done
		if [ ${#install[@]} -gt 0 ]; then
			echo "== installing ${install[*]}"
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
				"${install[@]}" >/dev/null
		fi
	fi
fi

if [ "$DEDUP_SETUP" != packages ]; then
	PG_CONFIG=/usr/lib/postgresql/$PG_MAJOR/bin/pg_config
	echo "== building dedup against $($PG_CONFIG --version) (in a copy of the tree)"
	mkdir "$scratch/build"
	tar -C "$top" --exclude=.git --exclude='*.o' --exclude='*.so' --exclude='*.bc' -cf - . |
		tar -C "$scratch/build" -xf -
	make -C "$scratch/build" -s PG_CONFIG="$PG_CONFIG" COPT=-Werror
	make -C "$scratch/build" -s install PG_CONFIG="$PG_CONFIG"
fi
