#!/usr/bin/env bash
# Build a jaild rootfs image from its recipe: Debian trixie with Python 3.13,
# the recipe's packages, optional wheels from a local wheelhouse, and the
# in-jail runner at /opt/jaild, as a read-only squashfs.
#
# usage: rootfs/build.sh [--cache-dir DIR] [--recipes RDIR] [IMAGE...]
#   DIR   default /var/cache/jaild/rootfs
#   RDIR  default rootfs/images; a recipe is RDIR/<IMAGE>/ (see README.md)
#   IMAGE default python; "all" builds every recipe in RDIR
#
# Output: DIR/<IMAGE>/<recipe-digest>/{rootfs.squashfs,manifest.json} and the
# symlink DIR/<IMAGE>/current -> <recipe-digest>; for the python image also
# DIR/current -> python/<recipe-digest>.  The recipe digest is a sha256 over
# the recipe's files (recipe_files below), so building an unchanged recipe
# again is a no-op.  Older digests of a built image are removed.  The output
# directories are the last lines of stdout, one per image; progress goes to
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
recipes=$here/images

log() { printf 'build.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Names of images and of recipe keys: lower case, digits, '-', '_'.
valid_name() { [[ $1 =~ ^[a-z0-9][a-z0-9_-]{0,62}$ ]]; }

# The value of KEY in recipe $1's `recipe` file (KEY = VALUE lines, '#'
# comments), or nothing.
recipe_key() {
  local f=$recipes/$1/recipe
  [[ -f $f ]] || return 0
  sed -e 's/#.*//' "$f" | sed -n "s/^[[:space:]]*$2[[:space:]]*=[[:space:]]*//p" | sed 's/[[:space:]]*$//' | tail -n1
}

# The recipes image $1 is made of, its bases first (base = NAME chains).
chain() {
  local name=$1 out=() seen=" "
  while [[ -n $name ]]; do
    valid_name "$name" || die "recipe name '$name' (lower case letters, digits, - and _)"
    [[ -d $recipes/$name ]] || die "no recipe $recipes/$name"
    [[ $seen != *" $name "* ]] || die "recipe $name: its base chain loops"
    seen+="$name "
    out=("$name" "${out[@]}")
    name=$(recipe_key "$name" base)
  done
  printf '%s\n' "${out[@]}"
}

# Package names from list file $1 of every recipe of image $2's chain: one
# per line, '#' starts a comment.
list_packages() {
  local r
  while read -r r; do
    [[ -f $recipes/$r/$1 ]] && sed -e 's/#.*//' -e 's/[[:space:]]//g' "$recipes/$r/$1"
  done < <(chain "$2") | grep -v '^$' || true
}

# The wheelhouse of recipe $1 (absolute; a relative path is the recipe's),
# or nothing when it has no requirements.txt.
wheelhouse() {
  local w
  [[ -f $recipes/$1/requirements.txt ]] || return 0
  w=$(recipe_key "$1" wheelhouse)
  [[ -n $w ]] || die "recipe $1 has requirements.txt but no 'wheelhouse = DIR' in its recipe file"
  [[ $w == /* ]] || w=$recipes/$1/$w
  [[ -d $w ]] || die "recipe $1: wheelhouse $w is not a directory"
  (cd "$w" && pwd -P)
}

# Check, before anything is downloaded, that every requirement of recipe
# $1 is pinned (NAME==VERSION) with a sha256 and that a file with that hash
# is in its wheelhouse: a missing or changed wheel fails here, clearly.
check_wheels() {
  local r=$1 dir line req hashes h f found dist
  dir=$(wheelhouse "$r")
  [[ -n $dir ]] || return 0
  local -A have=()
  while IFS= read -r -d '' f; do
    have[$(sha256sum "$f" | cut -d' ' -f1)]=${f##*/}
  done < <(find "$dir" -maxdepth 1 -type f -name '*.whl' -print0)
  # Joined continuation lines, comments dropped.
  while IFS= read -r line; do
    [[ -n ${line//[[:space:]]/} ]] || continue
    req=${line%%[[:space:]]*}
    [[ $req =~ ^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.!+_-]+$ ]] ||
      die "recipe $r: requirements.txt: '$req' is not pinned as NAME==VERSION"
    hashes=$(grep -oE -- '--hash[= ]sha256:[0-9a-f]{64}' <<<"$line" | grep -oE '[0-9a-f]{64}$' || true)
    [[ -n $hashes ]] || die "recipe $r: requirements.txt: $req has no --hash=sha256:..."
    found=
    for h in $hashes; do
      [[ -n ${have[$h]:-} ]] && found=${have[$h]}
    done
    [[ -n $found ]] || die "recipe $r: no wheel in $dir has the sha256 requirements.txt gives for $req (missing, or a different file): $(tr '\n' ' ' <<<"$hashes")"
    # A wheel's name starts with its distribution's, normalized (PEP 427).
    dist=${req%%==*}
    dist=$(tr 'A-Z' 'a-z' <<<"$dist" | sed -E 's/[-_.]+/_/g')
    [[ $(tr 'A-Z' 'a-z' <<<"${found%%-*}" | sed -E 's/[-_.]+/_/g') == "$dist" ]] ||
      die "recipe $r: the wheel with the hash given for $req is $found, another distribution's"
    log "recipe $r: $req is $found"
  done < <(sed -e ':a' -e '/\\$/N; s/\\\n/ /; ta' -e 's/#.*//' "$recipes/$r/requirements.txt")
}

# The files installed into /opt/jaild (relative to $here): the runner, not its tests.
runner_files() {
  (cd "$here" && find runner -maxdepth 1 -type f -name '*.py' ! -name 'test_*' | LC_ALL=C sort)
}

# Every file that influences image $1, in a stable order: the builder's own
# (relative to $here) and every regular file of each recipe of its chain,
# but a wheelhouse inside a recipe (its wheels are pinned by the hashes in
# requirements.txt, so the wheelhouse is not read).
recipe_files() {
  local r w
  {
    printf '%s\n' build.sh customize.sh manifest.py runner/init.c
    runner_files
  } | LC_ALL=C sort | sed "s,^,$here/,"
  while read -r r; do
    w=$(wheelhouse "$r")
    find "$recipes/$r" -type f | LC_ALL=C sort | { if [[ -n $w ]]; then grep -v -F "$w/" || true; else cat; fi; }
  done < <(chain "$1")
}

# The digest of image $1's recipe: each file's hash under a name that does
# not depend on where the recipes are (the recipe's name and the file's).
recipe_digest() {
  local f h
  {
    printf 'image %s\n' "$1"
    while read -r f; do
      h=$(sha256sum "$f") || die "cannot hash $f"
      if [[ $f == "$recipes"/* ]]; then
        printf '%s  recipe:%s\n' "${h%% *}" "${f#"$recipes"/}"
      else
        printf '%s  %s\n' "${h%% *}" "${f#"$here"/}"
      fi
    done < <(recipe_files "$1")
  } | sha256sum | cut -d' ' -f1
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

# Install image $2's trixie tree into $1 with mmdebstrap; customize.sh runs
# inside it while mmdebstrap has /proc, /sys and /dev mounted there.
bootstrap() {
  local root=$1 name=$2 mirror security r w wheels=''
  while read -r r; do
    w=$(wheelhouse "$r")
    [[ -z $w ]] || wheels+="$recipes/$r/requirements.txt|$w"$'\n'
  done < <(chain "$name")
  mirror=$(host_mirror debian)
  mirror=${mirror:-http://deb.debian.org/debian}
  security=$(host_mirror debian-security)
  security=${security:-$mirror-security}
  log "mirrors: $mirror $security"
  local src="deb [signed-by=$KEYRING]"
  # mmdebstrap's own temporary files go to the work directory too, so that
  # even a killed build leaves nothing behind that the next one won't remove.
  TMPDIR=$(dirname "$root") JAILD_MIRROR=$mirror \
    JAILD_SID_PACKAGES="$(list_packages packages-sid.txt "$name")" \
    JAILD_CUSTOMIZE="$(while read -r r; do [[ -f $recipes/$r/customize.sh ]] && echo "$recipes/$r/customize.sh"; done < <(chain "$name"))" \
    JAILD_WHEELS="$wheels" \
    mmdebstrap --mode=root --variant=apt \
    --aptopt='APT::Install-Recommends "false"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --include="$(list_packages packages.txt "$name" | paste -sd, -)" \
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

# Build image $1 of recipe digest $2 into the new directory $3.
build() {
  local name=$1 digest=$2 out=$3 root image_digest size r
  root=$(dirname "$out")/root
  bootstrap "$root" "$name"
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
  # The wheels' requirements go in as files of the tree's /tmp (it is
  # squashed already, so they are not in the image).
  local reqs=()
  while read -r r; do
    if [[ -f $recipes/$r/requirements.txt ]]; then
      cp "$recipes/$r/requirements.txt" "$root/tmp/jaild-req-$r.txt"
      reqs+=(--requirements "/tmp/jaild-req-$r.txt")
    fi
  done < <(chain "$name")
  chroot "$root" /usr/bin/python3 -I - \
    --name "$name" --recipe-digest "$digest" --image-digest "$image_digest" --image-size "$size" \
    --suite "$SUITE" --built-at "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "${reqs[@]}" \
    $(list_packages packages.txt "$name" | grep '^python3-') \
    <"$here/manifest.py" >"$out/manifest.json"
  chmod 0644 "$out/rootfs.squashfs" "$out/manifest.json"
}

# Point symlink $1 at $2 (atomically replacing it).
set_link() {
  local link=$1 target=$2
  [[ $(readlink "$link" 2>/dev/null) == "$target" ]] && return
  ln -sfn "$target" "$link.tmp"
  mv -T "$link.tmp" "$link"
}

# Point DIR/IMAGE/current at the digest $3 (and, for python, DIR/current).
set_current() {
  local cache_dir=$1 name=$2 digest=$3
  set_link "$cache_dir/$name/current" "$digest"
  [[ $name != python ]] || set_link "$cache_dir/current" "python/$digest"
}

# Remove the images of image $2's older recipes in $1 (~270 MB each for
# python), and those of the old layout (DIR/<digest>, python's). A daemon
# still using one keeps its loop-mounted file until it stops.
prune_old() {
  local cache_dir=$1 name=$2 keep=$3 d base
  local cands=("$cache_dir/$name"/*)
  [[ $name != python ]] || cands+=("$cache_dir"/*)
  for d in "${cands[@]}"; do
    base=${d##*/}
    if [[ $d == "$cache_dir"/* && -d $d && ! -L $d && $base =~ ^[0-9a-f]{64}$ && $d != "$cache_dir/$name/$keep" ]]; then
      log "removing the image of an older recipe: $d"
      rm -rf --one-file-system "$d"
    fi
  done
}

# Build image $2 into cache dir $1, unless its recipe's output is complete.
build_image() {
  local cache_dir=$1 name=$2 digest final r
  while read -r r; do
    wheelhouse "$r" >/dev/null # in this shell: a bad wheelhouse stops the build here
  done < <(chain "$name")
  digest=$(recipe_digest "$name")
  final=$cache_dir/$name/$digest
  mkdir -p "$cache_dir/$name"

  if is_complete "$final"; then
    set_current "$cache_dir" "$name" "$digest"
    prune_old "$cache_dir" "$name" "$digest"
    log "rootfs $name up to date: $final"
    echo "$final"
    return
  fi
  while read -r r; do
    check_wheels "$r"
  done < <(chain "$name")

  work=$(mktemp -d "$cache_dir/.build.XXXXXX")
  chmod 0755 "$work" # apt downloads as user _apt, which must reach the tree's apt dirs
  log "building image $name, recipe $digest, in $work"
  SECONDS=0
  build "$name" "$digest" "$work/out"

  # Publish: a single rename, so $final is either absent or complete.
  if [[ -e $final ]]; then
    rm -rf --one-file-system "$final"
  fi
  mv -T "$work/out" "$final"
  release_tree "$work"
  work=
  set_current "$cache_dir" "$name" "$digest"
  prune_old "$cache_dir" "$name" "$digest"
  log "built $final in ${SECONDS}s"
  echo "$final"
}

main() {
  local cache_dir=/var/cache/jaild/rootfs images=() name
  while (($#)); do
    case $1 in
      --cache-dir) (($# >= 2)) || die "--cache-dir needs a value"; cache_dir=$2; shift 2 ;;
      --cache-dir=*) cache_dir=${1#*=}; shift ;;
      --recipes) (($# >= 2)) || die "--recipes needs a value"; recipes=$2; shift 2 ;;
      --recipes=*) recipes=${1#*=}; shift ;;
      -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
      -*) die "unknown option: $1 (usage: build.sh [--cache-dir DIR] [--recipes RDIR] [IMAGE...])" ;;
      *) images+=("$1"); shift ;;
    esac
  done
  [[ $EUID -eq 0 ]] || die "must run as root"
  [[ -d $recipes ]] || die "no recipe directory $recipes"
  recipes=$(cd "$recipes" && pwd -P)
  ((${#images[@]})) || images=(python)
  if [[ ${images[*]} == all ]]; then
    images=()
    for name in "$recipes"/*/; do
      name=${name%/}
      images+=("${name##*/}")
    done
  fi
  for name in "${images[@]}"; do
    chain "$name" >/dev/null # every name and chain checked before any build
  done
  mkdir -p "$cache_dir"
  cache_dir=$(cd "$cache_dir" && pwd -P)

  # One build at a time per cache directory.
  exec 9>"$cache_dir/.lock"
  flock 9

  # Holding the lock, any work directory is a leftover of a killed build.
  local stale
  for stale in "$cache_dir"/.build.*; do
    [[ -d $stale ]] && release_tree "$stale"
  done
  for name in "${images[@]}"; do
    build_image "$cache_dir" "$name"
  done
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
