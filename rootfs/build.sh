#!/usr/bin/env bash
# Build the jaild "python" rootfs image: Debian trixie with Python 3.13, the
# libraries in packages.txt (plus packages-sid.txt from unstable) and the
# in-jail runner at /opt/jaild, as a read-only squashfs.
#
# usage: rootfs/build.sh [--cache-dir DIR]     (default DIR=/var/cache/jaild/rootfs)
#
# Output: DIR/<recipe-digest>/{rootfs.squashfs,manifest.json}, and the symlink
# DIR/current -> <recipe-digest>.  The recipe digest is a sha256 over the
# recipe files (recipe_files below), so building an unchanged recipe again is a
# no-op.  The output directory is the last line of stdout; progress goes to
# stderr.
#
# Runs as root on Debian 12 (bookworm) or newer, with network access to a
# Debian mirror: the one the host's apt uses (/etc/apt/sources.list*), else
# deb.debian.org.  Host packages it needs, beyond what every Debian has
# (coreutils, util-linux, debian-archive-keyring):
#   apt-get install --no-install-recommends mmdebstrap squashfs-tools
set -euo pipefail

readonly SUITE=trixie
readonly KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly here

log() { printf 'build.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Package names from a recipe list: one per line, '#' starts a comment.
list_packages() { sed -e 's/#.*//' -e 's/[[:space:]]//g' "$here/$1" | grep -v '^$' || true; }

# The files installed into /opt/jaild (relative to $here): the runner, not its tests.
runner_files() {
  (cd "$here" && find runner -maxdepth 1 -type f -name '*.py' ! -name 'test_*' | LC_ALL=C sort)
}

# Every file that influences the output, relative to $here, in a stable order.
recipe_files() {
  {
    printf '%s\n' build.sh customize.sh manifest.py packages.txt packages-sid.txt runner/init.c
    runner_files
  } | LC_ALL=C sort
}

recipe_digest() {
  (cd "$here" && recipe_files | xargs -d '\n' sha256sum) | sha256sum | cut -d' ' -f1
}

# The first URI in the host's apt sources whose path ends in /$1 (debian or
# debian-security), in either sources.list or deb822 format.
host_mirror() {
  local files=(/etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources)
  grep -hsE '^[[:space:]]*(deb|URIs:)[[:space:]]' "${files[@]}" |
    grep -oE 'https?://[^][:space:]]+' | sed 's,/*$,,' |
    grep -m1 -E "^https?://[^/]+(/.*)?/$1\$" || true
}

# A finished output directory has both files and a manifest that matches the image.
is_complete() {
  local dir=$1 size
  [[ -f $dir/manifest.json && -f $dir/rootfs.squashfs ]] || return 1
  size=$(grep -oE '"image_size_bytes": *[0-9]+' "$dir/manifest.json" | grep -oE '[0-9]+$') || return 1
  [[ $size == "$(stat -c %s "$dir/rootfs.squashfs")" ]]
}

# Mount points below $1, deepest first.
mounts_under() { findmnt -rn -o TARGET | awk -v d="$1/" 'index($0, d) == 1' | LC_ALL=C sort -r; }

# Unmount whatever is still mounted below $1 (mmdebstrap unmounts its own
# mounts, but not if it is killed), then delete $1 without ever crossing into
# another file system.
release_tree() {
  local dir=$1 m
  while read -r m; do
    umount "$m" || umount -l "$m" || true
  done < <(mounts_under "$dir")
  if [[ -n $(mounts_under "$dir") ]]; then
    log "still mounted below $dir; leaving it in place"
    return 1
  fi
  rm -rf --one-file-system "$dir"
}

# Install the trixie tree into $1 with mmdebstrap; customize.sh runs inside
# it while mmdebstrap has /proc, /sys and /dev mounted there.
bootstrap() {
  local root=$1 mirror security
  mirror=$(host_mirror debian)
  mirror=${mirror:-http://deb.debian.org/debian}
  security=$(host_mirror debian-security)
  security=${security:-$mirror-security}
  log "mirrors: $mirror $security"
  local src="deb [signed-by=$KEYRING]"
  # mmdebstrap's own temporary files go to the work directory too, so that
  # even a killed build leaves nothing behind that the next one won't remove.
  TMPDIR=$(dirname "$root") JAILD_MIRROR=$mirror mmdebstrap --mode=root --variant=apt \
    --aptopt='APT::Install-Recommends "false"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --include="$(list_packages packages.txt | paste -sd, -)" \
    --customize-hook="bash $(printf %q "$here/customize.sh") \"\$1\"" \
    "$SUITE" "$root" \
    "$src $mirror $SUITE main" \
    "$src $mirror $SUITE-updates main" \
    "$src $security $SUITE-security main"
}

# Plain file work on the finished tree: the jail's mount points, identity
# files, runtime user and the runner.  The image is mounted read-only, so
# everything the jail mounts over must already exist here.
finalize_tree() {
  local root=$1 digest=$2 f
  [[ -z $(mounts_under "$root") ]] || die "mmdebstrap left mounts below $root"

  # mmdebstrap fills /dev with device nodes; the jail brings its own /dev,
  # /proc and /sys, so the image has them as empty directories.
  find "$root/dev" -xdev -mindepth 1 -delete
  for f in dev proc sys; do
    [[ -d $root/$f && ! -L $root/$f && -z $(ls -A "$root/$f") ]] || die "/$f is not an empty directory"
  done
  install -d -m 0755 "$root/workspace" "$root/jaild" "$root/opt/jaild"
  chmod 1777 "$root/tmp"

  # Regular files for the jail to bind-mount over (mmdebstrap copied the
  # host's hostname and resolv.conf; neither belongs in the image).
  rm -f "$root"/etc/{hostname,hosts,machine-id,resolv.conf}
  echo jail >"$root/etc/hostname"
  printf '127.0.0.1\tlocalhost\n127.0.1.1\tjail\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
  printf '%s\n' "${digest:0:32}" >"$root/etc/machine-id"
  : >"$root/etc/resolv.conf"

  # The uid/gid the daemon runs user code as.
  ! grep -qE '^(jail:|[^:]*:[^:]*:1000:)' "$root/etc/passwd" || die "uid 1000 or user jail already exists"
  echo 'jail:x:1000:1000:jaild:/workspace:/usr/sbin/nologin' >>"$root/etc/passwd"
  echo 'jail:x:1000:' >>"$root/etc/group"

  while read -r f; do
    install -m 0644 "$here/$f" "$root/opt/jaild/${f#runner/}"
  done < <(runner_files)
  # The daemon imports the runner (a script would be compiled at every
  # start: ~5 ms of each cold run); the image is read-only, so the bytecode
  # is trusted as built.
  chroot "$root" /usr/bin/python3 -I -m compileall -q --invalidation-mode unchecked-hash /opt/jaild >/dev/null ||
    die "cannot byte-compile the runner"
  # The jail's pid 1 (runner/init.c): static, so it needs nothing of the image.
  gcc -static -Os -s -Wall -Wextra -Werror -o "$root/opt/jaild/init" "$here/runner/init.c" ||
    die "cannot build the jail's init"
  chmod 0755 "$root/opt/jaild/init"

  # Defence in depth: nothing in the jail may gain privileges by exec.
  find "$root" -xdev -type f -perm /6000 -exec chmod ug-s {} +
}

# Build the image for recipe $1 into the new directory $2.
build() {
  local digest=$1 out=$2 root image_digest size
  root=$(dirname "$out")/root
  bootstrap "$root"
  finalize_tree "$root" "$digest"

  # zstd level 6 instead of the default 15: squashing takes ~15 s instead of
  # ~90 s for a 7% bigger image, and imports are as fast (see README.md).
  log "squashing"
  mkdir -m 0755 "$out"
  mksquashfs "$root" "$out/rootfs.squashfs" -noappend -comp zstd -Xcompression-level 6 \
    -all-root -quiet -no-progress >&2
  image_digest=$(sha256sum "$out/rootfs.squashfs" | cut -d' ' -f1)
  size=$(stat -c %s "$out/rootfs.squashfs")

  # The image's own python3 writes the manifest, so the host needs no JSON
  # tooling.  The tree is unchanged since it was squashed.
  chroot "$root" /usr/bin/python3 -I - \
    --recipe-digest "$digest" --image-digest "$image_digest" --image-size "$size" \
    --suite "$SUITE" --built-at "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    $(list_packages packages.txt | grep '^python3-') \
    <"$here/manifest.py" >"$out/manifest.json"
  chmod 0644 "$out/rootfs.squashfs" "$out/manifest.json"
}

# Point DIR/current at $2 (atomically replacing the symlink).
set_current() {
  local cache_dir=$1 digest=$2
  [[ $(readlink "$cache_dir/current" 2>/dev/null) == "$digest" ]] && return
  ln -sfn "$digest" "$cache_dir/.current.tmp"
  mv -T "$cache_dir/.current.tmp" "$cache_dir/current"
}

# Remove images of older recipes (~270 MB each). A daemon still using one
# keeps its loop-mounted file until it stops; `current` names the new one.
prune_old() {
  local cache_dir=$1 keep=$2 d name
  for d in "$cache_dir"/*; do
    name=${d##*/}
    if [[ -d $d && ! -L $d && $name =~ ^[0-9a-f]{64}$ && $name != "$keep" ]]; then
      log "removing the image of an older recipe: $d"
      rm -rf --one-file-system "$d"
    fi
  done
}

main() {
  local cache_dir=/var/cache/jaild/rootfs
  while (($#)); do
    case $1 in
      --cache-dir) (($# >= 2)) || die "--cache-dir needs a value"; cache_dir=$2; shift 2 ;;
      --cache-dir=*) cache_dir=${1#*=}; shift ;;
      -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
      *) die "unknown argument: $1 (usage: build.sh [--cache-dir DIR])" ;;
    esac
  done
  [[ $EUID -eq 0 ]] || die "must run as root"
  mkdir -p "$cache_dir"
  cache_dir=$(cd "$cache_dir" && pwd -P)

  local digest final
  digest=$(recipe_digest)
  final=$cache_dir/$digest

  # One build at a time per cache directory.
  exec 9>"$cache_dir/.lock"
  flock 9

  if is_complete "$final"; then
    set_current "$cache_dir" "$digest"
    echo "rootfs up to date: $final"
    echo "$final"
    return
  fi

  # Holding the lock, any work directory is a leftover of a killed build.
  local stale
  for stale in "$cache_dir"/.build.*; do
    [[ -d $stale ]] && release_tree "$stale"
  done

  work=$(mktemp -d "$cache_dir/.build.XXXXXX")
  chmod 0755 "$work" # apt downloads as user _apt, which must reach the tree's apt dirs
  log "building recipe $digest in $work"
  build "$digest" "$work/out"

  # Publish: a single rename, so $final is either absent or complete.
  if [[ -e $final ]]; then
    rm -rf --one-file-system "$final"
  fi
  mv -T "$work/out" "$final"
  set_current "$cache_dir" "$digest"
  prune_old "$cache_dir" "$digest"
  log "built $final in ${SECONDS}s"
  echo "$final"
}

work=
cleanup() {
  local rc=$?
  if [[ -n $work ]]; then
    release_tree "$work" || rc=1
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

main "$@"
