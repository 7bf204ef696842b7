#!/usr/bin/env python3
"""HSM through the FUSE mount: files released to the cold tier read back transparently through
the mount (the open restores them), a write to a released file through the mount restores it
first, a corrupt archived copy is EIO for the reading program, and `ciuic hsm` takes paths
inside the mount.

Usage: test_hsm.py --bin-dir BUILD/apps  (ctest passes it; label fuse)
"""
import errno
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fuse_fixture  # noqa: E402

CLUSTER = None
MNT = None


def hsm(*args):
    return CLUSTER.ciuic("--cluster", CLUSTER.conf, "hsm", *args)


def cold_files():
    out = []
    for root, _, files in os.walk(os.path.join(CLUSTER.cdir, "cold")):
        out += [os.path.join(root, f) for f in files if not f.startswith(".ciuic-tmp")]
    return sorted(out)


class HsmMountTest(unittest.TestCase):
    def test_released_file_reads_back_through_the_mount(self):
        p = os.path.join(MNT, "rt.bin")
        data = os.urandom((2 << 20) + 99)
        with open(p, "wb") as f:
            f.write(data)
        hsm("archive", p)
        hsm("release", p)
        self.assertIn("released", hsm("state", p).stdout)
        self.assertEqual(os.stat(p).st_size, len(data))
        with open(p, "rb") as f:
            self.assertEqual(f.read(), data)
        self.assertIn("archived", hsm("state", p).stdout)

    def test_write_to_released_file_through_the_mount(self):
        p = os.path.join(MNT, "w.bin")
        data = bytearray(os.urandom(300000))
        with open(p, "wb") as f:
            f.write(data)
        hsm("archive", p)
        hsm("release", p)
        with open(p, "r+b") as f:
            f.seek(150000)
            f.write(b"PATCH")
        data[150000:150005] = b"PATCH"
        with open(p, "rb") as f:
            self.assertEqual(f.read(), bytes(data))
        self.assertIn("dirty", hsm("state", p).stdout)

    def test_corrupt_copy_is_eio_for_the_reader(self):
        # Written with the CLI, never read through the mount: no page of it is in the
        # kernel's cache.
        src = os.path.join(CLUSTER.tmp, "bad.src")
        with open(src, "wb") as f:
            f.write(os.urandom(100000))
        before = set(cold_files())
        CLUSTER.ciuic("--cluster", CLUSTER.conf, "put", src, "/bad.bin")
        hsm("archive", "/bad.bin")
        new = [f for f in cold_files() if f not in before and not f.endswith(".crc")]
        self.assertEqual(len(new), 1, new)
        hsm("release", "/bad.bin")
        with open(new[0], "rb") as f:
            blob = bytearray(f.read())
        blob[5000] ^= 0xff
        os.chmod(new[0], 0o600)
        with open(new[0], "wb") as f:
            f.write(blob)
        with self.assertRaises(OSError) as cm:
            with open(os.path.join(MNT, "bad.bin"), "rb") as f:
                f.read()
        self.assertEqual(cm.exception.errno, errno.EIO)
        self.assertIn("lost", hsm("state", "/bad.bin").stdout)


def main():
    def ready(cluster, mounts):
        global CLUSTER, MNT
        CLUSTER, MNT = cluster, mounts[0]

    fuse_fixture.run_tests(["mnt"], ready)

if __name__ == "__main__":
    main()
