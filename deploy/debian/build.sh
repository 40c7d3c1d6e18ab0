#!/usr/bin/env bash
# Build the Debian packages with dpkg-deb from staging trees:
#   OUTDIR/jaild_<version>_amd64.deb        the daemon, jailctl, units, config
#   OUTDIR/jaild-rootfs_<version>_amd64.deb the rootfs image
# The binaries are built here as Debian builds its Go packages: PIE, full
# RELRO, stripped (GO names the go command); the image is IMAGE_DIR's
# (default /var/cache/jaild/rootfs/current; make rootfs). VERSION overrides
# the version derived from git. See docs/PACKAGING.md.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:?usage: build.sh OUTDIR}
image=$(readlink -f "${IMAGE_DIR:-/var/cache/jaild/rootfs/current}")

die() { echo "deb: error: $*" >&2; exit 1; }
[[ -f $image/rootfs.squashfs && -f $image/manifest.json ]] || die "no rootfs image in $image (make rootfs)"

commit=$(git -C "$repo" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [[ -z ${VERSION:-} ]]; then
  # No release tags yet: 0.2.0~git<commit date>.<commit>, which sorts by date.
  when=$(TZ=UTC git -C "$repo" log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S 2>/dev/null || date -u +%Y%m%d%H%M%S)
  VERSION=0.2.0~git$when.$commit
fi
[[ $VERSION =~ ^[0-9][A-Za-z0-9.+~-]*$ ]] || die "VERSION $VERSION is not a Debian version"
digest=$(basename "$image")
# Reproducible timestamps in the archives: the commit's time.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct 2>/dev/null || date +%s)}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

# docs and the changelog every package carries
docs() { # pkg root
  local d=$2/usr/share/doc/$1
  install -d -m 0755 "$d"
  install -m 0644 "$here/copyright" "$d/copyright"
  sed -e "s/@VERSION@/$VERSION/" -e "s/@COMMIT@/$commit/" \
      -e "s/@DATE@/$(date -u -R -d "@$SOURCE_DATE_EPOCH")/" "$here/changelog" | gzip -9n > "$d/changelog.gz"
  chmod 0644 "$d/changelog.gz"
}

finish() { # pkg root control [dpkg-deb compression options]
  local pkg=$1 root=$2 size comp=("${@:4}")
  [[ ${#comp[@]} -gt 0 ]] || comp=(-Zxz)
  install -d -m 0755 "$root/DEBIAN"
  size=$(du -sk --apparent-size --exclude=DEBIAN "$root" | cut -f1)
  sed -e "s/@VERSION@/$VERSION/g" -e "s/@SIZE@/$size/" "$3" > "$root/DEBIAN/control"
  (cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z | xargs -0r md5sum) > "$root/DEBIAN/md5sums"
  chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/md5sums"
  find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
  dpkg-deb --root-owner-group "${comp[@]}" --build "$root" "$out/${pkg}_${VERSION}_amd64.deb" >/dev/null
  echo "$out/${pkg}_${VERSION}_amd64.deb"
}

# jaild
r=$work/jaild
install -d -m 0755 "$r/usr/bin" "$r/usr/lib/systemd/system" "$r/usr/lib/sysusers.d" "$r/usr/lib/tmpfiles.d" \
  "$r/usr/share/jaild/seccomp" "$r/etc/jaild" "$r/usr/share/man/man1" "$r/usr/share/man/man8"
for b in jaild jailctl; do
  (cd "$repo" && CGO_ENABLED=1 CGO_LDFLAGS="-Wl,-z,relro,-z,now" "${GO:-go}" build -trimpath -tags seccomp -buildmode=pie \
    -ldflags "-X github.com/jaild/jaild/internal/version.Version=$VERSION" -o "$r/usr/bin/$b" "./cmd/$b")
  strip --strip-unneeded --remove-section=.comment --remove-section=.note "$r/usr/bin/$b"
  chmod 0755 "$r/usr/bin/$b"
done
sed -e 's,/usr/local/bin/,/usr/bin/,g' -e 's,/usr/local/share/doc/,/usr/share/doc/,g' \
  "$repo/systemd/jaild.service" > "$r/usr/lib/systemd/system/jaild.service"
sed -e 's,/usr/local/share/doc/,/usr/share/doc/,g' "$repo/systemd/jaild.socket" > "$r/usr/lib/systemd/system/jaild.socket"
install -m 0644 "$repo/systemd/jaild.sysusers" "$r/usr/lib/sysusers.d/jaild.conf"
install -m 0644 "$repo/systemd/jaild.tmpfiles" "$r/usr/lib/tmpfiles.d/jaild.conf"
install -m 0644 "$repo/seccomp-profiles/default.json" "$r/usr/share/jaild/seccomp/default.json"
# The documented config, with the package's paths.
sed -e 's,^image = "[^"]*",image = "/usr/lib/jaild/rootfs/current",' \
    -e 's,^seccomp_profile = "[^"]*",seccomp_profile = "/usr/share/jaild/seccomp/default.json",' \
  "$repo/systemd/jaild.toml" > "$r/etc/jaild/jaild.toml"
grep -q '^image = "/usr/lib/jaild/rootfs/current"' "$r/etc/jaild/jaild.toml" || die "jaild.toml: no image key to rewrite"
grep -q '^seccomp_profile = "/usr/share/jaild/' "$r/etc/jaild/jaild.toml" || die "jaild.toml: no seccomp_profile key to rewrite"
chmod 0644 "$r/etc/jaild/jaild.toml" "$r"/usr/lib/systemd/system/*
gzip -9n < "$here/jailctl.1" > "$r/usr/share/man/man1/jailctl.1.gz"
gzip -9n < "$here/jaild.8" > "$r/usr/share/man/man8/jaild.8.gz"
chmod 0644 "$r"/usr/share/man/man*/*.gz
docs jaild "$r"
install -m 0644 "$repo/README.md" "$r/usr/share/doc/jaild/README.md"
install -d -m 0755 "$r/DEBIAN"
for s in postinst prerm postrm; do install -m 0755 "$here/$s" "$r/DEBIAN/$s"; done
echo /etc/jaild/jaild.toml > "$r/DEBIAN/conffiles"
chmod 0644 "$r/DEBIAN/conffiles"
finish jaild "$r" "$here/control.jaild"

# jaild-rootfs: the image under its recipe digest, and `current`.
r=$work/jaild-rootfs
install -d -m 0755 "$r/usr/lib/jaild/rootfs/$digest"
install -m 0644 "$image/rootfs.squashfs" "$image/manifest.json" "$r/usr/lib/jaild/rootfs/$digest/"
ln -s "$digest" "$r/usr/lib/jaild/rootfs/current"
docs jaild-rootfs "$r"
# The squashfs is zstd-compressed already: xz would spend a minute for
# nothing, and lintian wants some compression.
finish jaild-rootfs "$r" "$here/control.jaild-rootfs" -Zgzip -z1
