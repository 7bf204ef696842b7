#!/usr/bin/python3
"""End-to-end run of ciuic-benchmark's loader phase (bench/phase_loader.py) through the real
binary, --quick, against the fresh local cluster it starts: every row present and positive,
the ImageFolder rows (issue 19) included. Release tree only (it needs the Python module).
Asserts no timing."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROWS = ["torch DataLoader, local files", "CiuicDataLoader, ciuic files",
        "CiuicDataLoader, ciuic tar shards", "torch DataLoader, ImageFolder JPEG, local files",
        "decode-bound ceiling", "CiuicDataLoader, ImageFolder-shaped JPEG on ciuic",
        "CiuicDataLoader ImageFolder on ciuic / torch on local disk"]


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", required=True)
    a = ap.parse_args()
    bench = os.path.join(a.bin_dir, "ciuic-benchmark")
    with tempfile.TemporaryDirectory(prefix="ciuic-bench-loader-") as tmp:
        out = os.path.join(tmp, "out.json")
        work = os.path.join(tmp, "work")
        os.makedirs(work)
        p = subprocess.run([bench, "--quick", "--no-progress", "--phases", "loader", "--json",
                            out, "--work-dir", work], capture_output=True, text=True,
                           timeout=600)
        sys.stdout.write(p.stdout)
        if p.returncode != 0:
            fail(f"exit {p.returncode}: {p.stderr}")
        doc = json.load(open(out))
        names = []
        for r in doc["results"]:
            if r["phase"] != "loader":
                continue
            names.append(r["name"])
            if not isinstance(r.get("value"), (int, float)) or r["value"] <= 0:
                fail(f"{r['name']}: value {r.get('value')} is not positive")
        for row in ROWS:
            if not any(row in n for n in names):
                fail(f"no row '{row}' in {names}")
    print("ok")


if __name__ == "__main__":
    main()
