#!/usr/bin/python3
"""Installs the packages a package-lock.json (lockfile version 2 or 3) pins, as `npm ci` would
for a project without install scripts, using only Python's standard library.

Why not npm: Debian's npm package pulls in about 420 packages; installing them on a fresh
machine took minutes of every CI run, for a tool used only to unpack s3rver and its
dependencies. Node itself (the `nodejs` package) is all the tests need to run s3rver.

What it does: for each `node_modules/...` entry of the lock file, download its tarball from the
registry (`resolved`, or the registry's standard tarball address), check it against the lock's
`integrity` (sha512 or sha1), and unpack it at that path. Refuses entries with install scripts
(they would need npm) and tarball members that leave their directory. Writes
node_modules/.package-lock.json last, so an interrupted run is redone next time.

Usage: npm_lock_install.py DIR   (DIR holds package-lock.json; the registry is
$npm_config_registry or https://registry.npmjs.org/)
"""

import base64
import concurrent.futures
import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
import time
import urllib.request


def fail(msg):
    print(f"npm_lock_install: {msg}", file=sys.stderr)
    sys.exit(1)


def tarball_url(registry, path, entry):
    if entry.get("resolved"):
        return entry["resolved"]
    name = path.rsplit("node_modules/", 1)[1]
    base = name.split("/", 1)[1] if name.startswith("@") else name
    return f"{registry}{name}/-/{base}-{entry['version']}.tgz"


def check_integrity(data, integrity, what):
    # An SRI string may list several hashes; one that matches is enough.
    for item in integrity.split():
        algo, _, digest = item.partition("-")
        if algo not in ("sha512", "sha384", "sha256", "sha1"):
            continue
        if base64.b64encode(hashlib.new(algo, data).digest()).decode() == digest:
            return
    fail(f"{what}: the tarball does not match the lock file's integrity {integrity[:30]}...")


def fetch(url, what):
    last = None
    for attempt in range(4):
        try:
            with urllib.request.urlopen(url, timeout=60) as r:
                return r.read()
        except OSError as e:  # URLError and timeouts are OSErrors
            last = e
            time.sleep(0.5 * (2**attempt))
    fail(f"{what}: cannot download {url}: {last}")


def unpack(data, dest, what):
    root = os.path.realpath(dest)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for m in tar.getmembers():
            # Every member sits under one top directory (usually "package/"); strip it.
            parts = m.name.split("/", 1)
            if len(parts) < 2 or not parts[1]:
                continue
            target = os.path.realpath(os.path.join(dest, parts[1]))
            if not target.startswith(root + os.sep):
                fail(f"{what}: tarball member {m.name!r} leaves its directory")
            if m.isdir():
                os.makedirs(target, exist_ok=True)
            elif m.isfile():
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with tar.extractfile(m) as src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out)
                # Keep the executable bits (bin scripts), nothing else.
                os.chmod(target, 0o755 if m.mode & 0o111 else 0o644)
            # Links and devices are not part of any package we install; skip them.


def main():
    if len(sys.argv) != 2:
        fail("usage: npm_lock_install.py DIR")
    top = sys.argv[1]
    lock_path = os.path.join(top, "package-lock.json")
    try:
        with open(lock_path) as f:
            lock = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"cannot read {lock_path}: {e}")
    if lock.get("lockfileVersion") not in (2, 3):
        fail(f"{lock_path}: lockfileVersion {lock.get('lockfileVersion')} (need 2 or 3)")
    registry = os.environ.get("npm_config_registry", "https://registry.npmjs.org/")
    if not registry.endswith("/"):
        registry += "/"

    todo = []
    for path, entry in lock.get("packages", {}).items():
        if not path.startswith("node_modules/") or entry.get("link") or entry.get("dev"):
            continue
        if entry.get("hasInstallScript"):
            fail(f"{path} has an install script; use npm ci")
        if "integrity" not in entry or "version" not in entry:
            fail(f"{path}: the lock file gives no version or integrity")
        todo.append((path, entry))

    modules = os.path.join(top, "node_modules")
    shutil.rmtree(modules, ignore_errors=True)
    os.makedirs(modules)

    def install(item):
        path, entry = item
        data = fetch(tarball_url(registry, path, entry), path)
        check_integrity(data, entry["integrity"], path)
        return path, data

    # Downloads in parallel; unpack parents before children (nested node_modules).
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        results = dict(pool.map(install, todo))
    for path, _ in sorted(todo, key=lambda t: t[0].count("node_modules/")):
        dest = os.path.join(top, path)
        os.makedirs(dest, exist_ok=True)
        unpack(results[path], dest, path)
    shutil.copyfile(lock_path, os.path.join(modules, ".package-lock.json"))
    print(f"npm_lock_install: {len(todo)} packages in {modules}")


if __name__ == "__main__":
    main()
