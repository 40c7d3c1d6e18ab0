#!/usr/bin/env bash
# The layering rules of .golangci.yml, shown to bite: golangci-lint loads
# the deliberate violations (files built only with the lintcheck tag) and
# must refuse each one with its rule. A rule that stopped matching (a
# moved package, a glob that no longer fits) fails here instead of
# passing silently. usage: tests/lint/layering.sh GOLANGCI_LINT
set -uo pipefail
lint=${1:?usage: layering.sh GOLANGCI_LINT}
cd "$(dirname "$0")/../.."
out=$("$lint" run --build-tags seccomp,lintcheck ./internal/server/ ./internal/client/ ./internal/metrics/ 2>&1)
rc=$?
expect=(
	'internal/server/lintcheck.go.*internal/jail. is not allowed from list .server.'
	'internal/server/lintcheck.go.*internal/run. is not allowed from list .server.'
	'internal/server/lintcheck.go.*internal/runner. is not allowed from list .server.'
	'internal/server/lintcheck.go.*internal/workspace. is not allowed from list .server.'
	'internal/server/lintcheck.go.*google/nftables. is not allowed from list .netlink.'
	'internal/client/lintcheck.go.*internal/jail. is not allowed from list .clients.'
	'internal/client/lintcheck.go.*internal/egress. is not allowed from list .clients.'
	'internal/client/lintcheck.go.*internal/seccomp. is not allowed from list .clients.'
	'internal/client/lintcheck.go.*internal/run. is not allowed from list .clients.'
	'internal/client/lintcheck.go.*internal/server. is not allowed from list .clients.'
	'internal/client/lintcheck.go.*libseccomp-golang. is not allowed from list .clients.'
	'internal/client/lintcheck.go.*vishvananda/netlink. is not allowed from list .netlink.'
	'internal/metrics/lintcheck.go.*internal/pool. is not allowed from list .metrics.'
)
fail=0
if [ "$rc" -eq 0 ]; then
	echo "layering: golangci-lint accepted the deliberate violations" >&2
	fail=1
fi
for e in "${expect[@]}"; do
	if ! grep -Eq -- "$e" <<<"$out"; then
		echo "layering: no refusal matching: $e" >&2
		fail=1
	fi
done
if [ "$fail" -ne 0 ]; then
	printf '%s\n' "$out" >&2
	exit 1
fi
echo "layering: depguard refused all ${#expect[@]} deliberate violations"
