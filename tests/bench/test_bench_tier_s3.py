#!/usr/bin/python3
"""End-to-end run of the tier phase's S3 part (bench/tier_s3.py) through the real ciuic-benchmark:
--quick with a tiny data set. Checks that its metrics are present and positive, that a part it
cannot run here (no s3fs, no /dev/fuse) is one "skipped" line rather than a failure, and that no
mount or temp data is left behind. Asserts no timing and no target ratio. Exits 77 (skipped)
without s3rver (tests/s3, scripts/install-deps.sh) or the Python module."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

CIUIC = ["tier_s3_link", "tier_s3_epoch1", "tier_s3_epoch1_mbs", "tier_s3_epoch2",
         "tier_s3_epoch2_mbs", "tier_s3_hot", "tier_s3_hot_mbs", "tier_s3_epoch2_vs_hot"]
S3FS = ["tier_s3_epoch1", "tier_s3_epoch1_mbs"]


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", required=True)
    a = ap.parse_args()
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    s3rver = os.path.join(src, "tests", "s3", "node_modules", "s3rver", "bin", "s3rver.js")
    if not os.path.exists(s3rver):
        print("SKIP: s3rver is not installed (scripts/install-deps.sh)")
        sys.exit(77)
    if not os.path.isdir(os.path.join(a.bin_dir, "..", "python", "ciuic")):
        print("SKIP: the Python module is not built")
        sys.exit(77)
    bench = os.path.join(a.bin_dir, "ciuic-benchmark")
    with tempfile.TemporaryDirectory(prefix="ciuic-bench-tier-s3-") as tmp:
        out = os.path.join(tmp, "out.json")
        work = os.path.join(tmp, "work")
        os.makedirs(work)
        p = subprocess.run([bench, "--quick", "--no-progress", "--phases", "tier", "--tier-size",
                            "8M", "--tier-s3-samples", "64", "--tier-s3-sample-size", "8K",
                            "--tier-s3-workers", "1", "--json", out, "--work-dir", work],
                           capture_output=True, text=True, timeout=280)
        sys.stdout.write(p.stdout)
        if p.returncode != 0:
            fail(f"exit {p.returncode}: {p.stderr}")
        doc = json.load(open(out))
        got = {(r["name"], r["target"]): r for r in doc["results"] if r["phase"] == "tier"}
        for (name, target), r in got.items():
            if not r["value"] > 0:
                fail(f"{name} on {target}: {r['value']} is not positive")
        for name in CIUIC:
            if (name, "ciuic") not in got:
                fail(f"{name} on ciuic missing")
        skipped = [s for s in doc["skipped"] if s["phase"] == "tier"]
        if (S3FS[0], "s3fs") in got:
            for name in S3FS:
                if (name, "s3fs") not in got:
                    fail(f"{name} on s3fs missing")
            for name in ("tier_s3_epoch1_vs_s3fs", "tier_s3_epoch1_with_link_vs_s3fs"):
                if (name, "ciuic") not in got:
                    fail(f"{name} missing")
        elif len(skipped) != 1 or skipped[0]["target"] != "s3fs" or "\n" in skipped[0]["reason"]:
            fail(f"no s3fs figures and not one skipped line for it: {skipped}")
        else:
            print("s3fs part skipped: " + skipped[0]["reason"])
        with open("/proc/mounts") as f:
            if work in f.read():
                fail("a mount under the work dir was left behind")
        if os.listdir(work):
            fail(f"temp data left in the work dir: {os.listdir(work)}")
    print("OK")


if __name__ == "__main__":
    main()
