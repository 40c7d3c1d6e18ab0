#!/usr/bin/env bash
# Puts a CRIU new enough for jaild's checkpoints (docs/CHECKPOINTS.md) into
# a cache outside the checkout, and does nothing when it is there already:
# Debian's criu package and the libraries it links, from $DEBIAN_SUITE,
# downloaded with a private apt configuration (the host's sources, package
# state and installed packages are left as they are: no system file is
# replaced) and unpacked with dpkg-deb. sid's criu needs a newer glibc than
# Debian 12's, so it runs through the unpacked ld-linux-x86-64.so.2 with
# --library-path: bin/criu is that wrapper.
#
# Why not the host's: bookworm's criu 3.17.1 fails on Linux 6.18 before it
# does anything ("vdso: Unexpected rt vDSO area bounds").
#
# The directory is keyed by this script's digest, so a changed recipe
# fetches anew: $JAILD_CRIU_CACHE (default /var/cache/jaild/criu)/<digest>,
# and $JAILD_CRIU_CACHE/current points at the newest (jaild looks there
# when no criu is configured). Everything is made in a scratch directory
# and renamed into place last: a killed run leaves nothing that looks done.
#
#   fetch.sh              fetch when missing; prints the directory
#   fetch.sh --print-dir  print the directory only (it may not exist yet)
#
# Needs: apt-get, dpkg-deb, sha256sum, network access to deb.debian.org.
set -euo pipefail

DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
DEBIAN_SUITE=sid
# criu and the closure of its Depends (libc6 included: sid's criu needs
# glibc >= 2.38), as `apt-cache depends --recurse` lists them in sid.
DEBIAN_PACKAGES=(criu libcompel1 libc6 libgcc-s1 libbsd0 libmd0 libgnutls30t64 libgmp10
	libhogweed6t64 libnettle8t64 libidn2-0 libunistring5 libp11-kit0 libffi8 libtasn1-6
	libnet9 libnftables1 libnftnl11 libmnl0 libjansson4 libxtables12 libnl-3-200
	libprotobuf-c1 libuuid1)
CACHE=${JAILD_CRIU_CACHE:-/var/cache/jaild/criu}
ARCH=amd64
LIBDIR=usr/lib/x86_64-linux-gnu

die() {
	echo "criu/fetch.sh: $*" >&2
	exit 1
}

self=$(readlink -f "${BASH_SOURCE[0]}")
digest=$(sha256sum "$self" | cut -c1-12)
dir=$CACHE/$digest

case "${1:-}" in
--print-dir)
	echo "$dir"
	exit 0
	;;
"") ;;
*) die "unknown argument $1 (usage: fetch.sh [--print-dir])" ;;
esac

publish_current() {
	ln -sfn "$digest" "$CACHE/.current.tmp"
	mv -T "$CACHE/.current.tmp" "$CACHE/current"
}

if [[ -x $dir/bin/criu && -f $dir/VERSIONS ]]; then
	[[ "$(readlink "$CACHE/current" 2>/dev/null)" == "$digest" ]] || publish_current
	echo "$dir"
	exit 0
fi

[[ "$(dpkg --print-architecture 2>/dev/null)" == "$ARCH" ]] ||
	die "only $ARCH is fetched (this host is $(dpkg --print-architecture 2>/dev/null || echo unknown))"
for tool in apt-get dpkg-deb sha256sum; do
	command -v "$tool" >/dev/null || die "$tool not found"
done

mkdir -p "$CACHE" || die "cannot make the cache directory $CACHE (set JAILD_CRIU_CACHE to another)"
chmod 0755 "$CACHE"
work=$(mktemp -d "$CACHE/.work.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "criu/fetch.sh: fetching into $dir (scratch $work)" >&2

mkdir -p "$work"/apt/{lists/partial,cache/archives/partial,sources.list.d,preferences.d,debs}
echo "deb $DEBIAN_MIRROR $DEBIAN_SUITE main" >"$work/apt/sources.list"
: >"$work/apt/status"
aptopts=(
	-o "Dir::Etc::SourceList=$work/apt/sources.list"
	-o "Dir::Etc::SourceParts=$work/apt/sources.list.d"
	-o "Dir::Etc::Preferences=$work/apt/preferences"
	-o "Dir::Etc::PreferencesParts=$work/apt/preferences.d"
	-o "Dir::State::Lists=$work/apt/lists"
	-o "Dir::State::status=$work/apt/status"
	-o "Dir::Cache=$work/apt/cache"
	-o "APT::Architecture=$ARCH"
	-o "APT::Sandbox::User=root"
	-o "Debug::NoLocking=1"
)
apt-get "${aptopts[@]}" -q update >&2 || die "apt-get update of $DEBIAN_MIRROR $DEBIAN_SUITE failed (above)"
(cd "$work/apt/debs" && apt-get "${aptopts[@]}" -q download "${DEBIAN_PACKAGES[@]}" >&2) ||
	die "apt-get download ${DEBIAN_PACKAGES[*]} from $DEBIAN_SUITE failed (above)"

out=$work/out
mkdir -p "$out/root" "$out/bin"
for deb in "$work"/apt/debs/*.deb; do
	dpkg-deb -x "$deb" "$out/root"
done
[[ -x $out/root/usr/sbin/criu && -x $out/root/$LIBDIR/ld-linux-x86-64.so.2 ]] ||
	die "no usr/sbin/criu or ld-linux-x86-64.so.2 in $(ls "$work/apt/debs")"
# Nothing of it is setuid, and only root writes it.
find "$out/root" -perm /6000 -type f -exec chmod ug-s {} +
chmod -R go-w "$out"

# The wrapper finds its directory itself, so the cache can move.
cat >"$out/bin/criu" <<WRAP
#!/bin/sh
# criu from Debian $DEBIAN_SUITE with its own libraries (deploy/criu/fetch.sh)
d=\$(dirname "\$(dirname "\$(readlink -f "\$0")")")/root
exec "\$d/$LIBDIR/ld-linux-x86-64.so.2" --library-path "\$d/$LIBDIR" "\$d/usr/sbin/criu" "\$@"
WRAP
chmod 0755 "$out/bin/criu"

{
	for deb in "$work"/apt/debs/*.deb; do
		echo "$(dpkg-deb -f "$deb" Package) $(dpkg-deb -f "$deb" Version) (Debian $DEBIAN_SUITE)"
	done
} >"$out/VERSIONS"
"$out/bin/criu" --version >&2 || die "the fetched criu does not run"

rm -rf "$dir"
mv -T "$out" "$dir"
publish_current
echo "criu/fetch.sh: done" >&2
echo "$dir"
