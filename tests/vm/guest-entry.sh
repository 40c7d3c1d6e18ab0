#!/bin/sh
# Runs once in the test guest: mount the host's share, run its guest.sh with
# the output to the share and the console, record the exit status, power off.
set -u
mkdir -p /mnt/host
if ! mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 host /mnt/host; then
  echo "jaild-vm: cannot mount the host share" >/dev/console
  systemctl poweroff
  exit 1
fi
if [ -x /mnt/host/guest.sh ]; then
  /mnt/host/guest.sh 2>&1 | tee /mnt/host/guest.log >/dev/console
  rc=$(cat /mnt/host/guest.rc 2>/dev/null || echo 1)
else
  echo "jaild-vm: no guest.sh on the share" >/dev/console
  rc=1
fi
echo "jaild-vm: guest suite exit status $rc" >/dev/console
sync
systemctl poweroff
