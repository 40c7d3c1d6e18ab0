#!/bin/sh
# Runs once in the test guest: mount the host's share, run its guest.sh with
# the output to the share and the console, record the exit status, power off.
set -u
mkdir -p /mnt/host
# The share's virtio device may still be probing when this unit starts (seen
# under software emulation: "9pnet_virtio: no channels available for device
# host"), so wait for udev and try for up to a minute before giving up.
mounted=no
for _ in $(seq 1 60); do
  udevadm settle --timeout=5 2>/dev/null || true
  modprobe 9pnet_virtio 2>/dev/null || true
  if mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 host /mnt/host 2>/dev/null; then
    mounted=yes
    break
  fi
  sleep 1
done
if [ "$mounted" != yes ]; then
  mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 host /mnt/host 2>&1 | tee /dev/console
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
