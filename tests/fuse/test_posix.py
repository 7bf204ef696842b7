#!/usr/bin/env python3
"""POSIX semantics of the ciuic mount: the unprivileged edge-case suite (posix_checks.py, run as
uid/gid 65534 on an allow_other + default_permissions mount) plus checks across two mounts (two
clients) and the mount lifecycle errors.

Usage: test_posix.py --bin-dir BUILD/apps  (ctest passes it; label fuse)
"""
import errno
import os
import shutil
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fuse_fixture  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CLUSTER = None
M1 = None
M2 = None


def wait_for(cond, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


class PosixTest(unittest.TestCase):
    def test_unprivileged_suite(self):
        shared = os.path.join(M1, "shared")
        rootonly = os.path.join(M1, "rootonly")
        os.mkdir(shared)
        os.chmod(shared, 0o1777)
        os.mkdir(rootonly, 0o755)
        with open(os.path.join(rootonly, "file"), "wb") as f:
            f.write(b"root data")
        with open(os.path.join(rootonly, "secret"), "wb") as f:
            f.write(b"s")
        os.chmod(os.path.join(rootonly, "secret"), 0o600)
        with open(os.path.join(shared, "rootfile"), "wb") as f:
            f.write(b"")
        os.chmod(os.path.join(shared, "rootfile"), 0o666)
        r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                            "/usr/bin/python3", os.path.join(HERE, "posix_checks.py"), M1],
                           capture_output=True, text=True, timeout=200)
        print(r.stdout, r.stderr, file=sys.stderr)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_second_mount_sees_size_and_mtime_after_close(self):
        a = os.path.join(M1, "seen")
        with open(a, "wb") as f:
            f.write(b"x" * 1000)
        os.utime(a, ns=(1, 1_234_567_890_123_456_789))
        with open(a, "ab") as f:
            f.write(b"y" * 234)
        st1 = os.stat(a)
        b = os.path.join(M2, "seen")
        self.assertTrue(wait_for(lambda: os.stat(b).st_size == 1234))
        st2 = os.stat(b)
        self.assertEqual(st2.st_mtime_ns, st1.st_mtime_ns)
        with open(b, "rb") as f:
            self.assertEqual(f.read(), b"x" * 1000 + b"y" * 234)

    def test_data_written_in_one_mount_read_in_other(self):
        data = os.urandom(3 << 20)
        with open(os.path.join(M1, "xfer"), "wb") as f:
            f.write(data)
        with open(os.path.join(M2, "xfer"), "rb") as f:
            self.assertEqual(f.read(), data)
        # Rewritten in mount 2: mount 1 must not serve its stale page cache (data_version).
        data2 = os.urandom(3 << 20)
        with open(os.path.join(M2, "xfer"), "r+b") as f:
            f.write(data2)
        # Mount 1's kernel keeps attributes for attr_timeout (1 s); then an open sees the new
        # data version and drops its page cache.
        def read1():
            with open(os.path.join(M1, "xfer"), "rb") as f:
                return f.read()
        self.assertTrue(wait_for(lambda: read1() == data2))

    def test_truncate_while_other_mount_reads(self):
        path1 = os.path.join(M1, "tw")
        with open(path1, "wb") as f:
            f.write(b"a" * (2 << 20))
        f2 = open(os.path.join(M2, "tw"), "rb")
        self.assertEqual(f2.read(4096), b"a" * 4096)
        os.truncate(path1, 4096)
        f2.close()

        def read2():
            with open(os.path.join(M2, "tw"), "rb") as f:
                return f.read()
        self.assertTrue(wait_for(lambda: read2() == b"a" * 4096))

    def test_unlink_in_one_mount_while_open_in_other(self):
        path1 = os.path.join(M1, "uo2")
        with open(path1, "wb") as f:
            f.write(b"keep reading me")
        f2 = open(os.path.join(M2, "uo2"), "rb")
        os.unlink(path1)
        self.assertEqual(f2.read(), b"keep reading me")
        f2.close()
        self.assertFalse(os.path.exists(path1))

    def test_offsets_past_4gib_and_sparse(self):
        path = os.path.join(M1, "big-sparse")
        off = (5 << 30) + 4093
        with open(path, "wb") as f:
            f.write(b"start")
            f.seek(off)
            f.write(b"past 4 GiB")
        self.assertEqual(os.stat(path).st_size, off + 10)
        with open(path, "rb") as f:
            f.seek(off - 3)
            self.assertEqual(f.read(), b"\0\0\0past 4 GiB")
            f.seek(3 << 30)
            self.assertEqual(f.read(8192), b"\0" * 8192)
        # (st_blocks is the MDS's estimate from the size, not the allocated space: not checked.)
        os.truncate(path, 3)
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"sta")

    def test_statfs_shows_cluster_capacity(self):
        v = os.statvfs(M1)
        self.assertGreater(v.f_blocks * v.f_frsize, 0)
        self.assertEqual(v.f_namemax, 255)
        df = subprocess.run(["df", "-P", M1], capture_output=True, text=True)
        self.assertIn("ciuic", df.stdout)

    def test_layout_xattr(self):
        path = os.path.join(M1, "laid-out")
        with open(path, "wb") as f:
            f.write(b"z" * 100000)
        layout = os.getxattr(path, "user.ciuic.layout").decode()
        self.assertIn("comp", layout)
        self.assertNotIn("user.ciuic.layout", os.listxattr(path))
        # Setting it is `ciuic setstripe` for an empty file (or a directory's default).
        striped = os.path.join(M1, "striped")
        open(striped, "wb").close()
        os.setxattr(striped, "user.ciuic.layout", b"count=2,size=64K")
        data = os.urandom(300000)
        with open(striped, "r+b") as f:
            f.write(data)
        with open(os.path.join(M2, "striped"), "rb") as f:
            self.assertEqual(f.read(), data)
        layout = os.getxattr(striped, "user.ciuic.layout").decode()
        self.assertIn(" 2 x 64", layout)
        with self.assertRaises(OSError) as e:
            os.setxattr(striped, "user.ciuic.layout", b"count=1")  # has data already
        self.assertEqual(e.exception.errno, errno.EBUSY)
        with self.assertRaises(OSError) as e:
            os.setxattr(striped, "user.ciuic.layout", b"stripes=lots")
        self.assertEqual(e.exception.errno, errno.EINVAL)

    def test_mmap_read_and_write(self):
        import mmap
        path = os.path.join(M1, "mm")
        with open(path, "wb") as f:
            f.write(b"\0" * (1 << 20))
        with open(path, "r+b") as f:
            m = mmap.mmap(f.fileno(), 0)
            m[4096:4100] = b"MMAP"
            m.flush()
            m.close()
        with open(path, "rb") as f:
            f.seek(4096)
            self.assertEqual(f.read(4), b"MMAP")
            m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
            self.assertEqual(m[4096:4100], b"MMAP")
            m.close()


