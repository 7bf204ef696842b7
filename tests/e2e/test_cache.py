#!/usr/bin/env python3
"""End-to-end test of the node cache with the real binaries (docs/design.md "Node cache"):
`ciuic cluster up --node-cache`, `ciuic cache warm|status|drop`, reads of other processes served
from the cache, and several processes reading one file at once fetching each block from the
OSTs once. Bytes read from the OSTs are the OSSes' own counters (their /metrics).

Usage: test_cache.py --bin-dir BUILD/apps  (ctest passes it).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import urllib.request

BIN = None


def ciuic(*args, env=None, check=True, timeout=120):
    r = subprocess.run([os.path.join(BIN, "ciuic"), *args], capture_output=True, env=env,
                       timeout=timeout, text=True)
    if check and r.returncode != 0:
        raise AssertionError("ciuic %s failed (%d): %s" % (" ".join(args), r.returncode, r.stderr))
    return r


class NodeCacheTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ciuic-e2e-cache-")
        cls.cdir = os.path.join(cls.tmp, "cluster")
        cls.cache = os.path.join(cls.tmp, "node-cache")
        cls.env = dict(os.environ, CIUIC_CLUSTER=os.path.join(cls.cdir, "cluster.conf"))
        cls.env.pop("CIUIC_NODE_CACHE", None)
        ciuic("cluster", "up", cls.cdir, "--oss", "2", "--node-cache", cls.cache,
              "--node-cache-size", "1G",
              # Single flight is counted below: a build machine's disk under the default free
              # share would empty the cache at each look.
              "--node-cache-min-free", "0", "--timeout", "60", env=cls.env)
        cls.src = os.path.join(cls.tmp, "data.bin")
        with open(cls.src, "wb") as f:
            f.write(os.urandom((6 << 20) + 12345))
        ciuic("mkdir", "/d", env=cls.env)
        ciuic("put", cls.src, "/d/data.bin", env=cls.env)

    @classmethod
    def tearDownClass(cls):
        subprocess.run([os.path.join(BIN, "ciuic"), "cluster", "down", cls.cdir],
                       capture_output=True, env=cls.env, timeout=60)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def ost_read_bytes(self):
        total = 0
        for name in os.listdir(os.path.join(self.cdir, "run")):
            if not re.match(r"oss\d+\.metrics_port$", name):
                continue
            with open(os.path.join(self.cdir, "run", name)) as f:
                port = int(f.read().strip())
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
                for line in r.read().decode().splitlines():
                    if line.startswith("ciuic_ost_read_bytes_total{"):
                        total += int(float(line.rsplit(" ", 1)[1]))
        return total

    def get(self, name, env=None):
        out = os.path.join(self.tmp, "out-%d.bin" % os.getpid())
        ciuic("get", "/d/data.bin", out, env=env or self.env)
        with open(out, "rb") as a, open(self.src, "rb") as b:
            self.assertEqual(a.read(), b.read(), name)
        os.unlink(out)

    def test_a_warmed_file_is_read_by_other_processes_from_the_cache(self):
        ciuic("cache", "drop", env=self.env)
        out = ciuic("cache", "warm", "-r", "/d", env=self.env).stdout
        self.assertIn("warmed 1 of 1 files", out)
        status = ciuic("cache", "status", env=self.env).stdout
        self.assertIn(self.cache, status)
        self.assertIn("at least 0% is kept free", status)  # cluster up's --node-cache-min-free
        self.assertRegex(status, r"in 7 blocks")
        before = self.ost_read_bytes()
        self.get("second read")
        self.assertEqual(self.ost_read_bytes(), before)
        # The counters of every process: the warm's fills, the get's hits.
        status = ciuic("cache", "status", env=self.env).stdout
        m = re.search(r"(\d+) hits .*?(\d+) blocks fetched from the OSTs", status)
        self.assertIsNotNone(m, status)
        self.assertGreaterEqual(int(m.group(1)), 7)
        self.assertGreaterEqual(int(m.group(2)), 7)
        self.assertIn("hit ratio", status)
        # Opting a process out reads the OSTs.
        env = dict(self.env, CIUIC_NODE_CACHE="none")
        self.get("read past the cache", env)
        self.assertGreater(self.ost_read_bytes(), before)
        # Dropping the file's blocks: the next read fetches them again.
        self.assertIn("dropped", ciuic("cache", "drop", "/d/data.bin", env=self.env).stdout)
        self.assertRegex(ciuic("cache", "status", env=self.env).stdout, r"in 0 blocks")

    def test_processes_reading_one_file_at_once_fetch_each_block_once(self):
        ciuic("cache", "drop", env=self.env)
        before = self.ost_read_bytes()
        procs = []
        for i in range(4):
            out = os.path.join(self.tmp, "par-%d.bin" % i)
            procs.append((out, subprocess.Popen(
                [os.path.join(BIN, "ciuic"), "get", "/d/data.bin", out], env=self.env,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE)))
        for out, p in procs:
            _, err = p.communicate(timeout=120)
            self.assertEqual(p.returncode, 0, err)
            with open(out, "rb") as a, open(self.src, "rb") as b:
                self.assertEqual(a.read(), b.read())
        read = self.ost_read_bytes() - before
        size = os.path.getsize(self.src)
        self.assertGreaterEqual(read, size)
        self.assertLessEqual(read, size * 11 // 10, "4 readers read %d bytes of a %d-byte file"
                             % (read, size))

    def test_a_file_put_on_this_machine_is_read_from_the_cache(self):
        # Write-through: `ciuic put` caches the blocks it wrote whole at its close, so another
        # process reads the file without the OSTs.
        def written():
            status = ciuic("cache", "status", env=self.env).stdout
            m = re.search(r"(\d+) blocks written through", status)
            self.assertIsNotNone(m, status)
            return int(m.group(1))
        ciuic("cache", "drop", env=self.env)
        ciuic("mkdir", "/w", env=self.env)
        was = written()
        ciuic("put", self.src, "/w/put.bin", env=self.env)
        self.assertRegex(ciuic("cache", "status", env=self.env).stdout, r"in 7 blocks")
        self.assertEqual(written() - was, 7)
        before = self.ost_read_bytes()
        out = os.path.join(self.tmp, "put-back.bin")
        ciuic("get", "/w/put.bin", out, env=self.env)
        with open(out, "rb") as a, open(self.src, "rb") as b:
            self.assertEqual(a.read(), b.read())
        self.assertEqual(self.ost_read_bytes(), before)
        # Opted out per process: nothing written through.
        ciuic("cache", "drop", env=self.env)
        ciuic("put", self.src, "/w/put2.bin", env=dict(self.env, CIUIC_NODE_CACHE="none"))
        self.assertRegex(ciuic("cache", "status", env=self.env).stdout, r"in 0 blocks")
        ciuic("rm", "-r", "/w", env=self.env)

    def test_an_excluded_directory_is_read_past_the_cache(self):
        ciuic("mkdir", "/x", env=self.env)
        self.assertIn("excluded 1 entry from the node cache",
                      ciuic("cache", "exclude", "/x", env=self.env).stdout)
        ciuic("cache", "drop", env=self.env)
        ciuic("put", self.src, "/x/a.bin", env=self.env)  # inherits the opt-out: no write-through
        self.assertIn("Node cache: excluded", ciuic("stat", "/x/a.bin", env=self.env).stdout)
        before = self.ost_read_bytes()
        out = os.path.join(self.tmp, "x-back.bin")
        ciuic("get", "/x/a.bin", out, env=self.env)
        self.assertGreaterEqual(self.ost_read_bytes() - before, os.path.getsize(self.src))
        self.assertRegex(ciuic("cache", "status", env=self.env).stdout, r"in 0 blocks")
        self.assertIn("included 2 entries in the node cache",
                      ciuic("cache", "include", "-r", "/x", env=self.env).stdout)
        self.assertNotIn("Node cache", ciuic("stat", "/x/a.bin", env=self.env).stdout)
        ciuic("get", "/x/a.bin", out, env=self.env)
        self.assertRegex(ciuic("cache", "status", env=self.env).stdout, r"in 7 blocks")
        r = ciuic("cache", "exclude", "/x/nope", env=self.env, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn("/x/nope", r.stderr)
        ciuic("rm", "-r", "/x", env=self.env)

    def test_bad_use_is_one_clear_line(self):
        env = dict(self.env, CIUIC_NODE_CACHE="none")
        r = ciuic("cache", "warm", "/d", env=env, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no node cache is configured", r.stderr)
        r = ciuic("cache", "warm", "/d", env=self.env, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("is a directory (use -r)", r.stderr)
        r = ciuic("cluster", "up", self.cdir, "--node-cache-size", "lots", env=self.env,
                  check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--node-cache-size", r.stderr)
        r = ciuic("cluster", "up", self.cdir, "--node-cache-min-free", "100", env=self.env,
                  check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--node-cache-min-free", r.stderr)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", required=True)
    args, rest = ap.parse_known_args()
    BIN = os.path.abspath(args.bin_dir)
    unittest.main(argv=[sys.argv[0], *rest])
