#!/usr/bin/env bash
# mmdebstrap --customize-hook of build.sh: the build steps that run programs
# inside the new trixie tree $1, while mmdebstrap has /proc, /sys and /dev
# mounted there (and unmounts them afterwards, also on failure).
# Environment, set by build.sh:
#   JAILD_MIRROR        the Debian mirror URL build.sh chose
#   JAILD_SID_PACKAGES  packages to take from unstable, one per line
#   JAILD_CUSTOMIZE     the recipes' own customize.sh files, bases first
#   JAILD_WHEELS        REQUIREMENTS|WHEELHOUSE lines, bases first
set -euo pipefail

root=$1
: "${JAILD_MIRROR:?set by build.sh}"

# Where the prebuilt matplotlib font cache lives; runner.py links to it.
readonly MPL_CACHE=/opt/jaild/mplcache

in_root() { chroot "$root" "$@"; }

# --- packages-sid.txt: from unstable, dependencies still from trixie --------
mapfile -t sid_packages < <(grep -v '^$' <<<"${JAILD_SID_PACKAGES:-}" || true)
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

# --- each recipe's own customize.sh, with the tree as $1 ----------------------
while read -r step; do
  [[ -n $step ]] || continue
  echo "customize.sh: running $step" >&2
  bash "$step" "$root"
done <<<"${JAILD_CUSTOMIZE:-}"

# --- wheels from local wheelhouses: no index, every hash required -------------
# pip comes from Debian for this step only and is purged afterwards; the
# wheels go to /usr/local (Debian's pip refuses the system's own site
# otherwise: --break-system-packages is what permits it).
if [[ -n ${JAILD_WHEELS//[[:space:]]/} ]]; then
  # pip stays when the recipe's own packages brought it.
  had_pip=
  in_root dpkg-query -W -f='${Status}' python3-pip 2>/dev/null | grep -q 'ok installed' && had_pip=1
  in_root apt-get install -q -y --no-install-recommends python3-pip
  n=0
  while IFS='|' read -r req house; do
    [[ -n $req ]] || continue
    n=$((n + 1))
    stage=$root/tmp/jaild-wheels-$n
    install -d -m 0755 "$stage" "$stage/house"
    cp "$req" "$stage/requirements.txt"
    find "$house" -maxdepth 1 -type f -name '*.whl' -exec cp -t "$stage/house" {} +
    if ! in_root python3 -m pip install --no-index --find-links "/tmp/jaild-wheels-$n/house" --require-hashes \
      --no-cache-dir --break-system-packages --root-user-action=ignore --disable-pip-version-check \
      -r "/tmp/jaild-wheels-$n/requirements.txt" >&2; then
      echo "customize.sh: error: installing $req from the wheelhouse $house failed (a wheel missing, a hash that differs, or a dependency not in the wheelhouse: pip's message is above)" >&2
      exit 1
    fi
    rm -rf "$stage"
  done <<<"$JAILD_WHEELS"
  [[ -n $had_pip ]] || in_root apt-get purge -q -y --auto-remove python3-pip
fi

# --- byte-compile everything on the system Python's path ----------------------
# Debian's postinst scripts compile most modules already; this catches the
# rest, so that no run ever compiles (runs use -B on a read-only image).
in_root python3 -I -c '
import compileall, os, sys
ok = [compileall.compile_dir(d, quiet=1, workers=0) for d in sys.path if os.path.isdir(d)]
sys.exit(0 if all(ok) else 1)
'

# --- matplotlib font cache (images that have matplotlib) ---------------------
# Building it takes ~0.4 s; the runner links it into each run's MPLCONFIGDIR.
if in_root python3 -I -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("matplotlib") is None)'; then
  install -d -m 0755 "$root$MPL_CACHE"
  in_root env MPLCONFIGDIR="$MPL_CACHE" python3 -I -c 'import matplotlib.font_manager'
  compgen -G "$root$MPL_CACHE/fontlist-v*.json" >/dev/null || { echo "no font cache in $MPL_CACHE" >&2; exit 1; }
  chmod -R a+rX "$root$MPL_CACHE"
fi
