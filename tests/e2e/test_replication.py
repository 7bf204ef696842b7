#!/usr/bin/env python3
"""End-to-end test of replication with the real binaries (docs/design.md "Replication"):
`ciuic cluster up --replicas 2`, kill -9 of an OSS, `cluster status` and `df` showing the degraded
chains, the OSS back with `cluster up` and its copies caught up, the file whole, and
`ciuic scrub status`.

Usage: test_replication.py --bin-dir BUILD/apps  (ctest passes it).
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

BIN = None


def ciuic(*args, env=None, check=True, timeout=120):
    r = subprocess.run([os.path.join(BIN, "ciuic"), *args], capture_output=True, env=env,
                       timeout=timeout, text=True)
    if check and r.returncode != 0:
        raise AssertionError("ciuic %s failed (%d): %s" % (" ".join(args), r.returncode, r.stderr))
    return r


def wait_for(fn, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.2)
    return fn()


class ReplicationTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ciuic-e2e-replication-")
        cls.cdir = os.path.join(cls.tmp, "cluster")
        cls.env = dict(os.environ, CIUIC_CLUSTER=os.path.join(cls.cdir, "cluster.conf"))
        ciuic("cluster", "up", cls.cdir, "--oss", "2", "--osts-per-oss", "1", "--replicas", "2",
              "--resync-mbps", "64", "--timeout", "60", env=cls.env)

    @classmethod
    def tearDownClass(cls):
        subprocess.run([os.path.join(BIN, "ciuic"), "cluster", "down", cls.cdir],
                       capture_output=True, env=cls.env, timeout=60)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def degraded(self):
        out = ciuic("cluster", "status", self.cdir, env=self.env).stdout
        m = re.search(r"chains: (\d+) \((\d+) degraded", out)
        self.assertIsNotNone(m, out)
        return int(m.group(2)), out + self.log_tails()

    def log_tails(self, lines=40):
        # What the servers said last: the MDS's ticks (chain changes, OSTs down) and the OSSes'
        # resyncs, so a failure here can be read after the cluster directory is gone.
        out = ""
        logs = os.path.join(self.cdir, "logs")
        for name in sorted(os.listdir(logs)) if os.path.isdir(logs) else []:
            if not name.endswith(".log"):
                continue
            with open(os.path.join(logs, name), errors="replace") as f:
                tail = f.readlines()[-lines:]
            out += "\n--- %s (last %d lines)\n%s" % (name, len(tail), "".join(tail))
        return out

    def test_an_oss_killed_and_back_catches_up(self):
        src = os.path.join(self.tmp, "data.bin")
        with open(src, "wb") as f:
            f.write(os.urandom(3 << 20))
        ciuic("put", src, "/data.bin", env=self.env)
        self.assertIn("replicas 2", ciuic("getstripe", "/data.bin", env=self.env).stdout)
        with open(os.path.join(self.cdir, "run", "oss1.pid")) as f:
            os.kill(int(f.read().strip()), signal.SIGKILL)
        # The MDS takes its copies out of their chains; reads and writes go on. (Bounds are
        # generous: on a loaded CI machine another test's `sync` can hold the MDS's fsync.)
        self.assertTrue(wait_for(lambda: self.degraded()[0] > 0, 120), self.degraded()[1])
        df = ciuic("df", env=self.env).stdout
        self.assertRegex(df, r"replication: \d+ chains, [1-9]\d* degraded")
        more = os.path.join(self.tmp, "more.bin")
        with open(more, "wb") as f:
            f.write(os.urandom(1 << 20))
        ciuic("put", more, "/more.bin", env=self.env)
        # Back: its copies catch up and serve again.
        ciuic("cluster", "up", self.cdir, "--timeout", "60", env=self.env)
        self.assertTrue(wait_for(lambda: self.degraded()[0] == 0, 120), self.degraded()[1])
        self.assertRegex(ciuic("df", env=self.env).stdout, r"replication: \d+ chains, 0 degraded")
        for name, path in (("/data.bin", src), ("/more.bin", more)):
            back = os.path.join(self.tmp, "back" + name.replace("/", "_"))
            ciuic("get", name, back, env=self.env)
            with open(back, "rb") as a, open(path, "rb") as b:
                self.assertEqual(a.read(), b.read(), name)

    def test_resync_bound_is_saved_and_given_to_the_osses(self):
        self.assertIn("resync copies at most 64 MiB/s per OSS",
                      ciuic("cluster", "status", self.cdir, env=self.env).stdout)
        with open(os.path.join(self.cdir, "cluster.shape")) as f:
            self.assertIn("resync_mbps = 64", f.read())
        with open(os.path.join(self.cdir, "run", "oss0.pid")) as f:
            pid = int(f.read().strip())
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            argv = f.read().split(b"\0")
        self.assertEqual(argv[argv.index(b"--resync-mbps") + 1], b"64")
        r = ciuic("cluster", "up", self.cdir, "--resync-mbps", "-1", env=self.env, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("resync-mbps", r.stderr)

    def test_scrub_status(self):
        out = ciuic("scrub", "status", env=self.env).stdout
        self.assertIn("repaired", out)
        self.assertEqual(len(re.findall(r"^OST000\d", out, re.M)), 2, out)
        r = ciuic("scrub", env=self.env, check=False)
        self.assertNotEqual(r.returncode, 0)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", required=True)
    args, rest = ap.parse_known_args()
    BIN = os.path.abspath(args.bin_dir)
    unittest.main(argv=[sys.argv[0], *rest])
