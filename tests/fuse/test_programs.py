#!/usr/bin/env python3
"""Real programs on a real ciuic mount, checked byte for byte against the same work on a local
directory: fio verify, tar, cp -a, rsync, git, sqlite3, Python os.walk / shutil.copytree and
torchvision's ImageFolder.

Usage: test_programs.py --bin-dir BUILD/apps  (ctest passes it; label fuse)
"""
import os
import random
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fuse_fixture  # noqa: E402

CLUSTER = None
MNT = None


def run(*args, cwd=None, timeout=120, input=None):
    r = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, timeout=timeout,
                       input=input)
    if r.returncode != 0:
        raise AssertionError("%s failed (%d): %s%s" % (" ".join(args), r.returncode, r.stdout,
                                                        r.stderr))
    return r.stdout


def make_source_tree(root):
    """Files of several sizes, a sparse file, symlinks, hard links. (Offsets past 4 GiB are
    checked by test_posix.py: a 4 GiB hole here would make every copy read 4 GiB of zeros.)"""
    rnd = random.Random(1234)
    os.makedirs(os.path.join(root, "a/b/c"))
    os.makedirs(os.path.join(root, "empty"))
    for i in range(20):
        size = rnd.choice([0, 1, 100, 4095, 4096, 4097, 65536, 300000, 1 << 20])
        with open(os.path.join(root, "a" if i % 2 else "a/b", "f%02d" % i), "wb") as f:
            f.write(rnd.randbytes(size))
    with open(os.path.join(root, "a/b/c/big"), "wb") as f:
        f.write(rnd.randbytes(5 << 20))
    with open(os.path.join(root, "sparse"), "wb") as f:
        f.write(b"head")
        f.seek((48 << 20) + 12345)
        f.write(b"tail after a hole")
    os.symlink("a/b/c/big", os.path.join(root, "link-to-big"))
    os.symlink("../nowhere", os.path.join(root, "a/dangling"))
    os.link(os.path.join(root, "a/f01"), os.path.join(root, "hard-f01"))
    os.chmod(os.path.join(root, "a/f03"), 0o600)
    os.chmod(os.path.join(root, "a/b/c"), 0o700)
    os.utime(os.path.join(root, "a/f05"), ns=(1_000_000_123, 1_700_000_000_987_654_321))


class ProgramsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.local = tempfile.mkdtemp(prefix="ciuic-fuse-local-")
        cls.src = os.path.join(cls.local, "src")
        make_source_tree(cls.src)
        cls.want = fuse_fixture.tree(cls.src)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.local, ignore_errors=True)

    def assertSameTree(self, got_root, mtimes=True, hardlinks=True):
        want = fuse_fixture.tree(self.src, mtimes, hardlinks)
        got = fuse_fixture.tree(got_root, mtimes, hardlinks)
        self.assertEqual(sorted(want), sorted(got))
        for k in want:
            self.assertEqual(want[k], got[k], k)

    def test_fio_verify(self):
        d = os.path.join(MNT, "fio")
        os.mkdir(d)
        common = ["--directory=" + d, "--size=8m", "--verify=crc32c", "--do_verify=1",
                  "--verify_fatal=1", "--verify_state_save=0", "--numjobs=2", "--group_reporting",
                  "--ioengine=psync"]
        for name, extra in [("seq", ["--rw=write", "--bs=1m"]),
                            ("rand", ["--rw=randwrite", "--bs=4k"]),
                            ("seqdirect", ["--rw=write", "--bs=256k", "--direct=1"]),
                            ("randdirect", ["--rw=randwrite", "--bs=64k", "--direct=1"])]:
            run("fio", "--name=" + name, *common, *extra, cwd=self.local, timeout=120)
        # A read-back verify pass in a separate process (the data came back from the cluster).
        run("fio", "--name=seq", *common, "--rw=read", "--bs=1m", "--verify_only", cwd=self.local,
            timeout=120)

    def test_tar_create_and_extract(self):
        tarball = os.path.join(MNT, "tree.tar")
        run("tar", "-C", self.src, "--format=posix", "--sparse", "-cf", tarball, ".")
        out = os.path.join(MNT, "tar-x")
        os.mkdir(out)
        run("tar", "-C", out, "-xpf", tarball)
        self.assertSameTree(out)
        # The tarball read back through the mount extracts locally to the same tree.
        local_x = os.path.join(self.local, "tar-local")
        os.mkdir(local_x)
        run("tar", "-C", local_x, "-xpf", tarball)
        self.assertSameTree(local_x)

    def test_cp_a(self):
        dst = os.path.join(MNT, "cp")
        run("cp", "-a", self.src, dst)
        self.assertSameTree(dst)
        back = os.path.join(self.local, "cp-back")
        run("cp", "-a", dst, back)
        self.assertSameTree(back)

    def test_rsync_twice(self):
        dst = os.path.join(MNT, "rsync") + "/"
        run("rsync", "-aH", self.src + "/", dst)
        self.assertSameTree(dst)
        out = run("rsync", "-aH", "--stats", self.src + "/", dst)
        self.assertIn("Number of regular files transferred: 0", out)

    def test_git(self):
        repo = os.path.join(MNT, "repo")
        os.mkdir(repo)
        env = ["-c", "user.email=t@example.com", "-c", "user.name=t", "-c", "init.defaultBranch=main"]
        run("git", *env, "init", "-q", cwd=repo)
        for i in range(3):
            with open(os.path.join(repo, "file%d.txt" % i), "w") as f:
                f.write("line %d\n" % i * (i + 1))
            run("git", *env, "add", ".", cwd=repo)
            run("git", *env, "commit", "-q", "-m", "commit %d" % i, cwd=repo)
        run("git", "fsck", "--full", "--strict", cwd=repo)
        log = run("git", "log", "--oneline", cwd=repo)
        self.assertEqual(len(log.strip().splitlines()), 3)
        run("git", *env, "gc", "-q", cwd=repo)
        run("git", "fsck", "--full", cwd=repo)

    def test_sqlite3(self):
        db = os.path.join(MNT, "test.db")
        sql = ["CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);", "BEGIN;"]
        sql += ["INSERT INTO t(v) VALUES ('%s');" % ("x" * (i % 300)) for i in range(2000)]
        sql += ["COMMIT;", "CREATE INDEX tv ON t(v);", "DELETE FROM t WHERE id % 3 = 0;"]
        run("sqlite3", db, input="\n".join(sql))
        out = run("sqlite3", db, "SELECT count(*), sum(length(v)) FROM t; PRAGMA integrity_check;")
        want_rows = [i for i in range(1, 2001) if i % 3 != 0]
        want_sum = sum((i - 1) % 300 for i in want_rows)
        self.assertEqual(out.split(), ["%d|%d" % (len(want_rows), want_sum), "ok"])

    def test_python_walk_copytree(self):
        dst = os.path.join(MNT, "pycopy")
        shutil.copytree(self.src, dst, symlinks=True)
        self.assertSameTree(dst, mtimes=False, hardlinks=False)  # copytree copies links apart
        walked = sorted(os.path.relpath(os.path.join(d, n), dst)
                        for d, ds, fs in os.walk(dst) for n in ds + fs)
        self.assertEqual(walked, sorted(fuse_fixture.tree(self.src)))

    def test_torchvision_imagefolder(self):
        code = r'''
import os, sys, numpy as np
from PIL import Image
from torchvision.datasets import ImageFolder
root = sys.argv[1]
rng = np.random.default_rng(7)
want = {}
for cls in ["cat", "dog", "fox"]:
    os.makedirs(os.path.join(root, cls))
    for i in range(12):
        arr = rng.integers(0, 256, size=(16 + i, 20, 3), dtype=np.uint8)
        p = os.path.join(root, cls, "%03d.png" % i)
        Image.fromarray(arr).save(p)
        want[p] = arr
ds = ImageFolder(root)
assert ds.classes == ["cat", "dog", "fox"], ds.classes
assert len(ds) == 36, len(ds)
for (p, label), (img, l2) in zip(ds.samples, ds):
    assert label == l2
    assert np.array_equal(np.asarray(img), want[p]), p
print("ok", len(ds))
'''
        out = run("/usr/bin/python3", "-c", code, os.path.join(MNT, "images"), timeout=180)
        self.assertIn("ok 36", out)


def main():
    def ready(cluster, mounts):
        global CLUSTER, MNT
        CLUSTER, MNT = cluster, mounts[0]

    fuse_fixture.run_tests(["mnt"], ready)

if __name__ == "__main__":
    main()
