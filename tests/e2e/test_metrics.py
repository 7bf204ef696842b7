#!/usr/bin/env python3
"""End-to-end test of observability: `ciuic cluster up` starts real servers with metrics
endpoints, a workload runs under CIUIC_JOBID, every endpoint is scraped with a real HTTP client
(urllib) and its exposition text parsed strictly here (an independent parser, not the C++ one),
and `ciuic top --once` is checked.

Usage: test_metrics.py --bin-dir BUILD/apps  (ctest passes it)
"""
import argparse
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import urllib.error
import urllib.request

BIN = None
JOB = "e2e-job-7"

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
SAMPLE = re.compile(r"^(%s)(\{(?:%s)(?:,%s)*\})? (\S+)( -?\d+)?$" % (NAME, LABEL, LABEL))
LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')


def ciuic(*args, env=None, check=True, timeout=120):
    r = subprocess.run([os.path.join(BIN, "ciuic"), *args], capture_output=True, env=env,
                       timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError("ciuic %s failed (%d): %s" % (" ".join(args), r.returncode,
                                                            r.stderr.decode(errors="replace")))
    return r


def unescape(v):
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), v)


def parse_value(s):
    if s in ("+Inf", "Inf"):
        return math.inf
    if s == "-Inf":
        return -math.inf
    if s == "NaN":
        return math.nan
    return float(s)


def parse_exposition(text):
    """Returns {"types": {family: type}, "samples": [(name, labels, value)]}; raises
    AssertionError on any line that is not valid text format 0.0.4, and on histograms whose
    buckets are not cumulative or whose +Inf bucket differs from _count."""
    types, samples, seen_sample_of = {}, [], set()
    for n, line in enumerate(text.split("\n"), 1):
        if line == "":
            continue
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 2 and parts[1] in ("HELP", "TYPE"):
                assert len(parts) >= 3 and re.fullmatch(NAME, parts[2]), "line %d: %r" % (n, line)
                if parts[1] == "TYPE":
                    assert parts[3] in ("counter", "gauge", "histogram", "summary", "untyped"), \
                        "line %d: %r" % (n, line)
                    assert parts[2] not in types, "line %d: second TYPE for %s" % (n, parts[2])
                    assert parts[2] not in seen_sample_of, "line %d: TYPE after samples" % n
                    types[parts[2]] = parts[3]
            continue
        m = SAMPLE.match(line)
        assert m, "line %d does not parse: %r" % (n, line)
        labels = {k: unescape(v) for k, v in LABEL_RE.findall(m.group(2) or "")}
        value = parse_value(m.group(3))
        name = m.group(1)
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        seen_sample_of.add(base if types.get(base) == "histogram" else name)
        samples.append((name, labels, value))
    # Histograms.
    series = {}
    for name, labels, value in samples:
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        if types.get(base) != "histogram" or base == name:
            continue
        key = (base, tuple(sorted((k, v) for k, v in labels.items() if k != "le")))
        h = series.setdefault(key, {"buckets": [], "count": None})
        if name.endswith("_bucket"):
            h["buckets"].append((parse_value(labels["le"]), value))
        elif name.endswith("_count"):
            h["count"] = value
    for key, h in series.items():
        b = h["buckets"]
        assert b and math.isinf(b[-1][0]), "%s: no +Inf bucket" % (key,)
        for (le0, c0), (le1, c1) in zip(b, b[1:]):
            assert le1 > le0 and c1 >= c0, "%s: buckets not cumulative" % (key,)
        assert h["count"] == b[-1][1], "%s: _count != +Inf bucket" % (key,)
    return {"types": types, "samples": samples}


def total(ex, name, **match):
    return sum(v for n, labels, v in ex["samples"]
               if n == name and all(labels.get(k) == w for k, w in match.items()))


class MetricsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ciuic-metrics-")
        cls.cdir = os.path.join(cls.tmp, "cluster")
        cls.env = dict(os.environ, CIUIC_CLUSTER=os.path.join(cls.cdir, "cluster.conf"))
        for var in ("CIUIC_JOBID", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"):
            cls.env.pop(var, None)
        ciuic("cluster", "up", cls.cdir, "--timeout", "60", env=cls.env)
        # The workload: 6 files written, one read back, all as job JOB.
        cls.job_env = dict(cls.env, CIUIC_JOBID=JOB)
        src = os.path.join(cls.tmp, "src")
        os.makedirs(src)
        cls.files, cls.written = 6, 0
        for i in range(cls.files):
            data = os.urandom((i + 1) * 300_000)
            with open(os.path.join(src, "f%d" % i), "wb") as f:
                f.write(data)
            cls.written += len(data)
        ciuic("mkdir", "-p", "/obs", env=cls.job_env)
        ciuic("put", "-r", src, "/obs/", env=cls.job_env)
        cls.read = 6 * 300_000
        ciuic("get", "/obs/src/f5", os.path.join(cls.tmp, "f5.out"), env=cls.job_env)

    @classmethod
    def tearDownClass(cls):
        subprocess.run([os.path.join(BIN, "ciuic"), "cluster", "down", cls.cdir],
                       capture_output=True, env=cls.env, timeout=60)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def endpoints(self):
        run = os.path.join(self.cdir, "run")
        out = {}
        for name in sorted(os.listdir(run)):
            if name.endswith(".metrics_port"):
                with open(os.path.join(run, name)) as f:
                    out[name[:-len(".metrics_port")]] = int(f.read().strip())
        return out

    def scrape(self, port, path="/metrics"):
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=10) as r:
            self.assertEqual(r.status, 200)
            self.assertTrue(r.headers["Content-Type"].startswith("text/plain; version=0.0.4"))
            return r.read().decode()

    def test_every_server_serves_parseable_metrics_that_match_the_workload(self):
        eps = self.endpoints()
        self.assertEqual(sorted(eps), ["mds", "oss0", "oss1"])
        scraped = {name: parse_exposition(self.scrape(port)) for name, port in eps.items()}
        mds = scraped["mds"]
        osses = [scraped["oss0"], scraped["oss1"]]
        for name, ex in scraped.items():
            self.assertEqual(ex["types"].get("ciuic_rpc_latency_seconds"), "histogram", name)
            self.assertEqual(ex["types"].get("ciuic_rpc_requests_total"), "counter", name)
            self.assertGreaterEqual(total(ex, "ciuic_rpc_connections_open"), 0)
        # MDS: at least one namespace op per file, all of them under the job.
        self.assertGreaterEqual(total(mds, "ciuic_job_ops_total", job=JOB), self.files)
        self.assertGreaterEqual(total(mds, "ciuic_rpc_requests_total"), self.files)
        self.assertIn("ciuic_mds_sessions", mds["types"])
        self.assertGreater(total(mds, "ciuic_mds_store", property="estimate_num_keys"), 0)
        self.assertGreaterEqual(total(mds, "ciuic_rpc_latency_seconds_count"), self.files)
        # OSSes: every byte written lands on some OST and is accounted to the job.
        ost_written = sum(total(ex, "ciuic_ost_write_bytes_total") for ex in osses)
        job_written = sum(total(ex, "ciuic_job_write_bytes_total", job=JOB) for ex in osses)
        job_read = sum(total(ex, "ciuic_job_read_bytes_total", job=JOB) for ex in osses)
        writes = sum(total(ex, "ciuic_ost_ops_total", op="write") for ex in osses)
        self.assertGreaterEqual(ost_written, self.written)
        self.assertGreaterEqual(job_written, self.written)
        self.assertGreaterEqual(job_read, self.read)
        self.assertGreaterEqual(writes, self.files)
        self.assertGreaterEqual(
            sum(total(ex, "ciuic_rpc_request_bytes_total", op="Write") for ex in osses),
            self.written)
        osts = set()
        for ex in osses:
            for n, labels, v in ex["samples"]:
                if n == "ciuic_ost_capacity_bytes":
                    self.assertGreater(v, 0)
                    osts.add(labels["ost"])
        self.assertEqual(osts, {"0", "1", "2", "3"})
        # The label appears as a job label of labelled series.
        self.assertTrue(any(labels.get("job") == JOB for ex in osses
                            for _, labels, _ in ex["samples"]))

    def test_http_errors_are_clean(self):
        port = self.endpoints()["oss0"]
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen("http://127.0.0.1:%d/nothing" % port, timeout=10)
        self.assertEqual(e.exception.code, 404)
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, data=b"x", timeout=10)
        self.assertEqual(e.exception.code, 405)
        self.scrape(port)  # still serving

    def test_cluster_status_lists_the_metrics_urls(self):
        out = ciuic("cluster", "status", self.cdir, env=self.env).stdout.decode()
        for name, port in self.endpoints().items():
            self.assertIn("http://127.0.0.1:%d/metrics" % port, out)

    def test_top_once_shows_the_job_and_every_ost(self):
        r = ciuic("top", "--once", "--interval", "0.3", self.cdir, env=self.env)
        out = r.stdout.decode()
        self.assertIn("3 server(s) answered", out)
        job_lines = [l for l in out.splitlines() if l.startswith(JOB)]
        self.assertEqual(len(job_lines), 1, out)
        fields = job_lines[0].split()
        # JOB OPS/s READ-MB/s WRITE-MB/s OPS READ-MB WRITE-MB
        self.assertGreaterEqual(float(fields[4]), self.files)
        self.assertGreaterEqual(float(fields[6]), self.written / 1e6 - 0.1)
        ost_rows = [l.split() for l in out.splitlines() if re.match(r"^\s+[0-3] ", l)]
        self.assertEqual(sorted(r[0] for r in ost_rows), ["0", "1", "2", "3"], out)
        # By --url too, and a clear error without endpoints.
        port = self.endpoints()["oss1"]
        r = ciuic("top", "--once", "--interval", "0.2", "--url",
                  "http://127.0.0.1:%d/metrics" % port, env=self.env)
        self.assertIn("1 server(s) answered", r.stdout.decode())
        r = ciuic("top", "--once", os.path.join(self.tmp, "nowhere"), env=self.env, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no metrics endpoints", r.stderr.decode())


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", required=True)
    args, rest = ap.parse_known_args()
    BIN = os.path.abspath(args.bin_dir)
    unittest.main(argv=[sys.argv[0], "-v"] + rest)
