#!/usr/bin/env bash
# Build the test VM's guest: Debian trixie with systemd as PID 1 and the
# unified cgroup v2 hierarchy, as a raw ext4 disk image plus the kernel and
# initrd to boot it with (qemu -kernel/-initrd; no bootloader needed).
#
# usage: tests/vm/build-guest.sh [--cache-dir DIR]   (default /var/cache/jaild/vm)
#
# Output: DIR/<recipe-digest>/{disk.raw,vmlinuz,initrd.img}; the last line of
# stdout is that directory. The digest covers every file of the recipe, so an
# unchanged recipe is a no-op. Runs as root with mmdebstrap and e2fsprogs, and
# network access to a Debian mirror.
set -euo pipefail

readonly SUITE=trixie
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly here
cache_dir=/var/cache/jaild/vm
[[ ${1:-} == --cache-dir ]] && { cache_dir=$2; shift 2; }

log() { printf 'build-guest.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# What the guest needs: systemd and a kernel; the package's dependencies
# (libseccomp2, init-system-helpers) so that it installs offline; nftables and
# iproute2 for egress; curl for the suite's socket-activation check; criu
# (the distribution's, as the package recommends it) for paused sessions.
readonly PACKAGES=systemd,systemd-sysv,udev,dbus,linux-image-amd64,initramfs-tools,kmod,e2fsprogs,iproute2,nftables,libseccomp2,init-system-helpers,passwd,curl,ca-certificates,procps,util-linux,criu

recipe_files() { printf '%s\n' build-guest.sh guest-entry.sh guest-entry.service; }
digest=$(cd "$here" && recipe_files | xargs -d '\n' sha256sum | sha256sum | cut -d' ' -f1)
out=$cache_dir/$digest
if [[ -f $out/disk.raw && -f $out/vmlinuz && -f $out/initrd.img ]]; then
  log "up to date: $out"
  echo "$out"
  exit 0
fi

[[ $(id -u) == 0 ]] || die "must run as root"
for tool in mmdebstrap mkfs.ext4; do
  command -v "$tool" >/dev/null || die "$tool is missing (apt-get install mmdebstrap e2fsprogs)"
done

mkdir -p "$cache_dir"
work=$(mktemp -d "$cache_dir/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root
start=$(date +%s)

mirror=http://deb.debian.org/debian
log "mmdebstrap $SUITE (kernel, systemd) from $mirror"
mmdebstrap --variant=minbase --include="$PACKAGES" \
  --customize-hook='echo jaild-vm > "$1/etc/hostname"' \
  --customize-hook='echo "root:jaild" | chroot "$1" chpasswd' \
  --customize-hook='printf "/dev/vda / ext4 rw,noatime 0 1\n" > "$1/etc/fstab"' \
  --customize-hook="upload $here/guest-entry.sh /usr/local/sbin/jaild-vm-entry" \
  --customize-hook='chmod 0755 "$1/usr/local/sbin/jaild-vm-entry"' \
  --customize-hook="upload $here/guest-entry.service /etc/systemd/system/jaild-vm-entry.service" \
  --customize-hook='chroot "$1" systemctl enable jaild-vm-entry.service' \
  --customize-hook='chroot "$1" systemctl mask getty@tty1.service serial-getty@ttyS0.service apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer' \
  "$SUITE" "$root" "$mirror" >&2

# The kernel and initrd boot the guest directly; the disk keeps a copy too.
kernel=$(ls "$root"/boot/vmlinuz-* | sort -V | tail -n1)
initrd=$(ls "$root"/boot/initrd.img-* | sort -V | tail -n1)
[[ -f $kernel && -f $initrd ]] || die "no kernel or initrd in the guest"
cp "$kernel" "$work/vmlinuz"
cp "$initrd" "$work/initrd.img"

log "disk image (ext4, 6 GiB sparse)"
truncate -s 6G "$work/disk.raw"
mkfs.ext4 -q -F -L jaild-vm -d "$root" "$work/disk.raw"
rm -rf "$root"

mkdir "$work/out"
mv "$work/disk.raw" "$work/vmlinuz" "$work/initrd.img" "$work/out/"
rm -rf "$out"
mv -T "$work/out" "$out"
# Older recipes' guests are of no further use.
for old in "$cache_dir"/*/; do
  [[ ${old%/} != "$out" && -f $old/disk.raw ]] && rm -rf "${old%/}"
done
log "built $out in $(( $(date +%s) - start ))s"
echo "$out"
