#!/usr/bin/python3
"""The C API (libciuic.so, include/ciuic/ciuic.h) on a real local cluster.

Runs tests/capi/capi_ring.c's program against `ciuic cluster up`, with the OSSes' shared
memory (the OSS places reads in and takes writes from the region) and without it (TCP), and
checks that the library exports the C API and nothing else.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import urllib.request

BIN = None   # apps/
CAPI = None  # src/capi/ (capi_ring, libciuic.so)
FAKE_CUDART = None  # tests/cuda's fake CUDA runtime, when built


def ciuic(*args, env=None, check=True, timeout=120):
    r = subprocess.run([os.path.join(BIN, "ciuic"), *args], capture_output=True, env=env,
                       timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError("ciuic %s failed (%d): %s" % (" ".join(args), r.returncode,
                                                            r.stderr.decode(errors="replace")))
    return r


class CApiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ciuic-capi-")
        cls.cdir = os.path.join(cls.tmp, "cluster")
        cls.conf = os.path.join(cls.cdir, "cluster.conf")
        cls.env = dict(os.environ, CIUIC_CLUSTER=cls.conf)
        ciuic("cluster", "up", cls.cdir, "--timeout", "60", env=cls.env)

    @classmethod
    def tearDownClass(cls):
        subprocess.run([os.path.join(BIN, "ciuic"), "cluster", "down", cls.cdir],
                       capture_output=True, env=cls.env, timeout=60)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def oss_counter(self, name):
        """`name` summed over the OSSes' metrics endpoints."""
        run = os.path.join(self.cdir, "run")
        total = 0.0
        for f in os.listdir(run):
            if f.startswith("oss") and f.endswith(".metrics_port"):
                with open(os.path.join(run, f)) as p:
                    port = int(p.read())
                with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                            timeout=30) as r:
                    for line in r.read().decode().splitlines():
                        if line.startswith(name + " "):
                            total += float(line.split()[1])
        return total

    def run_c(self, path, env):
        r = subprocess.run([os.path.join(CAPI, "capi_ring"), self.conf, path],
                           capture_output=True, env=env, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        self.assertIn("written and read back", r.stdout.decode())

    def test_rings_through_shared_memory_and_tcp(self):
        # The device read goes through the fake CUDA runtime, else finds none.
        env = dict(self.env, CIUIC_CUDART=FAKE_CUDART or "/nonexistent/libcudart.so")
        w0 = self.oss_counter("ciuic_oss_shm_writes_total")
        r0 = self.oss_counter("ciuic_oss_shm_reads_total")
        self.run_c("/capi-shm", env)
        # Each of the 64 ring writes and reads was taken from / placed in the region by an OSS.
        self.assertEqual(self.oss_counter("ciuic_oss_shm_writes_total") - w0, 64)
        self.assertGreaterEqual(self.oss_counter("ciuic_oss_shm_reads_total") - r0, 64)
        w0 = self.oss_counter("ciuic_oss_shm_writes_total")
        r0 = self.oss_counter("ciuic_oss_shm_reads_total")
        self.run_c("/capi-tcp", dict(self.env, CIUIC_SHM_READS="0",
                                     CIUIC_CUDART="/nonexistent/libcudart.so"))
        self.assertEqual(self.oss_counter("ciuic_oss_shm_writes_total"), w0)
        self.assertEqual(self.oss_counter("ciuic_oss_shm_reads_total"), r0)
        a = ciuic("cat", "/capi-shm", env=self.env).stdout
        b = ciuic("cat", "/capi-tcp", env=self.env).stdout
        self.assertEqual(len(a), 64 * 65536)
        self.assertEqual(a, b)

    def test_only_the_c_api_is_exported(self):
        lib = os.path.join(CAPI, "libciuic.so")
        r = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, check=True)
        names = [l.split()[-1] for l in r.stdout.decode().splitlines() if l.strip()]
        funcs = [n for n in names if n != "CIUIC_1"]
        self.assertTrue(funcs)
        self.assertEqual([n for n in funcs if not n.startswith("ciuic_")], [])
        soname = subprocess.run(["objdump", "-p", lib], capture_output=True, check=True)
        self.assertIn("libciuic.so.1", soname.stdout.decode())

    def test_wrong_cluster_file_is_one_clear_error(self):
        r = subprocess.run([os.path.join(CAPI, "capi_ring"), os.path.join(self.tmp, "none.conf"),
                            "/x"], capture_output=True, timeout=60)
        self.assertEqual(r.returncode, 1)
        err = r.stderr.decode().strip()
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertIn("none.conf", err)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--capi-dir", required=True)
    ap.add_argument("--fake-cudart", default="")
    args, rest = ap.parse_known_args()
    FAKE_CUDART = os.path.abspath(args.fake_cudart) if args.fake_cudart else None
    BIN = os.path.abspath(args.bin_dir)
    CAPI = os.path.abspath(args.capi_dir)
    unittest.main(argv=[sys.argv[0], "-v"] + rest)
