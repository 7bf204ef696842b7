#!/usr/bin/env python3
"""Locks across two mounts of one cluster: flock and fcntl byte ranges are held by the MDS, so
a lock taken through mount A is seen through mount B; blocking waits, release on close and on
the holder's death; sqlite3 from two mounts on one database.

Usage: test_locks.py --bin-dir BUILD/apps  (ctest passes it; label fuse)
"""
import errno
import fcntl
import os
import signal
import sqlite3
import struct
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fuse_fixture  # noqa: E402

PY = "/usr/bin/python3"
CLUSTER = None
A = None
B = None

# A child that takes a lock on argv[1] (flock or lockf(start, len)), prints "locked", then
# waits for a line on stdin and exits (closing the file releases the lock).
HOLDER = r'''
import fcntl, os, sys
path, how = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
if how == "flock":
    fcntl.flock(fd, fcntl.LOCK_EX)
else:
    start, length = int(sys.argv[3]), int(sys.argv[4])
    fcntl.lockf(fd, fcntl.LOCK_EX if how == "wr" else fcntl.LOCK_SH, length, start)
print("locked", flush=True)
sys.stdin.readline()
'''


def holder(path, how, start=0, length=0):
    p = subprocess.Popen([PY, "-c", HOLDER, path, how, str(start), str(length)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if line.strip() != "locked":
        p.kill()
        p.wait()
        raise AssertionError("holder did not lock: %r" % line)
    return p


def close_pipes(p):
    for f in (p.stdin, p.stdout):
        if f is not None:
            f.close()


def release(p):
    p.stdin.write("\n")
    p.stdin.flush()
    rc = p.wait(timeout=30)
    close_pipes(p)
    assert rc == 0


def eventually(fn, timeout=20):
    """Retries fn until it stops raising (what a released lock needs: the kernel sends the
    release of a killed process's file asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def getlk(fd, ltype, start, length):
    """F_GETLK: returns (l_type, l_start, l_len, l_pid)."""
    req = struct.pack("hhxxxxqqixxxx", ltype, os.SEEK_SET, start, length, 0)
    out = fcntl.fcntl(fd, fcntl.F_GETLK, req)
    t, _, s, n, pid = struct.unpack("hhxxxxqqixxxx", out)
    return t, s, n, pid


class LockTest(unittest.TestCase):
    def paths(self, name):
        with open(os.path.join(A, name), "wb") as f:
            f.write(b"x" * 4096)
        return os.path.join(A, name), os.path.join(B, name)

    def test_flock_across_mounts(self):
        pa, pb = self.paths("flock")
        h = holder(pa, "flock")
        try:
            fd = os.open(pb, os.O_RDWR)
            try:
                with self.assertRaises(BlockingIOError) as cm:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self.assertEqual(cm.exception.errno, errno.EWOULDBLOCK)
                with self.assertRaises(BlockingIOError):
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            finally:
                os.close(fd)
        finally:
            release(h)
        fd = os.open(pb, os.O_RDWR)
        try:
            eventually(lambda: fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB))
            # Now A cannot take it; after unlocking in B it can.
            fa = os.open(pa, os.O_RDWR)
            with self.assertRaises(BlockingIOError):
                fcntl.flock(fa, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            fcntl.flock(fa, fcntl.LOCK_SH | fcntl.LOCK_NB)
            os.close(fa)
        finally:
            os.close(fd)

    def test_fcntl_ranges_across_mounts(self):
        pa, pb = self.paths("ranges")
        h = holder(pa, "wr", 100, 50)  # bytes [100, 150)
        try:
            fd = os.open(pb, os.O_RDWR)
            try:
                for start, length in ((120, 1), (0, 101), (149, 10), (0, 0)):
                    with self.assertRaises(OSError) as cm:
                        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, length, start)
                    self.assertIn(cm.exception.errno, (errno.EAGAIN, errno.EACCES))
                with self.assertRaises(OSError):
                    fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, 1, 100)
                # Ranges that do not overlap are fine.
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 100, 0)
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 150)
                # F_GETLK reports the holder's range and pid.
                t, s, n, pid = getlk(fd, fcntl.F_RDLCK, 90, 20)
                self.assertEqual((t, s, n, pid), (fcntl.F_WRLCK, 100, 50, h.pid))
                t, _, _, _ = getlk(fd, fcntl.F_WRLCK, 200, 10)
                self.assertEqual(t, fcntl.F_UNLCK)
                # Our own locks are not conflicts for us.
                t, _, _, _ = getlk(fd, fcntl.F_WRLCK, 0, 100)
                self.assertEqual(t, fcntl.F_UNLCK)
            finally:
                os.close(fd)  # drops this process's locks
        finally:
            release(h)
        # Unlocking the middle of a range splits it: seen from the other mount.
        h2 = holder(pb, "wr", 0, 300)
        try:
            fd = os.open(pa, os.O_RDWR)
            try:
                with self.assertRaises(OSError):
                    fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, 1, 150)
            finally:
                os.close(fd)
        finally:
            release(h2)
        fd = os.open(pa, os.O_RDWR)
        try:
            eventually(lambda: fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 0, 0))
            fcntl.lockf(fd, fcntl.LOCK_UN, 100, 100)  # keeps [0,100) and [200, EOF)
            fb = os.open(pb, os.O_RDWR)
            try:
                fcntl.lockf(fb, fcntl.LOCK_EX | fcntl.LOCK_NB, 100, 100)
                for start in (99, 200, 10**9):
                    with self.assertRaises(OSError):
                        fcntl.lockf(fb, fcntl.LOCK_SH | fcntl.LOCK_NB, 1, start)
                t, s, n, _ = getlk(fb, fcntl.F_RDLCK, 250, 1)
                self.assertEqual((t, s, n), (fcntl.F_WRLCK, 200, 0))
            finally:
                os.close(fb)
        finally:
            os.close(fd)

    def test_blocking_setlkw_completes_after_unlock(self):
        pa, pb = self.paths("wait")
        h = holder(pa, "wr", 0, 0)
        waiter = subprocess.Popen(
            [PY, "-c", "import fcntl, os, sys\n"
             "fd = os.open(sys.argv[1], os.O_RDWR)\n"
             "fcntl.lockf(fd, fcntl.LOCK_EX, 10, 0)\n"
             "print('got', flush=True)\n", pb],
            stdout=subprocess.PIPE, text=True)
        try:
            time.sleep(0.5)
            self.assertIsNone(waiter.poll(), "F_SETLKW returned while the lock was held")
            release(h)
            out, _ = waiter.communicate(timeout=30)
            self.assertEqual(out.strip(), "got")
            self.assertEqual(waiter.returncode, 0)
        finally:
            if waiter.poll() is None:
                waiter.kill()
                waiter.wait()
            if h.poll() is None:
                h.kill()
                h.wait()
            close_pipes(h)

    def test_blocked_setlkw_is_interrupted_by_a_signal(self):
        pa, pb = self.paths("intr")
        h = holder(pa, "wr", 0, 0)
        try:
            code = ("import errno, fcntl, os, signal, sys\n"
                    "class Alarm(Exception): pass\n"
                    "def on_alarm(*a): raise Alarm()\n"
                    "signal.signal(signal.SIGALRM, on_alarm)\n"
                    "fd = os.open(sys.argv[1], os.O_RDWR)\n"
                    "signal.alarm(1)\n"
                    "try:\n"
                    "    fcntl.lockf(fd, fcntl.LOCK_EX, 0, 0)\n"
                    "    print('locked')\n"
                    "except Alarm:\n"
                    "    print('interrupted')\n")
            r = subprocess.run([PY, "-c", code, pb], capture_output=True, text=True, timeout=60)
            self.assertEqual(r.stdout.strip(), "interrupted", r.stderr)
        finally:
            release(h)

    def test_killing_the_holder_releases_its_locks(self):
        for how in ("wr", "flock"):
            pa, pb = self.paths("kill-" + how)
            h = holder(pa, how, 0, 0)
            fd = os.open(pb, os.O_RDWR)
            try:
                lock = ((lambda: fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)) if how == "flock"
                        else (lambda: fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 0, 0)))
                with self.assertRaises(OSError):
                    lock()
                h.send_signal(signal.SIGKILL)
                h.wait(timeout=30)
                close_pipes(h)
                eventually(lock)
            finally:
                os.close(fd)

    def test_sqlite_from_two_mounts(self):
        db_a = os.path.join(A, "shared.db")
        db_b = os.path.join(B, "shared.db")
        con = sqlite3.connect(db_a)
        con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, who TEXT, n INTEGER, pad TEXT)")
        con.commit()
        con.close()
        n = 150
        code = ("import sqlite3, sys\n"
                "db, who, n = sys.argv[1], sys.argv[2], int(sys.argv[3])\n"
                "con = sqlite3.connect(db, timeout=60)\n"
                "for i in range(n):\n"
                "    with con:\n"
                "        con.execute('INSERT INTO t (who, n, pad) VALUES (?, ?, ?)',\n"
                "                    (who, i, who * 300))\n"
                "        c = con.execute('SELECT count(*) FROM t WHERE who = ?', (who,))\n"
                "        assert c.fetchone()[0] == i + 1\n"
                "con.close()\n"
                "print('done', flush=True)\n")
        procs = [subprocess.Popen([PY, "-c", code, db, who, str(n)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
                 for db, who in ((db_a, "a"), (db_b, "b"))]
        for p in procs:
            out, err = p.communicate(timeout=240)
            self.assertEqual(p.returncode, 0, err)
            self.assertEqual(out.strip(), "done")
        for db in (db_a, db_b):
            con = sqlite3.connect(db)
            self.assertEqual(con.execute("PRAGMA integrity_check").fetchone()[0], "ok")
            self.assertEqual(con.execute("SELECT count(*) FROM t").fetchone()[0], 2 * n)
            for who in ("a", "b"):
                rows = con.execute("SELECT n FROM t WHERE who = ? ORDER BY id", (who,))
                self.assertEqual([r[0] for r in rows], list(range(n)))
            con.close()
        out = subprocess.run(["sqlite3", db_b, "PRAGMA integrity_check; SELECT count(*) FROM t;"],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.stdout.split(), ["ok", str(2 * n)], out.stderr)


def main():
    def ready(cluster, mounts):
        global CLUSTER, A, B
        CLUSTER, (A, B) = cluster, mounts

    fuse_fixture.run_tests(["mnt-a", "mnt-b"], ready)

if __name__ == "__main__":
    main()
