#!/usr/bin/env bash
# mmdebstrap --customize-hook of build.sh: the build steps that run programs
# inside the new trixie tree $1, while mmdebstrap has /proc, /sys and /dev
# mounted there (and unmounts them afterwards, also on failure).
# Environment: JAILD_MIRROR, the Debian mirror URL build.sh chose.
set -euo pipefail

root=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
: "${JAILD_MIRROR:?set by build.sh}"

# Where the prebuilt matplotlib font cache lives; runner.py links to it.
readonly MPL_CACHE=/opt/jaild/mplcache

in_root() { chroot "$root" "$@"; }

# --- packages-sid.txt: from unstable, dependencies still from trixie --------
mapfile -t sid_packages < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$here/packages-sid.txt" | grep -v '^$')
if ((${#sid_packages[@]})); then
  sid_list=$root/etc/apt/sources.list.d/jaild-sid.list
  sid_pin=$root/etc/apt/preferences.d/jaild-sid.pref
  # The mirror's sid Release file can be past its Valid-Until date, so that
  # check is off, for this source only.
  echo "deb [check-valid-until=no signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $JAILD_MIRROR sid main" >"$sid_list"
  # Below trixie's 500: only the packages asked for as PACKAGE/sid come from sid.
  printf 'Package: *\nPin: release n=sid\nPin-Priority: 100\n' >"$sid_pin"
  in_root apt-get update -q
  in_root apt-get install -q -y --no-install-recommends "${sid_packages[@]/%//sid}"
  # The lists themselves are dropped by mmdebstrap's cleanup right after this hook.
  rm -f "$sid_list" "$sid_pin"
fi

# --- byte-compile everything on the system Python's path ----------------------
# Debian's postinst scripts compile most modules already; this catches the
# rest, so that no run ever compiles (runs use -B on a read-only image).
in_root python3 -I -c '
import compileall, os, sys
ok = [compileall.compile_dir(d, quiet=1, workers=0) for d in sys.path if os.path.isdir(d)]
sys.exit(0 if all(ok) else 1)
'

# --- matplotlib font cache ----------------------------------------------------
# Building it takes ~0.4 s; the runner links it into each run's MPLCONFIGDIR.
install -d -m 0755 "$root$MPL_CACHE"
in_root env MPLCONFIGDIR="$MPL_CACHE" python3 -I -c 'import matplotlib.font_manager'
compgen -G "$root$MPL_CACHE/fontlist-v*.json" >/dev/null || { echo "no font cache in $MPL_CACHE" >&2; exit 1; }
chmod -R a+rX "$root$MPL_CACHE"
