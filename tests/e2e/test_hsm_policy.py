#!/usr/bin/env python3
"""End-to-end HSM policy pieces with the real binaries (docs/design.md "HSM policy"):
`ciuic df` shows bytes per tier (OSTs, cold tier, released), counted from the MDS's HSM records.

Usage: test_hsm_policy.py --bin-dir BUILD/apps  (ctest passes it)
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

BIN = None


def ciuic(*args, env=None, check=True, timeout=120):
    r = subprocess.run([os.path.join(BIN, "ciuic"), *args], capture_output=True, env=env,
                       timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError("ciuic %s failed (%d): %s" % (" ".join(args), r.returncode,
                                                            r.stderr.decode(errors="replace")))
    return r


def cold_line(out):
    """(bytes, files, released files, released bytes, dirty) from `ciuic df` (no -h)."""
    m = re.search(r"^cold tier\s+(\d+) in (\d+) files \((\d+) released: (\d+), only there; "
                  r"(\d+) dirty\)$", out, re.M)
    if not m:
        raise AssertionError("no cold tier line in:\n" + out)
    return tuple(int(x) for x in m.groups())


class DfTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ciuic-e2e-policy-")
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

    def df(self):
        return ciuic("df", env=self.env).stdout.decode()

    def test_df_counts_bytes_per_tier(self):
        # df is in KiB blocks without -h: sizes chosen as whole KiB.
        self.assertEqual(cold_line(self.df())[:2], (0, 0))
        ciuic("mkdir", "-p", "/df", env=self.env)
        self.put_random("/df/a.bin", 3 << 20)
        self.put_random("/df/b.bin", 1 << 20)
        self.put_random("/df/c.bin", 2 << 20)
        ciuic("hsm", "archive", "/df/a.bin", "/df/b.bin", env=self.env)
        self.assertEqual(cold_line(self.df()), ((4 << 20) // 1024, 2, 0, 0, 0))
        ciuic("hsm", "release", "/df/a.bin", env=self.env)
        self.assertEqual(cold_line(self.df()), ((4 << 20) // 1024, 2, 1, (3 << 20) // 1024, 0))
        # A write makes b dirty: its copy is still counted, of the size it had.
        ciuic("put", os.path.join(self.tmp, "c.bin.src"), "/df/b.bin", env=self.env)
        self.assertEqual(cold_line(self.df()), ((4 << 20) // 1024, 2, 1, (3 << 20) // 1024, 1))
        # Removing a copy takes it off the cold tier; the OST lines are still there.
        ciuic("hsm", "remove", "/df/b.bin", env=self.env)
        out = self.df()
        self.assertEqual(cold_line(out), ((3 << 20) // 1024, 1, 1, (3 << 20) // 1024, 0))
        self.assertRegex(out, r"(?m)^OST0000 ")
        self.assertRegex(out, r"(?m)^total ")
        human = ciuic("df", "-h", env=self.env).stdout.decode()
        self.assertRegex(human, r"(?m)^cold tier\s+3\.0 MiB in 1 files")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", required=True)
    args, rest = ap.parse_known_args()
    BIN = os.path.abspath(args.bin_dir)
    unittest.main(argv=[sys.argv[0], "-v"] + rest)
