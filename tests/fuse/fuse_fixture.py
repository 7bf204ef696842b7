"""Shared fixture of the FUSE tests: a real `ciuic cluster up` cluster and real `ciuic mount`
mounts of it, always unmounted and stopped at the end (also on failure).

If /dev/fuse is missing the tests are skipped (exit 77), unless CIUIC_REQUIRE_FUSE=1, which
makes that a failure.
"""
import argparse
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import unittest

SKIP = 77


def require_fuse():
    if os.path.exists("/dev/fuse") and shutil.which("fusermount3"):
        return
    msg = "FUSE tests need /dev/fuse and fusermount3 (Debian package fuse3)"
    if os.environ.get("CIUIC_REQUIRE_FUSE") == "1":
        print("FAIL: " + msg + " and CIUIC_REQUIRE_FUSE=1", file=sys.stderr)
        sys.exit(1)
    print("SKIP: " + msg, file=sys.stderr)
    sys.exit(SKIP)


def run_tests(mount_names, ready, check=None):
    """The main of a FUSE test file: reads --bin-dir, requires FUSE (and `check()`, which may
    skip), starts a cluster with one mount per name in `mount_names`, calls
    ready(cluster, mount_points), runs the file's unittest tests, and stops the cluster whatever
    happens. Exits 0, 1 or SKIP."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", required=True)
    args, rest = ap.parse_known_args()
    require_fuse()
    if check is not None:
        check()
    cluster = Cluster(os.path.abspath(args.bin_dir))
    ok = False
    try:
        ready(cluster, [cluster.mount(n) for n in mount_names])
        prog = unittest.main(module="__main__", argv=[sys.argv[0]] + rest, exit=False,
                             verbosity=2)
        ok = prog.result.wasSuccessful()
    finally:
        cluster.close()
    sys.exit(0 if ok else 1)


class Cluster:
    """A local cluster under a temp dir plus any number of mounts of it."""

    def __init__(self, bin_dir, num_oss=1, osts_per_oss=2):
        self.bin = bin_dir
        self.tmp = tempfile.mkdtemp(prefix="ciuic-fuse-")
        os.chmod(self.tmp, 0o755)
        self.cdir = os.path.join(self.tmp, "cluster")
        self.conf = os.path.join(self.cdir, "cluster.conf")
        self.mounts = []
        self.ciuic("cluster", "up", self.cdir, "--oss", str(num_oss), "--osts-per-oss",
                   str(osts_per_oss), "--timeout", "60", timeout=90)

    def ciuic(self, *args, check=True, timeout=120):
        r = subprocess.run([os.path.join(self.bin, "ciuic"), *args], capture_output=True,
                           timeout=timeout, text=True)
        if check and r.returncode != 0:
            raise AssertionError("ciuic %s failed (%d): %s" % (" ".join(args), r.returncode,
                                                                r.stderr))
        return r

    def mount(self, name="mnt"):
        mp = os.path.join(self.tmp, name)
        os.makedirs(mp, exist_ok=True)
        os.chmod(mp, 0o755)
        self.ciuic("mount", self.conf, mp, "--log", os.path.join(self.tmp, name + ".log"))
        self.mounts.append(mp)
        return mp

    def umount(self, mp):
        self.ciuic("umount", mp)
        self.mounts.remove(mp)

    def close(self):
        for mp in list(self.mounts):
            r = self.ciuic("umount", mp, check=False)
            if r.returncode != 0:
                subprocess.run(["fusermount3", "-u", "-z", mp], capture_output=True)
        self.mounts = []
        self.ciuic("cluster", "down", self.cdir, check=False, timeout=60)
        for log in sorted(os.listdir(self.tmp)):
            if log.endswith(".log") and os.path.getsize(os.path.join(self.tmp, log)) > 0:
                with open(os.path.join(self.tmp, log), errors="replace") as f:
                    tail = f.read()[-2000:]
                print("--- %s (tail)\n%s" % (log, tail), file=sys.stderr)
        shutil.rmtree(self.tmp, ignore_errors=True)


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tree(root, mtimes=True, hardlinks=True):
    """A comparable description of a tree: per relative path its type, mode, size, content
    hash or link target, hard-link group and (optionally) mtime."""
    out = {}
    inode_names = {}
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(dirs + files):
            p = os.path.join(d, name)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            e = {"mode": stat.S_IMODE(st.st_mode), "type": stat.S_IFMT(st.st_mode)}
            if stat.S_ISREG(st.st_mode):
                e["size"] = st.st_size
                e["sha"] = sha(p)
                if hardlinks and st.st_nlink > 1:
                    first = inode_names.setdefault(st.st_ino, rel)
                    e["link_group"] = first
                if mtimes:
                    e["mtime"] = st.st_mtime_ns
            elif stat.S_ISLNK(st.st_mode):
                e["target"] = os.readlink(p)
            out[rel] = e
    return out
