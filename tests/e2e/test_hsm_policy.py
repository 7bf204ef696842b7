#!/usr/bin/env python3
"""End-to-end HSM policy pieces with the real binaries (docs/design.md "HSM policy"):
`ciuic df` shows bytes per tier (OSTs, cold tier, released), counted from the MDS's HSM records;
`ciuic hsm policy DIR ...` sets a directory's policy and `ciuic hsm sweep` applies it (archive
after a time unused; release the coldest archived files above the high watermark, at once when
the OSTs fill between passes).

Usage: test_hsm_policy.py --bin-dir BUILD/apps  (ctest passes it)
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
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

    def state(self, path):
        return ciuic("hsm", "state", path, env=self.env).stdout.decode()

    def test_policy_set_show_and_bad_input(self):
        ciuic("mkdir", "-p", "/p/a", env=self.env)
        self.assertIn("/p: (inherited)", ciuic("hsm", "policy", "/p", env=self.env).stdout.decode())
        ciuic("hsm", "policy", "/p", "archive-after", "2h", env=self.env)
        self.assertIn("/p: archive-after 7200s",
                      ciuic("hsm", "policy", "/p", env=self.env).stdout.decode())
        ciuic("hsm", "policy", "/p", "never", env=self.env)
        self.assertIn("/p: never", ciuic("hsm", "policy", "/p", env=self.env).stdout.decode())
        for bad in (["archive-after", "7x"], ["archive-after"], ["sometimes"],
                    ["never", "extra"]):
            r = ciuic("hsm", "policy", "/p", *bad, env=self.env, check=False)
            self.assertNotEqual(r.returncode, 0, bad)
            self.assertEqual(len(r.stderr.decode().strip().splitlines()), 1, r.stderr)
        # The policy that was set is kept.
        self.assertIn("/p: never", ciuic("hsm", "policy", "/p", env=self.env).stdout.decode())
        self.put_random("/p/f", 4096)
        r = ciuic("hsm", "policy", "/p/f", "never", env=self.env, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("not a directory", r.stderr.decode())
        r = ciuic("hsm", "sweep", "--high", "50", "--low", "60", env=self.env, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertEqual(len(r.stderr.decode().strip().splitlines()), 1, r.stderr)

    def test_sweep_archives_cold_files_and_releases_above_the_watermark(self):
        ciuic("mkdir", "-p", "/sw/keep", "/sw/cold", "/sw/plain", env=self.env)
        ciuic("hsm", "policy", "/sw/keep", "never", env=self.env)
        ciuic("hsm", "policy", "/sw/cold", "archive-after", "0s", env=self.env)
        self.put_random("/sw/keep/k.bin", 1 << 20)
        src = self.put_random("/sw/cold/c.bin", 1 << 20)
        self.put_random("/sw/plain/p.bin", 1 << 20)
        self.put_random("/sw/plain/d.bin", 1 << 20)
        ciuic("hsm", "archive", "/sw/keep/k.bin", "/sw/plain/d.bin", env=self.env)
        # d.bin changes after its archive: dirty, so never released.
        ciuic("put", src, "/sw/plain/d.bin", env=self.env)
        # Watermarks above any real use: archive only, release nothing.
        out = ciuic("hsm", "sweep", "--root", "/sw", "--high", "100", "--low", "100",
                    env=self.env).stdout.decode()
        self.assertIn("archived /sw/cold/c.bin", out)
        self.assertNotIn("released", out)
        self.assertIn("archived", self.state("/sw/cold/c.bin"))
        self.assertIn(": none", self.state("/sw/plain/p.bin"))
        # Watermarks under any real use: release every current archived file outside "never".
        out = ciuic("hsm", "sweep", "--root", "/sw", "--high", "0", "--low", "0",
                    env=self.env).stdout.decode()
        self.assertIn("released /sw/cold/c.bin", out)
        self.assertIn("released", self.state("/sw/cold/c.bin"))
        self.assertIn("archived", self.state("/sw/keep/k.bin"))
        self.assertIn("dirty", self.state("/sw/plain/d.bin"))
        self.assertIn(": none", self.state("/sw/plain/p.bin"))
        # The released file reads back whole.
        got = os.path.join(self.tmp, "c.back")
        ciuic("get", "/sw/cold/c.bin", got, env=self.env)
        with open(got, "rb") as a, open(src, "rb") as b:
            self.assertEqual(a.read(), b.read())


class PolicyProcessTest(unittest.TestCase):
    """`cluster up --hsm-every` runs the policy with the cluster; its flags are saved."""

    def test_cluster_up_runs_the_policy_and_down_stops_it(self):
        tmp = tempfile.mkdtemp(prefix="ciuic-e2e-policy-proc-")
        cdir = os.path.join(tmp, "cluster")
        env = dict(os.environ, CIUIC_CLUSTER=os.path.join(cdir, "cluster.conf"))
        try:
            r = ciuic("cluster", "up", cdir, "--hsm-low", "95", "--hsm-high", "90", env=env,
                      check=False)
            self.assertNotEqual(r.returncode, 0)
            self.assertEqual(len(r.stderr.decode().strip().splitlines()), 1, r.stderr)
            # Watermarks of 0 %: every current archived file is over them.
            ciuic("cluster", "up", cdir, "--timeout", "60", "--hsm-every", "1", "--hsm-high", "0",
                  "--hsm-low", "0", env=env)
            with open(os.path.join(cdir, "cluster.shape")) as f:
                shape = f.read()
            self.assertIn("hsm_every_s = 1", shape)
            self.assertIn("hsm_high = 0", shape)
            with open(os.path.join(cdir, "run", "policy.pid")) as f:
                pid = int(f.read())
            os.kill(pid, 0)
            src = os.path.join(tmp, "f.src")
            with open(src, "wb") as f:
                f.write(os.urandom(1 << 20))
            ciuic("put", src, "/f.bin", env=env)
            ciuic("hsm", "archive", "/f.bin", env=env)
            deadline = time.time() + 60
            st = ""
            while time.time() < deadline:
                st = ciuic("hsm", "state", "/f.bin", env=env).stdout.decode()
                if "released" in st:
                    break
                time.sleep(0.2)
            self.assertIn("released", st)
            got = os.path.join(tmp, "f.back")
            ciuic("get", "/f.bin", got, env=env)
            with open(got, "rb") as a, open(src, "rb") as b:
                self.assertEqual(a.read(), b.read())
            ciuic("cluster", "down", cdir, env=env)
            deadline = time.time() + 10
            while time.time() < deadline and os.path.exists("/proc/%d" % pid):
                time.sleep(0.1)
            self.assertFalse(os.path.exists("/proc/%d/cmdline" % pid) and
                             b"sweep" in open("/proc/%d/cmdline" % pid, "rb").read())
        finally:
            subprocess.run([os.path.join(BIN, "ciuic"), "cluster", "down", cdir],
                           capture_output=True, env=env, timeout=60)
            shutil.rmtree(tmp, ignore_errors=True)


class WatermarkTest(unittest.TestCase):
    """A writer fills a small OST (a tmpfs of 192 MiB mounted where `cluster up` puts the OST;
    needs root) at a steady pace while the policy runs with the cluster: the writer writes 2.5
    times the OST and never fails."""

    OST_MIB = 192

    def fill(self, label, hsm_every, hsm_default, archive_each):
        if os.geteuid() != 0:
            self.skipTest("mounting the small OST needs root")
        tmp = tempfile.mkdtemp(prefix="ciuic-e2e-watermark-")
        cdir = os.path.join(tmp, "cluster")
        ost = os.path.join(cdir, "oss0", "ost0")
        os.makedirs(ost)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%dm" % self.OST_MIB, "tmpfs", ost],
                           capture_output=True)
        if r.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            self.skipTest("cannot mount a tmpfs: " + r.stderr.decode().strip())
        env = dict(os.environ, CIUIC_CLUSTER=os.path.join(cdir, "cluster.conf"))
        try:
            ciuic("cluster", "up", cdir, "--timeout", "60", "--oss", "1", "--osts-per-oss", "1",
                  "--io-engine", "posix", "--hsm-every", str(hsm_every), "--hsm-high", "60",
                  "--hsm-low", "30", "--hsm-default", hsm_default, env=env)
            ciuic("mkdir", "/w", env=env)
            src = os.path.join(tmp, "chunk")
            sums = {}
            max_use = 0
            t0 = time.monotonic()
            for i in range(60):  # 60 x 8 MiB = 480 MiB into a 192 MiB OST
                data = os.urandom(8 << 20)
                with open(src, "wb") as f:
                    f.write(data)
                name = "/w/f%03d" % i
                r = ciuic("put", src, name, env=env, check=False)
                self.assertEqual(r.returncode, 0, "%s: %s" % (name, r.stderr.decode()))
                if archive_each:
                    ciuic("hsm", "archive", name, env=env)
                sums[name] = data[:4096]
                st = os.statvfs(ost)
                max_use = max(max_use, 100 - 100 * st.f_bavail // st.f_blocks)
                time.sleep(0.25)
            elapsed = time.monotonic() - t0
            out = ciuic("df", env=env).stdout.decode()
            released = int(re.search(r"\((\d+) released", out).group(1))
            self.assertGreater(released, 20, out)
            print("\nwatermark (%s): 480 MiB written into a %d MiB OST in %.0f s, highest use "
                  "seen %d%%, %d files released" % (label, self.OST_MIB, elapsed, max_use,
                                                     released), file=sys.stderr)
            # The first files were released; they read back whole.
            for name in ("/w/f000", "/w/f001"):
                got = os.path.join(tmp, "back")
                ciuic("get", name, got, env=env)
                with open(got, "rb") as f:
                    self.assertEqual(f.read(4096), sums[name])
            return elapsed
        finally:
            subprocess.run([os.path.join(BIN, "ciuic"), "cluster", "down", cdir],
                           capture_output=True, env=env, timeout=60)
            subprocess.run(["umount", ost], capture_output=True)
            shutil.rmtree(tmp, ignore_errors=True)

    def test_writer_never_meets_a_full_ost(self):
        # The policy every second archives (archive-after=0) and releases.
        self.fill("every 1 s", 1, "archive-after=0", False)

    def test_a_filling_ost_starts_a_release_pass_at_once(self):
        # One pass an hour: only the OST watch between passes (the OST map once a second) can
        # release in time. The writer archives its own files, since archiving keeps its period.
        elapsed = self.fill("every 3600 s, watched", 3600, "release-at-watermark", True)
        self.assertLess(elapsed, 3600)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", required=True)
    args, rest = ap.parse_known_args()
    BIN = os.path.abspath(args.bin_dir)
    unittest.main(argv=[sys.argv[0], "-v"] + rest)
