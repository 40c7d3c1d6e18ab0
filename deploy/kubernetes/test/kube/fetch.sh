#!/usr/bin/env bash
# Puts the three programs that TestAPIServerDryRun (../apiserver_test.go)
# runs into a cache outside the checkout, and does nothing when they are
# there already:
#   kube-apiserver  built from k8s.io/kubernetes@$KUBE_VERSION, fetched from
#                   the Go module proxy, its staging replace directives
#                   rewritten to the published k8s.io/* modules of the same
#                   version (the proxy's zip has no staging tree);
#   etcd, kubectl   from Debian trixie's etcd-server and kubectl packages,
#                   fetched with a private apt configuration (the host's
#                   sources, package state and installed packages are left
#                   as they are) and unpacked with dpkg-deb.
# The cache directory is keyed by the version and by this script's digest,
# so that a changed recipe builds anew: $JAILD_KUBE_CACHE (default
# /var/cache/jaild/kube)/<version>-<digest>. Everything is made in a scratch
# directory and renamed into place last: a killed run leaves nothing that
# looks done. A first build from empty Go caches took 5.5 min on 2 cores
# (nice 19; 2.7 GB of build cache, 0.5 GB of modules); later ones link
# from the build cache in seconds.
#
#   fetch.sh              build and fetch what is missing; prints the directory
#   fetch.sh --print-dir  print the directory only (it may not exist yet)
#
# Needs: go (1.26; $GO if set), apt-get, dpkg-deb, sha256sum, network access
# to the Go module proxy and deb.debian.org. Runs as root or not; no sudo.
set -euo pipefail

KUBE_VERSION=v1.37.2
# The staging modules (k8s.io/api, apiserver, ...) are published as
# v0.MINOR.PATCH of the same release.
STAGING_VERSION=v0${KUBE_VERSION#v1}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
DEBIAN_SUITE=trixie
DEBIAN_PACKAGES=(etcd-server kubectl)
CACHE=${JAILD_KUBE_CACHE:-/var/cache/jaild/kube}
GO=${GO:-go}

die() {
	echo "kube/fetch.sh: $*" >&2
	exit 1
}

self=$(readlink -f "${BASH_SOURCE[0]}")
digest=$(sha256sum "$self" | cut -c1-12)
dir=$CACHE/$KUBE_VERSION-$digest

case "${1:-}" in
--print-dir)
	echo "$dir"
	exit 0
	;;
"") ;;
*) die "unknown argument $1 (usage: fetch.sh [--print-dir])" ;;
esac

if [[ -x $dir/kube-apiserver && -x $dir/etcd && -x $dir/kubectl && -f $dir/VERSIONS ]]; then
	echo "$dir"
	exit 0
fi

for tool in "$GO" apt-get dpkg-deb sha256sum; do
	command -v "$tool" >/dev/null || die "$tool not found (make deps installs Go; apt and dpkg are Debian's)"
done
gover=$("$GO" version 2>&1 || true)
grep -qE ' go1\.(2[6-9]|[3-9][0-9])' <<<"$gover" ||
	die "kube-apiserver $KUBE_VERSION needs Go 1.26 or newer; \`$GO version\` says: ${gover:-nothing} (make deps fetches it)"

