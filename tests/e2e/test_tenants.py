#!/usr/bin/env python3
"""End-to-end tests of client keys (tenants) with the real binaries: `ciuic cluster up`, then
`ciuic cluster add-client` keys used by the CLI, run as an unprivileged uid where it matters.

Usage: test_tenants.py --bin-dir BUILD/apps  (ctest passes it). Runs as root (CI does): the
unprivileged runs use `setpriv --reuid 65534`.
"""
import argparse
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest

BIN = None
NOBODY = 65534


def ciuic(*args, env=None, check=True, as_nobody=False, timeout=120):
    argv = [os.path.join(BIN, "ciuic"), *args]
    if as_nobody:
        argv = ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups",
                *argv]
    r = subprocess.run(argv, capture_output=True, env=env, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError("ciuic %s failed (%d): %s" % (" ".join(args), r.returncode,
                                                            r.stderr.decode(errors="replace")))
    return r


@unittest.skipUnless(os.geteuid() == 0, "needs root to run the client as another uid")
class TenantTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ciuic-e2e-tenants-")
        cls.cdir = os.path.join(cls.tmp, "cluster")
        cls.env = dict(os.environ, CIUIC_CLUSTER=os.path.join(cls.cdir, "cluster.conf"))
        ciuic("cluster", "up", cls.cdir, "--oss", "1", "--timeout", "60", env=cls.env)
        # Where the unprivileged client keeps its cluster file and local files.
        cls.home = os.path.join(cls.tmp, "nobody")
        os.mkdir(cls.home)
        os.chown(cls.home, NOBODY, NOBODY)
        os.chmod(cls.tmp, 0o755)
        ciuic("mkdir", "/team", env=cls.env)
        ciuic("mkdir", "-m", "777", "/team/data", env=cls.env)
        ciuic("mkdir", "-m", "700", "/private", env=cls.env)
        src = os.path.join(cls.tmp, "secret.txt")
        with open(src, "w") as f:
            f.write("root only\n")
        ciuic("put", src, "/private/secret", env=cls.env)

    @classmethod
    def tearDownClass(cls):
        subprocess.run([os.path.join(BIN, "ciuic"), "cluster", "down", cls.cdir],
                       capture_output=True, env=cls.env, timeout=60)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def add_client(self, name, *flags, owner=0):
        out = os.path.join(self.home, name + ".conf")
        r = ciuic("cluster", "add-client", name, *flags, "-o", out, env=self.env)
        self.assertIn("cluster file: " + out, r.stdout.decode())
        self.assertEqual(stat.S_IMODE(os.stat(out).st_mode), 0o600)
        os.chown(out, owner, owner)
        return out

    def test_data_directories_are_private(self):
        ciuic("put", os.path.join(self.tmp, "secret.txt"), "/modes-check", env=self.env)
        self.assertEqual(stat.S_IMODE(os.stat(self.cdir).st_mode), 0o700)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(self.cdir, "mds")).st_mode), 0o700)
        ost = os.path.join(self.cdir, "oss0", "ost0")
        self.assertEqual(stat.S_IMODE(os.stat(ost).st_mode), 0o700)
        files = []
        for root, _, names in os.walk(os.path.join(self.cdir, "oss0")):
            files += [os.path.join(root, n) for n in names]
        self.assertTrue(files)
        for f in files:
            self.assertEqual(stat.S_IMODE(os.stat(f).st_mode) & 0o077, 0, f)

    def test_subtree_key_run_as_nobody_stays_in_its_subtree(self):
        conf = self.add_client("team", "--subtree", "/team", owner=NOBODY)
        local = os.path.join(self.home, "mine.txt")
        with open(local, "w") as f:
            f.write("tenant data\n")
        os.chown(local, NOBODY, NOBODY)
        ciuic("--cluster", conf, "put", local, "/data/mine", env=self.env, as_nobody=True)
        # The tenant's "/" is /team.
        names = ciuic("--cluster", conf, "ls", "/", env=self.env, as_nobody=True).stdout.split()
        self.assertEqual(names, [b"data"])
        self.assertIn(b"mine", ciuic("ls", "/team/data", env=self.env).stdout)
        r = ciuic("--cluster", conf, "cat", "/private/secret", env=self.env, check=False,
                  as_nobody=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertEqual(len(r.stderr.decode().strip().splitlines()), 1, r.stderr)
        # The key cannot act as an admin.
        r = ciuic("--cluster", conf, "cluster", "list-clients", env=self.env, check=False,
                  as_nobody=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("admin", r.stderr.decode())

    def test_squashed_key_claiming_root_cannot_read_root_files(self):
        conf = self.add_client("squashed", "--squash-root")
        r = ciuic("--cluster", conf, "cat", "/private/secret", env=self.env, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("ermission", r.stderr.decode())
        self.assertEqual(ciuic("cat", "/private/secret", env=self.env).stdout, b"root only\n")

    def test_read_only_key_cannot_write(self):
        conf = self.add_client("reader", "--read-only", owner=NOBODY)
        local = os.path.join(self.home, "ro.txt")
        with open(local, "w") as f:
            f.write("x")
        os.chown(local, NOBODY, NOBODY)
        r = ciuic("--cluster", conf, "put", local, "/team/data/ro", env=self.env, check=False,
                  as_nobody=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("read-only", r.stderr.decode())
        ciuic("--cluster", conf, "ls", "/team/data", env=self.env, as_nobody=True)

    def test_revoked_key_is_refused(self):
        conf = self.add_client("leaver", owner=NOBODY)
        ciuic("--cluster", conf, "ls", "/", env=self.env, as_nobody=True)
        ciuic("cluster", "revoke-client", "leaver", env=self.env)
        r = ciuic("--cluster", conf, "ls", "/", env=self.env, check=False, as_nobody=True)
        self.assertNotEqual(r.returncode, 0)
        listing = ciuic("cluster", "list-clients", env=self.env).stdout.decode()
        self.assertRegex(listing, r"leaver\s+key \d+\s+revoked")

    def test_bad_input_gets_one_line_and_non_zero_exit(self):
        for args in (["add-client", "bad", "--uid-map", "1000"],
                     ["add-client", "bad", "--uid-map", "x:1"],
                     ["add-client", "bad name"],
                     ["add-client", "bad", "--subtree", "relative"],
                     ["add-client", "bad", "--subtree", "/no/such/dir"],
                     ["revoke-client", "nobody-by-that-name"]):
            r = ciuic("cluster", *args, env=self.env, check=False)
            self.assertNotEqual(r.returncode, 0, args)
            self.assertEqual(len(r.stderr.decode().strip().splitlines()), 1, (args, r.stderr))
        self.add_client("twice")
        r = ciuic("cluster", "add-client", "twice", env=self.env, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("exists", r.stderr.decode())


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", required=True)
    args, rest = ap.parse_known_args()
    BIN = os.path.abspath(args.bin_dir)
    unittest.main(argv=[sys.argv[0], "-v"] + rest)
