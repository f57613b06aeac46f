#!/usr/bin/env bash
# test/chroot.sh: a Debian chroot for a PostgreSQL major version that the
# host's Debian does not ship: 15 from bookworm, 17 from trixie, 18 from sid.
#
#   sudo test/chroot.sh N                  create the chroot, or reuse the cached one
#   sudo test/chroot.sh N run TREE CMD...  copy TREE (without .git and build
#                                          products) to /build/dedup in the chroot
#                                          and run CMD there, as root, in that copy,
#                                          in a network namespace of its own
#   sudo test/chroot.sh N remove           delete the cached chroot
#
# The chroot is made by mmdebstrap from the mirror the host's apt uses and gets
# the packages test/setup.sh installs (a package the suite lacks is skipped,
# and so are the tests that need it).  It is cached in
# /var/cache/dedup-chroots/<suite> (DEDUP_CHROOT_CACHE to change) and reused
# while test/setup.sh asks for the same packages; a fresh machine builds it
# from nothing.  /proc, /dev/pts and a tmpfs on /dev/shm are mounted while
# something runs inside and always unmounted at exit, failure and interrupt
# included; processes it started that are still running inside (there
# should be none) are killed first.  Services do not start inside (policy-rc.d): the tests
# start the ones they need.
set -euo pipefail

pg=${1:?usage: test/chroot.sh 15|17|18 [run TREE CMD... | remove]}
shift
case $pg in
15) suite=bookworm ;;
17) suite=trixie ;;
18) suite=sid ;;
*) echo "test/chroot.sh: no Debian suite for PostgreSQL $pg (15: bookworm, 17: trixie, 18: sid)" >&2; exit 2 ;;
esac
if [ "$(id -u)" -ne 0 ]; then
	echo "test/chroot.sh: run me as root" >&2
	exit 1
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${DEDUP_CHROOT_CACHE:-/var/cache/dedup-chroots}
root=$cache/$suite

# the host's Debian mirror (not the security one), else deb.debian.org
host_mirror() {
	local m
	local debian='(^|[ \t])(bookworm|trixie|forky|sid|stable|testing|unstable)([ \t]|$)'
	# deb822 (.sources): the URIs of the first stanza for a Debian suite
	m=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk -v debian="$debian" '
		function found() { return uri != "" && suites ~ debian && types ~ /(^|[ \t])deb([ \t]|$)/ }
		/^[ \t]*$/ { if (found()) { print uri; exit } uri = suites = types = ""; next }
		tolower($1) == "uris:" { uri = $2 }
		tolower($1) == "suites:" { suites = $0 }
		tolower($1) == "types:" { types = $0 }
		END { if (found()) print uri }' | head -n 1)
	# one-line format: the first "deb" line for a Debian suite
	[ -n "$m" ] || m=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
		awk -v debian="$debian" '$1 == "deb" && $0 ~ debian {
			for (i = 2; i <= NF; i++) if ($i ~ /^(https?|file):/) { print $i; exit } }')
	echo "${m:-http://deb.debian.org/debian}"
}
mirror=${DEDUP_MIRROR:-$(host_mirror)}

# what the chroot must have: the package lists of test/setup.sh
stamp() {
	{ echo "suite=$suite pg=$pg recipe=1"; sed -n '/^required=(/,/^)/p; /^optional=(/,/^)/p' "$here/setup.sh"; } |
		md5sum | cut -d' ' -f1
}

mounted_under() { awk -v r="$1" '$2 == r || index($2, r "/") == 1 { print $2 }' /proc/self/mounts | sort -r; }

# every process this script starts inside carries this in its environment
run_id=dedup-chroot-$$-$RANDOM$RANDOM

