#!/usr/bin/env python3
"""End-to-end HSM with the real binaries: `ciuic cluster up` (cold tier: DIR/cold, a file://
store, and in S3HsmTest an s3rver bucket) and `ciuic hsm archive|release|restore|state|remove`;
reads through `ciuic get/cat` restore released files. Also: a corrupt or missing archived copy
is a one-line EIO naming the file, and SIGKILL of every server right after a release loses
nothing.

Usage: test_hsm.py --bin-dir BUILD/apps [--s3rver .../s3rver.js]  (ctest passes them)
"""
import argparse
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from s3rver_util import S3rver

BIN = None
S3RVER = None


def ciuic(*args, env=None, check=True, timeout=120):
    r = subprocess.run([os.path.join(BIN, "ciuic"), *args], capture_output=True, env=env,
                       timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError("ciuic %s failed (%d): %s" % (" ".join(args), r.returncode,
                                                            r.stderr.decode(errors="replace")))
    return r


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def cold_files(cdir):
    out = []
    for root, _, files in os.walk(os.path.join(cdir, "cold")):
        out += [os.path.join(root, f) for f in files if not f.startswith(".ciuic-tmp")]
    return sorted(out)


class HsmTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ciuic-e2e-hsm-")
        cls.cdir = os.path.join(cls.tmp, "cluster")
        cls.env = dict(os.environ, CIUIC_CLUSTER=os.path.join(cls.cdir, "cluster.conf"))
        ciuic("cluster", "up", cls.cdir, "--timeout", "60", env=cls.env)

    @classmethod
    def tearDownClass(cls):
        subprocess.run([os.path.join(BIN, "ciuic"), "cluster", "down", cls.cdir],
                       capture_output=True, env=cls.env, timeout=60)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def put_random(self, remote, size):
        src = os.path.join(self.tmp, os.path.basename(remote) + ".src")
        with open(src, "wb") as f:
            f.write(os.urandom(size))
        ciuic("put", src, remote, env=self.env)
        return src

    def state(self, path):
        return ciuic("hsm", "state", path, env=self.env).stdout.decode()

    def test_archive_release_read_round_trip(self):
        ciuic("mkdir", "-p", "/rt", env=self.env)
        src = self.put_random("/rt/big.bin", (3 << 20) + 777)
        self.assertIn("/rt/big.bin: none", self.state("/rt/big.bin"))
        ciuic("hsm", "archive", "/rt/big.bin", env=self.env)
        st = self.state("/rt/big.bin")
        self.assertIn("archived", st)
        self.assertIn("file://" + os.path.join(self.cdir, "cold"), st)
        self.assertTrue(any(f.endswith(".crc") for f in cold_files(self.cdir)))
        ciuic("hsm", "release", "/rt/big.bin", env=self.env)
        self.assertIn("released", self.state("/rt/big.bin"))
        out = os.path.join(self.tmp, "big.out")
        ciuic("get", "/rt/big.bin", out, env=self.env)
        self.assertEqual(sha(src), sha(out))
        self.assertIn("archived", self.state("/rt/big.bin"))

        # Changed since archived: dirty, and release is refused with one line.
        self.put_random("/rt/big.bin", 1000)
        self.assertIn("dirty", self.state("/rt/big.bin"))
        r = ciuic("hsm", "release", "/rt/big.bin", env=self.env, check=False)
        self.assertNotEqual(r.returncode, 0)
        err = r.stderr.decode().strip()
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertIn("/rt/big.bin", err)
        self.assertIn("dirty", err)

    def test_recursive_and_remove(self):
        ciuic("mkdir", "-p", "/tree/a/b", env=self.env)
        srcs = {p: self.put_random(p, 5000 + i) for i, p in
                enumerate(["/tree/x", "/tree/a/y", "/tree/a/b/z"])}
        r = ciuic("hsm", "archive", "/tree", env=self.env, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("use -r", r.stderr.decode())
        ciuic("hsm", "archive", "-r", "/tree", env=self.env)
        ciuic("hsm", "release", "-r", "/tree", env=self.env)
        st = ciuic("hsm", "state", "-r", "/tree", env=self.env).stdout.decode().splitlines()
        self.assertEqual(len(st), 3, st)
        self.assertTrue(all("released" in line for line in st), st)
        for p, src in srcs.items():
            out = os.path.join(self.tmp, "tree.out")
            ciuic("get", p, out, env=self.env)
            self.assertEqual(sha(src), sha(out), p)
        ciuic("hsm", "remove", "-r", "/tree", env=self.env)
        st = ciuic("hsm", "state", "-r", "/tree", env=self.env).stdout.decode()
        self.assertEqual(st.count(": none"), 3, st)

    def test_corrupt_copy_is_one_line_eio_naming_the_file(self):
        ciuic("mkdir", "-p", "/bad", env=self.env)
        self.put_random("/bad/f", 200000)
        before = set(cold_files(self.cdir))
        ciuic("hsm", "archive", "/bad/f", env=self.env)
        new = [f for f in cold_files(self.cdir) if f not in before and not f.endswith(".crc")]
        self.assertEqual(len(new), 1, new)
        ciuic("hsm", "release", "/bad/f", env=self.env)
        # The copy is a plain file: flip one byte of it (written once, so replace it whole).
        with open(new[0], "rb") as f:
            data = bytearray(f.read())
        data[100000] ^= 1
        os.chmod(new[0], 0o600)
        with open(new[0], "wb") as f:
            f.write(data)
        r = ciuic("cat", "/bad/f", env=self.env, check=False)
        self.assertNotEqual(r.returncode, 0)
        err = r.stderr.decode().strip()
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertIn("/bad/f", err)
        self.assertIn("corrupt", err)
        self.assertEqual(r.stdout, b"")
        self.assertIn("lost", self.state("/bad/f"))

    def test_kill_every_server_after_release_loses_nothing(self):
        ciuic("mkdir", "-p", "/k", env=self.env)
        src = self.put_random("/k/f", 1 << 20)
        ciuic("hsm", "archive", "/k/f", env=self.env)
        ciuic("hsm", "release", "/k/f", env=self.env)
        run = os.path.join(self.cdir, "run")
        for name in os.listdir(run):
            if name.endswith(".pid"):
                with open(os.path.join(run, name)) as f:
                    pid = int(f.read().strip())
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        time.sleep(0.5)
        ciuic("cluster", "up", self.cdir, "--timeout", "60", env=self.env)
        self.assertIn("released", self.state("/k/f"))
        out = os.path.join(self.tmp, "k.out")
        ciuic("get", "/k/f", out, env=self.env)
        self.assertEqual(sha(src), sha(out))

    def test_mem_cold_tier_is_refused_by_cluster_up(self):
        r = ciuic("cluster", "up", os.path.join(self.tmp, "other"), "--cold-tier", "mem://x",
                  env=self.env, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertEqual(len(r.stderr.decode().strip().splitlines()), 1)
        self.assertIn("mem://", r.stderr.decode())


class S3HsmTest(unittest.TestCase):
    """The cold tier on S3 (s3rver): multipart archive, ranged restores, bad copies."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ciuic-e2e-hsm-s3-")
        try:
            cls.s3 = S3rver(S3RVER, cls.tmp)
        except BaseException:
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise
        cls.cdir = os.path.join(cls.tmp, "cluster")
        cls.env = dict(os.environ, CIUIC_CLUSTER=os.path.join(cls.cdir, "cluster.conf"),
                       **cls.s3.env)
        ciuic("cluster", "up", cls.cdir, "--timeout", "60", "--cold-tier", "s3://bucket/cold",
              env=cls.env)

    @classmethod
    def tearDownClass(cls):
        subprocess.run([os.path.join(BIN, "ciuic"), "cluster", "down", cls.cdir],
                       capture_output=True, env=cls.env, timeout=60)
        cls.s3.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    put_random = HsmTest.put_random

    def keys(self, prefix):
        body = self.s3.request("GET", "bucket?list-type=2&prefix=" + prefix).decode()
        return re.findall(r"<Key>([^<]*)</Key>", body)

    def archived_object(self, path):
        """Archives and releases `path`; returns the key of its one data object."""
        before = set(self.keys("cold/"))
        ciuic("hsm", "archive", path, env=self.env)
        new = [k for k in self.keys("cold/") if k not in before and not k.endswith(".crc")]
        self.assertEqual(len(new), 1, new)
        ciuic("hsm", "release", path, env=self.env)
        return new[0]

    def test_round_trip_of_a_multipart_copy(self):
        ciuic("mkdir", "-p", "/s3rt", env=self.env)
        src = self.put_random("/s3rt/big.bin", (20 << 20) + 4097)  # more than one part
        ciuic("hsm", "archive", "/s3rt/big.bin", env=self.env)
        st = ciuic("hsm", "state", "/s3rt/big.bin", env=self.env).stdout.decode()
        self.assertIn("archived", st)
        self.assertIn("s3://bucket/cold", st)
        ciuic("hsm", "release", "/s3rt/big.bin", env=self.env)
        out = os.path.join(self.tmp, "big.out")
        ciuic("get", "/s3rt/big.bin", out, env=self.env)
        self.assertEqual(sha(src), sha(out))
        ciuic("hsm", "release", "/s3rt/big.bin", env=self.env)
        ciuic("hsm", "restore", "/s3rt/big.bin", env=self.env)
        self.assertIn("archived", ciuic("hsm", "state", "/s3rt/big.bin",
                                        env=self.env).stdout.decode())
        ciuic("get", "/s3rt/big.bin", out, env=self.env)
        self.assertEqual(sha(src), sha(out))

    def check_bad_copy(self, path, damage, why):
        ciuic("mkdir", "-p", os.path.dirname(path), env=self.env)
        self.put_random(path, 300000)
        damage(self.archived_object(path))
        r = ciuic("cat", path, env=self.env, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertEqual(r.stdout, b"")
        err = r.stderr.decode().strip()
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertIn(path, err)
        self.assertIn(why, err)
        self.assertIn("lost", ciuic("hsm", "state", path, env=self.env).stdout.decode())

    def test_corrupt_copy_is_one_line_eio(self):
        def flip(key):
            data = bytearray(self.s3.request("GET", "bucket/" + key))
            data[123456] ^= 0x40
            self.s3.request("PUT", "bucket/" + key, bytes(data))
        self.check_bad_copy("/s3bad/corrupt", flip, "corrupt")

    def test_missing_copy_is_one_line_eio(self):
        self.check_bad_copy("/s3bad/missing",
                            lambda key: self.s3.request("DELETE", "bucket/" + key), "missing")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--s3rver", default="")
    args, rest = ap.parse_known_args()
    BIN = os.path.abspath(args.bin_dir)
    S3RVER = args.s3rver
    unittest.main(argv=[sys.argv[0], "-v"] + rest)