mkdir -p "$CACHE" || die "cannot make the cache directory $CACHE (set JAILD_KUBE_CACHE to another)"
work=$(mktemp -d "$CACHE/.work.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "kube/fetch.sh: building into $dir (scratch $work)" >&2

# kube-apiserver. The module's go.mod replaces every k8s.io/X it stages
# with ./staging/src/k8s.io/X, which the proxy's zip lacks: point each at
# the published k8s.io/X $STAGING_VERSION instead. go.work lists the
# staging tree too, and vendor/ is made for it: both go.
echo "kube/fetch.sh: k8s.io/kubernetes@$KUBE_VERSION from the Go module proxy" >&2
export GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0
src=$(cd "$work" && "$GO" mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[[ -n $src && -f $src/go.mod ]] || die "go mod download k8s.io/kubernetes@$KUBE_VERSION gave no source directory"
mkdir "$work/out"
cp -r "$src" "$work/kubernetes"
chmod -R u+w "$work/kubernetes"
cd "$work/kubernetes"
rm -rf go.work go.work.sum vendor
staged=$(grep -cE '^[[:space:]]*k8s\.io/[a-z0-9-]+ => \./staging/src/k8s\.io/[a-z0-9-]+$' go.mod || true)
[[ $staged -gt 0 ]] || die "k8s.io/kubernetes@$KUBE_VERSION's go.mod has no staging replace directives: the recipe no longer fits"
sed -i -E "s#^([[:space:]]*)(k8s\.io/[a-z0-9-]+) => \./staging/src/k8s\.io/[a-z0-9-]+\$#\1\2 => \2 $STAGING_VERSION#" go.mod
if grep -q '=> \./' go.mod; then
	die "go.mod still replaces with local paths: $(grep '=> \./' go.mod | tr -s '[:space:]' ' ')"
fi
echo "kube/fetch.sh: building kube-apiserver ($staged staging modules at $STAGING_VERSION; minutes the first time)" >&2
major=${KUBE_VERSION#v}
major=${major%%.*}
minor=${KUBE_VERSION#v*.}
minor=${minor%%.*}
ldflags=""
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
	ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done
nice -n 19 "$GO" build -trimpath -ldflags "-s -w$ldflags" -o "$work/out/kube-apiserver" ./cmd/kube-apiserver ||
	die "go build ./cmd/kube-apiserver of k8s.io/kubernetes@$KUBE_VERSION failed (above)"
cd "$work"

# etcd and kubectl: Debian's packages, downloaded with an apt of our own
# (its own sources list, lists, cache and an empty dpkg status), never
# installed. apt checks them against trixie's signed Release, with the
# archive keys the host trusts (debian-archive-keyring).
echo "kube/fetch.sh: ${DEBIAN_PACKAGES[*]} from Debian $DEBIAN_SUITE" >&2
mkdir -p apt/lists/partial apt/cache/archives/partial apt/sources.list.d apt/preferences.d apt/debs
echo "deb $DEBIAN_MIRROR $DEBIAN_SUITE main" >apt/sources.list
: >apt/status
aptopts=(
	-o "Dir::Etc::SourceList=$work/apt/sources.list"
	-o "Dir::Etc::SourceParts=$work/apt/sources.list.d"
	-o "Dir::Etc::Preferences=$work/apt/preferences"
	-o "Dir::Etc::PreferencesParts=$work/apt/preferences.d"
	-o "Dir::State::Lists=$work/apt/lists"
	-o "Dir::State::status=$work/apt/status"
	-o "Dir::Cache=$work/apt/cache"
	-o "APT::Architecture=amd64"
	-o "APT::Sandbox::User=root"
	-o "Debug::NoLocking=1"
)
apt-get "${aptopts[@]}" -q update >&2 || die "apt-get update of $DEBIAN_MIRROR $DEBIAN_SUITE failed (above)"
(cd apt/debs && apt-get "${aptopts[@]}" -q download "${DEBIAN_PACKAGES[@]}" >&2) ||
	die "apt-get download ${DEBIAN_PACKAGES[*]} from $DEBIAN_SUITE failed (above)"
for deb in apt/debs/*.deb; do
	dpkg-deb -x "$deb" root
done
for bin in etcd kubectl; do
	[[ -x root/usr/bin/$bin ]] || die "no usr/bin/$bin in $(ls apt/debs)"
	mv "root/usr/bin/$bin" "out/$bin"
done

# What is in the directory, for the test's log and for people.
{
	echo "kube-apiserver $KUBE_VERSION (k8s.io/kubernetes from the Go module proxy, staging modules $STAGING_VERSION, $("$GO" env GOVERSION))"
	for deb in apt/debs/*.deb; do
		echo "$(dpkg-deb -f "$deb" Package) $(dpkg-deb -f "$deb" Version) (Debian $DEBIAN_SUITE)"
	done
} >out/VERSIONS
"out/kube-apiserver" --version >&2 || die "the built kube-apiserver does not run"

rm -rf "$dir"
mv out "$dir"
echo "kube/fetch.sh: done" >&2
echo "$dir"
