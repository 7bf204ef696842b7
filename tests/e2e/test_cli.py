#!/usr/bin/env python3
"""End-to-end tests of the real binaries: `ciuic cluster up` starts ciuic-mds and ciuic-oss
processes on 127.0.0.1 and every check goes through the `ciuic` CLI.

Usage: test_cli.py --bin-dir BUILD/apps  (ctest passes it)
"""
import argparse
import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

BIN = None


def ciuic(*args, env=None, check=True, input=None, timeout=120):
    r = subprocess.run([os.path.join(BIN, "ciuic"), *args], capture_output=True, env=env,
                       input=input, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError("ciuic %s failed (%d): %s" % (" ".join(args), r.returncode,
                                                            r.stderr.decode(errors="replace")))
    return r


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def pids(cdir):
    out = {}
    run = os.path.join(cdir, "run")
    for name in os.listdir(run):
        if name.endswith(".pid"):
            with open(os.path.join(run, name)) as f:
                out[name[:-4]] = int(f.read().strip())
    return out


def wait_dead(pid, timeout=10):
    end = time.time() + timeout
    while time.time() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # reap if it is our grandchild zombie: not possible; check /proc state
        try:
            with open("/proc/%d/stat" % pid) as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


class ClusterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ciuic-e2e-")
        cls.cdir = os.path.join(cls.tmp, "cluster")
        cls.env = dict(os.environ, CIUIC_CLUSTER=os.path.join(cls.cdir, "cluster.conf"))
        r = ciuic("cluster", "up", cls.cdir, "--timeout", "60", env=cls.env)
        assert b"cluster up" in r.stdout, r.stdout

    @classmethod
    def tearDownClass(cls):
        subprocess.run([os.path.join(BIN, "ciuic"), "cluster", "down", cls.cdir], capture_output=True,
                       env=cls.env, timeout=60)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def local(self, name, size, seed=1):
        path = os.path.join(self.tmp, name)
        rnd = random.Random(seed)
        with open(path, "wb") as f:
            left = size
            while left > 0:
                n = min(left, 1 << 20)
                f.write(rnd.randbytes(n))
                left -= n
        return path

    def test_put_get_round_trip(self):
        src = self.local("big.bin", 21 * (1 << 20) + 12345, seed=7)
        ciuic("mkdir", "-p", "/rt/a/b", env=self.env)
        ciuic("put", src, "/rt/a/b/big.bin", env=self.env)
        out = os.path.join(self.tmp, "big.out")
        ciuic("get", "/rt/a/b/big.bin", out, env=self.env)
        self.assertEqual(sha(src), sha(out))
        st = ciuic("stat", "/rt/a/b/big.bin", env=self.env).stdout.decode()
        self.assertIn(str(os.path.getsize(src)), st)
        cat = ciuic("cat", "/rt/a/b/big.bin", env=self.env).stdout
        with open(src, "rb") as f:
            self.assertEqual(cat, f.read())

    def test_put_recursive_and_ls(self):
        tree = os.path.join(self.tmp, "tree")
        os.makedirs(os.path.join(tree, "sub"), exist_ok=True)
        for i in range(20):
            with open(os.path.join(tree, "sub" if i % 2 else "", "f%02d" % i), "wb") as f:
                f.write(os.urandom(1000 * i + 1))
        ciuic("mkdir", "/trees", env=self.env)
        ciuic("put", "-r", tree, "/trees/", env=self.env)
        names = ciuic("ls", "/trees/tree", env=self.env).stdout.decode().split()
        self.assertIn("sub", names)
        self.assertIn("f00", names)
        long = ciuic("ls", "-l", "/trees/tree/sub", env=self.env).stdout.decode()
        self.assertIn("f01", long)
        self.assertTrue(long.splitlines()[0].startswith("-rw"))
        back = os.path.join(self.tmp, "tree-back")
        ciuic("get", "-r", "/trees/tree", back, env=self.env)
        for root, _, files in os.walk(tree):
            for fn in files:
                p = os.path.join(root, fn)
                q = os.path.join(back, os.path.relpath(p, tree))
                self.assertEqual(sha(p), sha(q), q)
        ciuic("rm", "-r", "/trees", env=self.env)
        r = ciuic("ls", "/trees", env=self.env, check=False)
        self.assertNotEqual(r.returncode, 0)

    def test_mv_ln_and_symlinks(self):
        ciuic("mkdir", "-p", "/mv/d1", "/mv/d2", env=self.env)
        src = self.local("small.txt", 100, seed=3)
        ciuic("put", src, "/mv/d1/x", env=self.env)
        ciuic("mv", "/mv/d1/x", "/mv/d2/", env=self.env)
        self.assertNotEqual(ciuic("stat", "/mv/d1/x", env=self.env, check=False).returncode, 0)
        ciuic("ln", "/mv/d2/x", "/mv/hard", env=self.env)
        ciuic("ln", "-s", "/mv/d2/x", "/mv/soft", env=self.env)
        with open(src, "rb") as f:
            want = f.read()
        self.assertEqual(ciuic("cat", "/mv/hard", env=self.env).stdout, want)
        self.assertEqual(ciuic("cat", "/mv/soft", env=self.env).stdout, want)
        self.assertIn("-> /mv/d2/x", ciuic("ls", "-l", "/mv", env=self.env).stdout.decode())

    def test_setstripe_getstripe_df(self):
        ciuic("mkdir", "/stripes", env=self.env)
        ciuic("setstripe", "-c", "2", "-S", "1M", "/stripes/wide", env=self.env)
        src = self.local("wide.bin", 5 << 20, seed=11)
        ciuic("put", src, "/stripes/wide", env=self.env)
        out = ciuic("getstripe", "/stripes/wide", env=self.env).stdout.decode()
        self.assertIn("stripe_count 2", out)
        self.assertEqual(out.count("object "), 2, out)
        df = ciuic("df", env=self.env).stdout.decode()
        self.assertEqual(sum(1 for l in df.splitlines() if l.startswith("OST")), 1 + 4, df)
        ciuic("setstripe", "--components", "64M:1,EOF:4", "/stripes/pfl", env=self.env)
        out = ciuic("getstripe", "/stripes/pfl", env=self.env).stdout.decode()
        self.assertIn("component 1", out)

    def test_errors_are_one_clear_line(self):
        cases = [
            (["stat", "/no/such/file"], "no such"),
            (["ls", "relative/path"], "absolute"),
            (["setstripe", "-c", "2", "-S", "12Q", "/x"], "bad size"),
            (["mkdir", "/" + "n" * 300], "long"),
            (["rm", "/"], "refusing"),
            (["cluster", "status", os.path.join(self.tmp, "nowhere")], "not a ciuic cluster"),
        ]
        for args, want in cases:
            r = ciuic(*args, env=self.env, check=False)
            err = r.stderr.decode()
            self.assertNotEqual(r.returncode, 0, args)
            self.assertEqual(len(err.strip().splitlines()), 1, (args, err))
            self.assertIn(want, err.lower(), (args, err))

    def test_server_flag_errors_are_one_clear_line(self):
        conf = os.path.join(self.cdir, "cluster.conf")
        cases = [
            (["--max-open-objects", "0"], "max-open-objects"),
            (["--heartbeat-ms", "0"], "heartbeat"),
            (["--io-engine", "floppy"], "floppy"),
        ]
        for extra, want in cases:
            r = subprocess.run([os.path.join(BIN, "ciuic-oss"), "--ost",
                                "0:" + os.path.join(self.tmp, "unused-ost"), "--cluster-file", conf]
                               + extra, capture_output=True, timeout=60)
            err = r.stderr.decode()
            self.assertNotEqual(r.returncode, 0, extra)
            self.assertEqual(len(err.strip().splitlines()), 1, (extra, err))
            self.assertIn(want, err.lower(), (extra, err))

    def test_wrong_secret_is_refused(self):
        conf = os.path.join(self.cdir, "cluster.conf")
        bad = os.path.join(self.tmp, "bad.conf")
        with open(conf) as f, open(bad, "w") as g:
            for line in f:
                if line.startswith("secret"):
                    line = "secret = " + "ab" * 32 + "\n"
                g.write(line)
        r = ciuic("--cluster", bad, "ls", "/", env=self.env, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("secret", r.stderr.decode())
        # The servers keep serving good clients.
        ciuic("ls", "/", env=self.env)

    def test_zy_cluster_up_restarts_only_the_killed_server(self):
        src = self.local("oss-restart.bin", 3 << 20, seed=9)
        ciuic("put", src, "/oss-restart", env=self.env)
        before = pids(self.cdir)
        victim = sorted(n for n in before if n.startswith("oss"))[0]
        os.kill(before[victim], signal.SIGKILL)
        self.assertTrue(wait_dead(before[victim]), victim)
        r = ciuic("cluster", "up", self.cdir, "--timeout", "60", env=self.env)
        self.assertIn("servers running; starting the others", r.stdout.decode())
        after = pids(self.cdir)
        self.assertEqual(set(after), set(before))
        for name in before:
            if name != victim:
                self.assertEqual(after[name], before[name], name)  # left alone
        self.assertNotEqual(after[victim], before[victim])
        out = os.path.join(self.tmp, "oss-restart.out")
        ciuic("get", "/oss-restart", out, env=self.env)  # the OSS moved to a new port
        self.assertEqual(sha(src), sha(out))
        r = ciuic("cluster", "up", self.cdir, env=self.env, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("already running", r.stderr.decode())

    def test_zz_kill9_and_restart_keeps_fsynced_data(self):
        src = self.local("durable.bin", 9 << 20, seed=5)
        ciuic("mkdir", "-p", "/durable", env=self.env)
        ciuic("put", src, "/durable/f", env=self.env)  # put fsyncs before it returns
        for name, pid in pids(self.cdir).items():
            os.kill(pid, signal.SIGKILL)
            self.assertTrue(wait_dead(pid), name)
        r = ciuic("ls", "/", env=self.env, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("not running", r.stderr.decode())
        ciuic("cluster", "up", self.cdir, "--timeout", "60", env=self.env)
        out = os.path.join(self.tmp, "durable.out")
        ciuic("get", "/durable/f", out, env=self.env)
        self.assertEqual(sha(src), sha(out))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", required=True)
    args, rest = ap.parse_known_args()
    BIN = os.path.abspath(args.bin_dir)
    unittest.main(argv=[sys.argv[0], "-v"] + rest)
