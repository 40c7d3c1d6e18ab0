#!/usr/bin/env bash
# Check the packages in OUTDIR with lintian; any error or warning that the
# overrides (each justified in docs/PACKAGING.md) do not cover fails.
set -euo pipefail
out=${1:?usage: lint.sh OUTDIR}
command -v lintian >/dev/null || { echo "lint: lintian is missing (apt-get install lintian)" >&2; exit 1; }
debs=("$out"/jaild_*.deb "$out"/jaild-rootfs_*.deb)
lintian --fail-on error,warning --display-info --suppress-tags-from-file /dev/null "${debs[@]}"
echo "lintian: no unjustified error or warning in ${debs[*]##*/}"
