#!/usr/bin/env bash
# Runs the official MCP conformance suite (@modelcontextprotocol/conformance,
# pinned in package.json) against `jailctl mcp --http` on a loopback port,
# with a real jaild behind it on a temporary socket. It checks first that
# requests without the server's token are refused (401), then runs the
# suite through a proxy that adds the token.
#
# Scenarios that do not apply are listed, each with its reason, in
# expected-failures.yml; any other failure, or a listed scenario that
# passes, fails the run. Needs root (it starts jaild), a built rootfs,
# bin/jaild and bin/jailctl (`make build`), and npm: the suite and the
# Node.js it needs (>= 22) are installed from the npm registry into
# $MCP_CONFORMANCE_CACHE, once per lockfile.
#
# Environment: JAILD_IMAGE_DIR (default /var/cache/jaild/rootfs/current),
# BIN_DIR (default ./bin), MCP_CONFORMANCE_CACHE (default
# /var/cache/jaild/mcp-conformance), RESULTS_DIR (default: a temporary
# directory, removed afterwards).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${BIN_DIR:-$root/bin}
image=${JAILD_IMAGE_DIR:-/var/cache/jaild/rootfs/current}
cache=${MCP_CONFORMANCE_CACHE:-/var/cache/jaild/mcp-conformance}
spec=2025-11-25

die() { echo "mcp-conformance: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root: it starts jaild"
command -v npm >/dev/null || die "needs npm (Debian: apt-get install npm)"
command -v curl >/dev/null || die "needs curl"
for b in jaild jailctl; do [ -x "$bin/$b" ] || die "no $bin/$b: run make build"; done
[ -d "$image" ] || die "no rootfs at $image: run make rootfs"

# Install the pinned suite and Node.js when the lockfile changed.
mkdir -p "$cache"
if ! cmp -s "$here/package-lock.json" "$cache/package-lock.json" || [ ! -x "$cache/node_modules/.bin/node" ]; then
	rm -rf "$cache/node_modules"
	cp "$here/package.json" "$here/package-lock.json" "$cache/"
	(cd "$cache" && npm ci --no-audit --no-fund --loglevel=error)
fi
node=$cache/node_modules/.bin/node
suite=$cache/node_modules/@modelcontextprotocol/conformance/dist/index.js

work=$(mktemp -d /tmp/jaild-mcp-conformance.XXXXXX)
chmod 755 "$work"
results=${RESULTS_DIR:-$work/results}
pids=()
cleanup() {
	local rc=$? p
	for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	if [ "$rc" != 0 ]; then
		echo "--- jaild log"; cat "$work/jaild.log"
		echo "--- jailctl mcp log"; cat "$work/mcp.log"
	fi >&2
	rm -rf "$work"
}
trap cleanup EXIT

# A daemon of its own: its cgroup name and socket are this run's, so that
# it neither sees nor sweeps another daemon's jails.
cat >"$work/jaild.toml" <<EOF
socket = "$work/s.sock"
socket_group = ""
run_dir = "$work/run"
cgroup_name = "mcp-conformance-$$"
image = "$image"
seccomp_profile = "$root/seccomp-profiles/default.json"
[pool]
size = 0
EOF
"$bin/jaild" --config "$work/jaild.toml" >"$work/jaild.log" 2>&1 &
pids+=($!)
for _ in $(seq 600); do [ -S "$work/s.sock" ] && break; kill -0 "${pids[0]}" 2>/dev/null || die "jaild exited"; sleep 0.1; done
[ -S "$work/s.sock" ] || die "jaild did not come up"

"$bin/jailctl" --socket "$work/s.sock" mcp --http 127.0.0.1:0 >"$work/mcp.token" 2>"$work/mcp.log" &
pids+=($!)
url=
for _ in $(seq 300); do
	url=$(grep -o 'serving MCP at http://[^ ]*' "$work/mcp.log" | cut -d' ' -f4) && break
	kill -0 "${pids[1]}" 2>/dev/null || die "jailctl mcp exited"
	sleep 0.1
done
[ -n "$url" ] || die "jailctl mcp --http did not say where it serves"
token=$(head -n1 "$work/mcp.token")
[ -n "$token" ] || die "jailctl mcp --http printed no token"

# Without the token, every request is refused.
for m in POST GET DELETE; do
	code=$(curl -s -o /dev/null -w '%{http_code}' -X "$m" -H 'Content-Type: application/json' -d '{}' "$url")
	[ "$code" = 401 ] || die "$m $url without the token: HTTP $code, want 401"
done

# The suite has no option to send a header, so it talks to a small proxy
# on another loopback port that adds the token to each request and
# passes everything else through as it is (the Host and Origin headers
# too, which the DNS rebinding scenario sets), streams included.
cat >"$work/proxy.js" <<'EOF_JS'
const http = require('http');
const fs = require('fs');
const [target, token, portFile] = process.argv.slice(2);
const up = new URL(target);
const server = http.createServer((req, res) => {
  const headers = { ...req.headers, authorization: `Bearer ${token}` };
  const fwd = http.request({ host: up.hostname, port: up.port, method: req.method, path: req.url, headers }, (r) => {
    res.writeHead(r.statusCode, r.headers);
    r.pipe(res);
  });
  fwd.on('error', () => { if (!res.headersSent) res.writeHead(502); res.end(); });
  res.on('close', () => fwd.destroy());
  req.pipe(fwd);
});
server.listen(0, '127.0.0.1', () => fs.writeFileSync(portFile, String(server.address().port)));
EOF_JS
"$node" "$work/proxy.js" "$url" "$token" "$work/proxy.port" 2>>"$work/mcp.log" &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/proxy.port" ] && break; sleep 0.1; done
[ -s "$work/proxy.port" ] || die "the token proxy did not start"
proxied="http://127.0.0.1:$(cat "$work/proxy.port")/mcp"

echo "mcp-conformance: suite $("$node" -p "require('$cache/node_modules/@modelcontextprotocol/conformance/package.json').version"), spec $spec, server $url (through $proxied, which adds the token)"
"$node" "$suite" server --url "$proxied" --spec-version "$spec" \
	--expected-failures "$here/expected-failures.yml" --output-dir "$results"