# kill what this script started and still runs inside chroot $1 (only that:
# not what someone else runs there), then unmount everything under it
release() {
	local r=$1 p pids=() m
	[ -d "$r" ] || return 0
	# (one find, not a readlink for each process: forks are dear on a busy machine)
	for p in $(find /proc -mindepth 2 -maxdepth 2 -name root -lname "$r" -printf '%h\n' 2>/dev/null); do
		tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -x "DEDUP_RUN_ID=$run_id" >/dev/null &&
			pids+=("${p#/proc/}")
	done
	if [ ${#pids[@]} -gt 0 ]; then
		echo "== killing processes left in $r: ${pids[*]}" >&2
		kill -KILL "${pids[@]}" 2>/dev/null || true
		sleep 1
	fi
	for m in $(mounted_under "$r"); do
		umount "$m" 2>/dev/null || umount -l "$m"
	done
}

# mount what programs inside need (release undoes it)
attach() {
	local r=$1
	mount -t proc proc "$r/proc"
	mkdir -p "$r/dev/pts" "$r/dev/shm"
	mount --bind /dev/pts "$r/dev/pts"
	mount -t tmpfs -o mode=1777,nosuid,nodev shm "$r/dev/shm"
	local d
	for d in null zero full random urandom tty; do
		# mmdebstrap creates the nodes; inside some containers it cannot
		[ -c "$r/dev/$d" ] || { rm -f "$r/dev/$d"; touch "$r/dev/$d"; mount --bind "/dev/$d" "$r/dev/$d"; }
	done
	cp -L /etc/resolv.conf "$r/etc/resolv.conf" 2>/dev/null || true
}

isolate=()	# what in_root runs chroot under
in_root() {	# in_root ROOT CMD...: run CMD inside, with a clean environment
	local r=$1
	shift
	"${isolate[@]}" chroot "$r" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
		LANG=C.UTF-8 TERM=dumb DEDUP_IN_CHROOT=1 DEDUP_CHROOT="$r" DEDUP_RUN_ID="$run_id" "$@"
}

# install (or complete) the packages of test/setup.sh in chroot $1
provision() {
	local r=$1
	# sid's Release files expire a week after they are made: a mirror (or a
	# clock) a little behind must not stop the tests
	echo 'Acquire::Check-Valid-Until "false";' >"$r/etc/apt/apt.conf.d/99dedup-tests"
	mkdir -p "$r/build"
	rm -rf "$r/build/setup"
	mkdir "$r/build/setup" "$r/build/setup/test"
	cp "$here/setup.sh" "$r/build/setup/test/"
	in_root "$r" env PG_MAJOR="$pg" DEDUP_SETUP=packages bash /build/setup/test/setup.sh
	sync -f "$r"	# what dpkg wrote without syncing, before the chroot counts as ready
	rm -rf "$r/build/setup"
	in_root "$r" apt-get clean
	stamp >"$r/.dedup-ready"
}

cleanup_new=
on_exit() {
	release "$root"
	if [ -n "$cleanup_new" ]; then
		release "$cleanup_new"
		[ -z "$(mounted_under "$cleanup_new")" ] && rm -rf "$cleanup_new"
	fi
}
trap on_exit EXIT
trap 'exit 130' INT	# (the EXIT trap runs on these only when they are trapped)
trap 'exit 143' TERM

mkdir -p "$cache"
exec 9>"$cache/.$suite.lock"
flock 9	# one user of a chroot at a time

if [ "${1:-}" = remove ]; then
	release "$root"
	[ -z "$(mounted_under "$root")" ] || { echo "test/chroot.sh: $root still has mounts" >&2; exit 1; }
	rm -rf "$root" "$root.new"
	echo "== removed $root"
	exit 0
fi

command -v mmdebstrap >/dev/null && command -v ip >/dev/null || {
	echo "== installing mmdebstrap iproute2"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		mmdebstrap iproute2 >/dev/null
}

if [ ! -f "$root/.dedup-ready" ]; then
	new=$root.new
	release "$new"
	rm -rf "$new"
	cleanup_new=$new
	echo "== creating the $suite chroot (PostgreSQL $pg) in $root from $mirror"
	start=$(date +%s)
	for attempt in 1 2; do	# once more if the network hiccups
		# the base system in one apt run (several times faster than
		# debootstrap), dpkg not syncing each file it writes (for the
		# packages too: the option stays in the chroot); a Release file
		# past its Valid-Until (sid's expire a week after they are made, and
		# a mirror or a clock may be behind) must not stop the tests
		mmdebstrap --variant=minbase --components=main --dpkgopt=force-unsafe-io \
			--aptopt='Acquire::Check-Valid-Until "false"' \
			"$suite" "$new" "$mirror" >"$cache/$suite-mmdebstrap.log" 2>&1 && break
		tail -n 30 "$cache/$suite-mmdebstrap.log" >&2
		[ $attempt = 1 ] || exit 1
		echo "== mmdebstrap failed, once more" >&2
		release "$new"
		rm -rf "$new"
	done
	mid=$(date +%s)
	attach "$new"
	provision "$new"
	release "$new"
	rm -rf "$root"
	mv "$new" "$root"
	cleanup_new=
	end=$(date +%s)
	echo "== $suite chroot ready: base system $((mid - start)) s, packages $((end - mid)) s"
elif [ "$(cat "$root/.dedup-ready")" != "$(stamp)" ]; then
	echo "== the $suite chroot predates test/setup.sh's package list: completing it"
	attach "$root"
	provision "$root"
	release "$root"
fi

if [ "${1:-}" = run ]; then
	tree=${2:?test/chroot.sh N run TREE CMD...}
	shift 2
	# what earlier runs kept (test/run.sh keeps a failed run's directory)
	rm -rf "$root/build/dedup" "$root"/tmp/dedup-test.*
	mkdir -p "$root/build/dedup"
	tar -C "$tree" --exclude=.git --exclude='*.o' --exclude='*.so' --exclude='*.bc' \
		--exclude=./results --exclude=./tmp_check --exclude=./tmp_check_iso \
		--exclude=./tmp_check_regress --exclude=./output_iso -cf - . |
		tar -C "$root/build/dedup" -xf -
	attach "$root"
	# a network namespace of its own, with only a loopback interface: the
	# ports its tests pick cannot clash with those of a run on the host or
	# in another chroot at the same time
	isolate=(unshare --net sh -c 'ip link set lo up && exec "$@"' -)
	in_root "$root" bash -c 'cd /build/dedup && exec "$@"' - "$@"
fi