class LifecycleTest(unittest.TestCase):
    def ciuic(self, *args):
        return CLUSTER.ciuic(*args, check=False)

    def test_mountpoint_errors(self):
        r = self.ciuic("mount", CLUSTER.conf, os.path.join(CLUSTER.tmp, "no-such-dir"))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("does not exist", r.stderr)
        full = os.path.join(CLUSTER.tmp, "full")
        os.makedirs(full)
        open(os.path.join(full, "x"), "w").close()
        r = self.ciuic("mount", CLUSTER.conf, full)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("not empty", r.stderr)
        r = self.ciuic("mount", CLUSTER.conf, M1)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("already", r.stderr)
        r = self.ciuic("umount", os.path.join(CLUSTER.tmp, "full"))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("not mounted", r.stderr)

    def test_cluster_down_is_a_clear_error(self):
        bad = os.path.join(CLUSTER.tmp, "bad.conf")
        with open(CLUSTER.conf) as f:
            conf = f.read()
        import re
        conf = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:1", conf)
        with open(bad, "w") as f:
            f.write(conf)
        mp = os.path.join(CLUSTER.tmp, "down-mnt")
        os.makedirs(mp)
        r = self.ciuic("mount", bad, mp)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("cluster not running", r.stderr)
        self.assertFalse(fuse_fixture_is_mounted(mp))

    def test_sigterm_unmounts_and_kill9_leaves_no_hung_mount(self):
        for sig in ("TERM", "KILL"):
            mp = CLUSTER.mount("sig-" + sig)
            with open(os.path.join(mp, "f-" + sig), "w") as f:
                f.write("x")
            pid = daemon_pid(mp)
            self.assertIsNotNone(pid)
            os.kill(pid, getattr(__import__("signal"), "SIG" + sig))
            # fusermount3 unmounts once the daemon's last descriptor of /dev/fuse is gone: after
            # the kernel tore the process down, which for an ASan build beside another test on 2
            # cores once took longer than 15 s. A bound, not a speed check.
            self.assertTrue(wait_for(lambda: not fuse_fixture_is_mounted(mp), 90), sig)
            CLUSTER.mounts.remove(mp)
            self.assertEqual(os.listdir(mp), [])


def fuse_fixture_is_mounted(mp):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == mp for line in f)


def daemon_pid(mp):
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if args and args[0].endswith(b"ciuic-fuse") and mp.encode() in args:
            return int(pid)
    return None


def main():
    def ready(cluster, mounts):
        global CLUSTER, M1, M2
        CLUSTER, (M1, M2) = cluster, mounts

    def check():
        if os.geteuid() != 0:
            print("SKIP: the POSIX suite needs root (it mounts with allow_other and switches to "
                  "an unprivileged uid)", file=sys.stderr)
            sys.exit(fuse_fixture.SKIP)

    fuse_fixture.run_tests(["m1", "m2"], ready, check)

if __name__ == "__main__":
    main()
