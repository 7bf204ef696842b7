#!/usr/bin/python3
"""End-to-end smoke run of the real ciuic-benchmark binary: --quick with tiny sizes against a fresh
local cluster (started by the benchmark) and a local directory. Checks that every reported number is
present and positive, that the JSON has the documented schema, that bad options fail with one clear
line, and that nothing is left behind (cluster processes, network namespaces, temp dirs). Asserts no
timing."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

EXPECTED = ["seq_write_fpp", "seq_read_fpp", "seq_write_shared", "seq_read_shared", "rand_read_4k",
            "lat_read_4k_p50", "lat_read_4k_p99", "lat_read_4k_p999", "lat_stat_p50",
            "lat_stat_p99", "lat_create_p99", "meta_create_shared", "meta_stat_shared",
            "meta_readdir_shared", "meta_unlink_shared", "meta_all_shared", "meta_all_perclient",
            # CPU time and context switches per operation (bench/cpu_use.h)
            "rand_read_4k_cpu_us", "rand_read_4k_client_cpu_us", "rand_read_4k_other_cpu_us",
            "rand_read_4k_ctxsw", "meta_create_shared_cpu_us", "meta_stat_shared_client_cpu_us",
            "meta_unlink_perclient_ctxsw"]


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def run(bench, args, timeout):
    return subprocess.run([bench] + args, capture_output=True, text=True, timeout=timeout)


def check_errors(bench):
    cases = [
        (["--phases", "seq,warp"], "unknown phase 'warp'"),
        (["--target", "path:/nonexistent/ciuic-e2e"], "not an existing directory"),
        (["--target", "local:"], "needs a directory"),
        (["--tier-size", "5M"], "--tier-size must be a multiple of 8M"),
    ]
    for args, want in cases:
        p = run(bench, args, 30)
        if p.returncode != 2:
            fail(f"{args}: exit {p.returncode}, expected 2; stderr: {p.stderr}")
        lines = [l for l in p.stderr.splitlines() if l.strip()]
        if len(lines) != 1 or want not in lines[0]:
            fail(f"{args}: expected one line with '{want}', got: {p.stderr!r}")


def netns_list():
    p = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return set(l.split()[0] for l in p.stdout.splitlines() if l.strip())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", required=True)
    a = ap.parse_args()
    bench = os.path.join(a.bin_dir, "ciuic-benchmark")
    check_errors(bench)
    root = os.geteuid() == 0
    ns_before = netns_list() if root else set()
    with tempfile.TemporaryDirectory(prefix="ciuic-bench-e2e-") as tmp:
        out = os.path.join(tmp, "out.json")
        charts = os.path.join(tmp, "charts")
        work = os.path.join(tmp, "work")
        os.makedirs(work)
        args = ["--quick", "--no-progress", "--size", "32M", "--rand-file", "16M",
                "--rand-seconds", "0.5", "--latency-ops", "50", "--meta-files", "100",
                "--phases", "seq,rand,latency,meta,scaling,tier,cache", "--tier-size", "16M",
                "--cache-size", "8M",
                "--tier-s3-samples", "0",  # the S3 part: test_bench_tier_s3.py
                "--scaling-oss", "1,2", "--scaling-clients", "1,2", "--scaling-per-oss", "4M",
                "--scaling-mbit", "400",
                "--target", "local:" + os.path.join(tmp, "local"), "--target", "ciuic",
                "--json", out, "--charts", charts, "--work-dir", work]
        p = run(bench, args, 240)
        sys.stdout.write(p.stdout)
        if p.returncode != 0:
            fail(f"exit {p.returncode}: {p.stderr}")
        doc = json.load(open(out))
        if doc.get("schema") != "ciuic-benchmark/1":
            fail("schema field")
        for key in ("config", "limits", "targets", "results", "skipped", "notes"):
            if key not in doc:
                fail(f"no '{key}' in JSON")
        if doc["targets"] != ["local", "ciuic"]:
            fail(f"targets {doc['targets']}")
        got = {}
        for r in doc["results"]:
            for key in ("phase", "name", "target", "unit"):
                if not isinstance(r.get(key), str) or not r[key]:
                    fail(f"result without {key}: {r}")
            if not isinstance(r.get("higher_is_better"), bool):
                fail(f"result without higher_is_better: {r}")
            # A hit ratio of 0 is a measurement (LRU over a shuffled order can miss everything).
            zero_ok = r["name"].startswith("cache_epoch") and "_hits_" in r["name"]
            # So is CPU time in clock ticks, or no context switch, over a short --quick step.
            zero_ok = zero_ok or r["name"].endswith(("_cpu_us", "_ctxsw"))
            for key in ("value", "min", "median", "max"):
                if not isinstance(r.get(key), (int, float)) or not (r[key] > 0 or
                                                                    (zero_ok and r[key] == 0)):
                    fail(f"{r['name']} on {r['target']}: {key} = {r.get(key)} is not positive")
            if not r["runs"] or not all(v > 0 or (zero_ok and v == 0) for v in r["runs"]):
                fail(f"{r['name']}: runs {r['runs']}")
            got[(r["name"], r["target"])] = r
        for t in ("local", "ciuic"):
            for name in EXPECTED:
                if (name, t) not in got:
                    fail(f"{name} on {t} missing")
        # Rings (ciuic only): through memory shared with the co-located OSSes every IO went
        # through it (the OSSes' counters say so: no copy), through ordinary memory none did.
        for name, share in (("seq_write_ring", 1.0), ("seq_read_ring", 1.0),
                            ("rand_read_4k_ring", 1.0), ("seq_write_async", 0.0),
                            ("seq_read_async", 0.0), ("rand_read_4k", 0.0)):
            r = got.get((name, "ciuic"))
            if r is None:
                fail(f"{name} on ciuic missing")
            if r.get("shm_share") != share:
                fail(f"{name}: shm_share {r.get('shm_share')}, expected {share}")
            if r.get("copies_per_byte") is None:
                fail(f"{name}: no copies_per_byte")
        # The tier phase (ciuic only): archive, the store's own GETs, release and restore; each
        # read was checked byte for byte against what was written.
        for name in ("tier_read_hot", "tier_archive", "tier_store_get", "tier_read_restore",
                     "tier_restore_vs_store"):
            if (name, "ciuic") not in got:
                fail(f"{name} missing")
        # The cache phase: the node cache's fill and hits against the local disk, and 8 clients
        # of one machine reading one file at once fetching it from the OSTs once.
        for name, target in (("cache_fill", "ciuic"), ("cache_hit_seq", "ciuic"),
                             ("local_seq", "local"), ("cache_hit_rand_4k", "ciuic"),
                             ("local_rand_4k", "local"), ("cache_ranks8_ost_bytes", "ciuic"),
                             ("nocache_ranks8_ost_bytes", "ciuic"),
                             ("cache_epoch2_hits_plan", "ciuic"), ("cache_epoch2_hits_lru", "ciuic")):
            if (name, target) not in got:
                fail(f"{name} on {target} missing")
        if got[("cache_ranks8_ost_bytes", "ciuic")]["value"] > 1.1:
            fail("8 clients through the node cache read %.2f times the file from the OSTs"
                 % got[("cache_ranks8_ost_bytes", "ciuic")]["value"])
        if got[("nocache_ranks8_ost_bytes", "ciuic")]["value"] < 7.9:
            fail("8 clients without the cache read only %.2f times the file from the OSTs"
                 % got[("nocache_ranks8_ost_bytes", "ciuic")]["value"])
        for k, v in doc["limits"].items():
            if not v > 0:
                fail(f"limit {k} = {v}")
        if root:
            for name in ("scaling_read_oss1", "scaling_read_oss2", "scaling_eff_oss2",
                         "scaling_read_clients2", "scaling_eff_max"):
                if (name, "ciuic") not in got:
                    fail(f"{name} missing (running as root)")
            if not os.path.exists(os.path.join(charts, "throughput_vs_oss.png")):
                fail("no throughput_vs_oss.png")
            left = netns_list() - ns_before
            if left:
                fail(f"network namespaces left behind: {left}")
        else:
            reasons = [s["reason"] for s in doc["skipped"] if s["phase"] == "scaling"]
            if not reasons or "needs root" not in reasons[0]:
                fail(f"scaling not skipped for lack of root: {doc['skipped']}")
        if os.path.exists(os.path.join(charts, "latency_read_4k.png")) is False and \
                os.path.exists("/usr/bin/gnuplot"):
            fail("no latency_read_4k.png")
        if os.listdir(work):
            fail(f"temp data left in the work dir: {os.listdir(work)}")
        if "target" not in p.stdout or "seq read GB/s" not in p.stdout:
            fail("no table on stdout")
    print("OK")


if __name__ == "__main__":
    main()
