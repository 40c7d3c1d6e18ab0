"""Print manifest.json for a jaild rootfs image.

build.sh runs this with the image's own python3, chrooted into the tree the
image was squashed from, so it reports what the image really contains.
"""

import argparse
import importlib.metadata
import json
import pathlib
import platform
import re
import subprocess


def dpkg_query(*args):
    return subprocess.run(
        ["dpkg-query", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def installed_packages():
    """Every installed dpkg package, sorted by name."""
    fmt = "${db:Status-Abbrev}\t${Package}\t${Version}\t${Architecture}\n"
    packages = []
    for line in dpkg_query("-W", "-f", fmt).splitlines():
        status, name, version, arch = line.split("\t")
        if status.startswith("ii"):
            packages.append({"name": name, "version": version, "arch": arch})
    return sorted(packages, key=lambda p: (p["name"], p["arch"]))


def python_distributions(debian_packages):
    """{distribution name: version} of the Python distributions that the given
    Debian packages ship (found through their .dist-info/.egg-info dirs)."""
    dists = {}
    if not debian_packages:
        return dists
    for path in dpkg_query("-L", *debian_packages).splitlines():
        if "/dist-packages/" in path and path.endswith((".dist-info", ".egg-info")):
            dist = importlib.metadata.PathDistribution(pathlib.Path(path))
            name = dist.metadata["Name"]
            if not name:
                raise SystemExit(f"manifest.py: no metadata in {path}")
            dists[name] = dist.version
    return dict(sorted(dists.items(), key=lambda item: item[0].lower()))


REQ_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")
HASH = re.compile(r"--hash[= ]sha256:([0-9a-f]{64})")


def canonical(version):
    """A version without trailing zero parts, lower case: pip takes ==2.1
    for 2.1.0 (PEP 440's zero padding)."""
    release, sep, rest = version.lower().partition("+")
    parts = release.split(".")
    while len(parts) > 1 and parts[-1] == "0":
        parts.pop()
    return ".".join(parts) + sep + rest


def wheels(requirement_files):
    """The wheels installed from wheelhouses: each requirement (NAME==VERSION
    with its --hash values, build.sh checked the form) with the version the
    image really has, in requirements order."""
    out = []
    for path in requirement_files:
        text = pathlib.Path(path).read_text()
        text = re.sub(r"\\\n", " ", text)
        for line in text.splitlines():
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            m = REQ_LINE.match(line)
            if not m:
                raise SystemExit(f"manifest.py: requirement {line!r} is not NAME==VERSION")
            name, pinned = m.groups()
            try:
                installed = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                raise SystemExit(f"manifest.py: {name} is in requirements but not installed")
            if canonical(installed) != canonical(pinned):
                raise SystemExit(f"manifest.py: {name} {installed} installed, {pinned} pinned")
            out.append({
                "name": name,
                "version": installed,
                "sha256": ["sha256:" + h for h in HASH.findall(line)],
            })
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--name", required=True)
    parser.add_argument("--requirements", action="append", default=[])
    parser.add_argument("--recipe-digest", required=True)
    parser.add_argument("--image-digest", required=True)
    parser.add_argument("--image-size", required=True, type=int)
    parser.add_argument("--suite", required=True)
    parser.add_argument("--built-at", required=True)
    parser.add_argument("python_packages", nargs="*", metavar="DEBIAN_PACKAGE")
    args = parser.parse_args()

    manifest = {
        "schema": 1,
        "name": args.name,
        "recipe_digest": "sha256:" + args.recipe_digest,
        "image_digest": "sha256:" + args.image_digest,
        "image_size_bytes": args.image_size,
        "python_version": platform.python_version(),
        "debian_suite": args.suite,
        "packages": installed_packages(),
        "python_packages": python_distributions(args.python_packages),
        "wheels": wheels(args.requirements),
        "runner": "/opt/jaild/runner.py",
        # What the runner of this build understands beyond code jobs (the
        # daemon uses a feature only where an image's manifest lists it):
        # exec, a job that executes a command in its place (lint and
        # format in a warm jail); seccomp_fd, an init that loads the jail's
        # seccomp filter given on an fd (--seccomp-fd); records, a session
        # call's job may name the records pipe anew (a restored session's);
        # init_reexec, an init that executes itself afresh on 'x'.
        "runner_features": ["exec", "seccomp_fd", "records", "init_reexec", "outputs"],
        "init": "/opt/jaild/init",
        "built_at": args.built_at,
    }
    print(json.dumps(manifest, indent=2))


if __name__ == "__main__":
    main()
