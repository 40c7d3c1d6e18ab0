#!/usr/bin/env bash
# Run the runner's tests against the runner installed in a built image, in a
# chroot of the mounted image as the jail user (uid 1000), so they use the
# image's Python and libraries (the figure tests need matplotlib).
#
# usage: rootfs/test.sh [IMAGE_DIR]   (default /var/cache/jaild/rootfs/current)
set -euo pipefail
image=${1:-/var/cache/jaild/rootfs/current}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[[ -f $image/rootfs.squashfs ]] || { echo "test.sh: no image in $image (run make rootfs)" >&2; exit 1; }

mnt=$(mktemp -d /tmp/jaild-rootfs-test.XXXXXX)
cleanup() {
  umount -R "$mnt" 2>/dev/null || umount -R -l "$mnt" 2>/dev/null || true
  rmdir "$mnt"
}
trap cleanup EXIT
mount -t squashfs -o loop,ro,nodev,nosuid "$image/rootfs.squashfs" "$mnt"
mount -t tmpfs -o size=256m tmpfs "$mnt/tmp"
mount -t proc proc "$mnt/proc"
mount -t tmpfs -o size=64k,mode=755 tmpfs "$mnt/dev"
touch "$mnt/dev/null" && mount --bind /dev/null "$mnt/dev/null"
mkdir -m 0755 "$mnt/tmp/tests"
cp "$here/runner/test_runner.py" "$mnt/tmp/tests/"
chmod 1777 "$mnt/tmp"
chroot --userspec=1000:1000 "$mnt" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/tmp LANG=C.UTF-8 \
  JAILD_RUNNER=/opt/jaild/runner.py JAILD_INIT=/opt/jaild/init /usr/bin/python3 -B -m unittest discover -s /tmp/tests 2>&1
