#!/usr/bin/env bash
# python-ml's own build step: run by rootfs/customize.sh with the tree as $1.
set -euo pipefail
root=$1

# libtorch links Open MPI, which loads UCX; UCX reads the host's boot id
# when it loads, which a jail cannot see (the file reads empty), and prints
# an error to stdout at every `import torch`. Its system config file keeps
# its log to fatal errors.
install -d -m 0755 "$root/etc/ucx"
printf 'UCX_LOG_LEVEL=fatal\n' >"$root/etc/ucx/ucx.conf"
