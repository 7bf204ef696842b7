#!/usr/bin/python3
"""ciuic-benchmark, tier phase, S3 part (issue 14 item 5): a data set linked from S3 read by
CiuicDataLoader against torch's DataLoader over a FUSE S3 mount of the same bucket.

    /usr/bin/python3 bench/tier_s3.py --cluster FILE --bin-dir DIR --local-dir DIR --json OUT
        [--quick] [--samples N] [--sample-size BYTES] [--workers W] [--mount DIR]

(PYTHONPATH must reach <build>/python.) Starts npm's s3rver on 127.0.0.1 (tests/s3), PUTs N
sample files into one bucket (10 class prefixes), writes the same samples into ciuic directly,
then, with the page cache dropped before each epoch (when root):
  tier_s3_link          `ciuic repo link DIR s3://bucket/data`, timed alone
  tier_s3_epoch1/ciuic  CiuicDataLoader's first epoch over the linked directory (listing and
                        layout resolution included: the data set is built inside the timing)
  tier_s3_epoch2/ciuic  its second epoch (the same data set, now on the OSTs)
  tier_s3_hot/ciuic     the same loader over the samples written into ciuic directly (the
                        mean of one epoch before epoch 2 and one after it)
  tier_s3_epoch1/s3fs   torch DataLoader over an s3fs mount of the bucket (listing included)
and the ratios epoch1 ciuic / s3fs (issue: >= 3x), the same with the link's time added, and
epoch2 / hot (issue: >= 0.9). Each figure in samples/s and (the *_mbs metrics) MB/s.
Every epoch's samples are checked: count, total bytes and the sample ids each carries.
Writes {"phase": "tier", "results": [...], "notes": [...], "skipped": [...]}: without s3rver
the whole part is skipped, without s3fs or /dev/fuse the s3fs epoch; one line each.
Exits non-zero with one line on stderr on failure.
"""

import argparse
import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np

CLASSES = 10
BUCKET = "bench"
PREFIX = "data"


def fail(msg):
    print(f"tier_s3: {msg}", file=sys.stderr)
    sys.exit(1)


def drop_caches():
    try:
        subprocess.run(["sync"], check=False, timeout=120)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def die_with_parent():
    # s3rver must not outlive this script, even when it is killed.
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def start_s3rver(s3rver, data_dir, log_path):
    """Returns (process, endpoint)."""
    log = open(log_path, "w+")
    p = subprocess.Popen(["node", "--openssl-legacy-provider", s3rver, "-d", data_dir, "-a",
                          "127.0.0.1", "-p", "0", "--configure-bucket", BUCKET],
                         stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
    for _ in range(600):
        log.seek(0)
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", log.read())
        if m:
            return p, f"http://127.0.0.1:{m.group(1)}"
        if p.poll() is not None:
            break
        time.sleep(0.1)
    p.kill()
    p.wait()
    log.seek(0)
    fail("s3rver did not start: " + " ".join(log.read().split()[-20:]))


class Samples:
    """Sample i: CLASSES prefixes, `size` bytes, the first 8 its id (checked on every read)."""

    def __init__(self, n, size):
        self.n = n
        self.size = size
        self.block = np.random.default_rng(1).integers(0, 256, max(2 * size, 1 << 20),
                                                       dtype=np.uint8).tobytes()

    def key(self, i):
        return f"class{i % CLASSES}/{i:07d}.bin"

    def data(self, i):
        start = (i * 7919) % (len(self.block) - self.size)
        return i.to_bytes(8, "little") + self.block[start:start + self.size - 8]


def collate(batch):
    return [b for b, _ in batch], [lab for _, lab in batch]


def run_epoch(loader, n, size, what):
    """One pass; checks what came back. Returns seconds."""
    got = 0
    nbytes = 0
    ids = 0
    t0 = time.perf_counter()
    for data, _ in loader:
        for b in data:
            got += 1
            nbytes += len(b)
            ids += int.from_bytes(bytes(b[:8]), "little")
    secs = time.perf_counter() - t0
    if got != n or nbytes != n * size or ids != n * (n - 1) // 2:
        fail(f"{what}: the epoch gave {got} samples, {nbytes} bytes, id sum {ids}; expected "
             f"{n}, {n * size}, {n * (n - 1) // 2}")
    return secs


class MountFiles:
    """torch Dataset: one file per sample under a directory (as ImageFolder reads)."""

    def __init__(self, root):
        self.items = []
        for cls in sorted(os.listdir(root)):
            for name in sorted(os.listdir(os.path.join(root, cls))):
                self.items.append((os.path.join(root, cls, name), int(cls[5:])))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        path, label = self.items[i]
        with open(path, "rb") as f:
            return f.read(), label


def s3fs_problem():
    """Why s3fs cannot be used here, or None."""
    if shutil.which("s3fs") is None:
        return "s3fs is not installed (Debian package s3fs; scripts/install-deps.sh)"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse on this machine"
    if os.geteuid() != 0 and shutil.which("fusermount") is None:
        return "not root and no fusermount"
    return None


def unmount(mnt):
    for cmd in (["fusermount", "-u", mnt], ["umount", "-l", mnt]):
        if not os.path.ismount(mnt):
            return
        subprocess.run(cmd, capture_output=True, timeout=60, check=False)


def mount_s3fs(endpoint, mnt, work):
    """Mounts s3://BUCKET/PREFIX at mnt; returns None or why it failed (one line)."""
    passwd = os.path.join(work, "s3fs.passwd")
    with open(passwd, "w") as f:
        f.write("S3RVER:S3RVER\n")  # s3rver accepts this key and checks no signature
    os.chmod(passwd, 0o600)
    os.makedirs(mnt, exist_ok=True)
    log = os.path.join(work, "s3fs.log")
    r = subprocess.run(["s3fs", f"{BUCKET}:/{PREFIX}", mnt, "-o", f"url={endpoint}", "-o",
                        "use_path_request_style", "-o", f"passwd_file={passwd}", "-o",
                        "endpoint=us-east-1", "-o", "dbglevel=warn", "-o", f"logfile={log}"],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        return f"s3fs exited with {r.returncode}: {(r.stderr or r.stdout).strip()[-200:]}"
    for _ in range(200):
        if os.path.ismount(mnt):
            return None
        time.sleep(0.1)
    return "s3fs did not mount in 20 s"


def ciuic_rmtree(client, path):
    if not client.exists(path):
        return
    for name, is_dir, _ in client.scandir(path):
        if is_dir:
            ciuic_rmtree(client, f"{path}/{name}")
        else:
            client.remove(f"{path}/{name}")
    client.rmdir(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--bin-dir", required=True, help="where the ciuic CLI is")
    ap.add_argument("--local-dir", required=True, help="an empty work directory")
    ap.add_argument("--json", required=True)
    ap.add_argument("--quick", action="store_true", help="a small data set, well under a minute")
    ap.add_argument("--samples", type=int, default=0, help="default 4000 (200 with --quick)")
    ap.add_argument("--sample-size", type=int, default=100 << 10, help="bytes per sample")
    ap.add_argument("--workers", type=int, default=4, help="loader workers, both loaders")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--restore-ahead", type=int, default=16,
                    help="CiuicDataLoader restore_ahead when link left the files released")
    ap.add_argument("--mount", default="", help="s3fs mount point (default under --local-dir)")
    ap.add_argument("--s3rver", default="", help="s3rver.js (default tests/s3 of this tree)")
    args = ap.parse_args()
    n = args.samples or (200 if args.quick else 4000)
    size = args.sample_size
    if n < 1 or size < 16:
        fail("--samples must be >= 1 and --sample-size >= 16")
    results, notes, skipped = [], [], []

    def result(name, target, value, unit, higher=True):
        results.append({"name": name, "target": target, "value": float(value), "unit": unit,
                        "higher_is_better": higher})

    def write_json():
        with open(args.json, "w") as f:
            json.dump({"phase": "tier", "results": results, "notes": notes, "skipped": skipped},
                      f, indent=1)

    s3rver = args.s3rver or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                         "tests", "s3", "node_modules", "s3rver", "bin",
                                         "s3rver.js")
    if not os.path.exists(s3rver) or shutil.which("node") is None:
        skipped.append({"target": "ciuic", "reason": "S3 loader comparison: s3rver is not "
                        "installed (scripts/install-deps.sh installs it in tests/s3)"})
        write_json()
        return

    try:
        import torch
        from torch.utils.data import DataLoader

        import ciuic
    except ImportError as e:
        fail(f"cannot import {e.name} (PYTHONPATH must reach <build>/python)")

    work = tempfile.mkdtemp(prefix="tier-s3-", dir=args.local_dir)
    mnt = args.mount or os.path.join(work, "s3fs-mnt")
    base = f"/ciuic-bench-tier-s3-{os.getpid()}"
    linked, direct = f"{base}/linked", f"{base}/direct"
    s3 = None
    client = ciuic.connect(args.cluster)
    try:
        os.makedirs(os.path.join(work, "s3data"))
        s3, endpoint = start_s3rver(s3rver, os.path.join(work, "s3data"),
                                    os.path.join(work, "s3rver.log"))
        samples = Samples(n, size)
        mb = n * size / 1e6

        # The bucket: plain HTTP PUTs (s3rver checks no signature), 8 in flight.
        def put(i):
            req = urllib.request.Request(f"{endpoint}/{BUCKET}/{PREFIX}/{samples.key(i)}",
                                         data=samples.data(i), method="PUT")
            with urllib.request.urlopen(req, timeout=60) as r:
                r.read()

        t0 = time.perf_counter()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(put, range(n)))
        notes.append(f"S3 data set: {n} objects of {size} bytes ({mb:.0f} MB) in {CLASSES} "
                     f"prefixes of s3rver on 127.0.0.1, PUT in {time.perf_counter() - t0:.1f} s")

        # The same samples written into ciuic directly (each fsynced, as a stored data set is).
        client.makedirs(base)
        for c in range(CLASSES):
            client.makedirs(f"{direct}/class{c}")

        def store(i):
            with client.open(f"{direct}/{samples.key(i)}", "wb") as g:
                g.write(samples.data(i))
                g.fsync()

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(store, range(n)))

        # The link, through the CLI as a user runs it.
        env = dict(os.environ, CIUIC_CLUSTER=args.cluster, AWS_ENDPOINT_URL_S3=endpoint,
                   AWS_ACCESS_KEY_ID="S3RVER", AWS_SECRET_ACCESS_KEY="S3RVER",
                   AWS_REGION="us-east-1")
        env.pop("AWS_PROFILE", None)
        drop_caches()
        t0 = time.perf_counter()
        # The endpoint goes in the URL: the OSSes, which load the bytes, were started before
        # s3rver and do not have it in their environment.
        r = subprocess.run([os.path.join(args.bin_dir, "ciuic"), "repo", "link", linked,
                            f"s3://{BUCKET}/{PREFIX}?endpoint={endpoint}"], capture_output=True,
                           text=True, env=env, timeout=3600)
        link_s = time.perf_counter() - t0
        if r.returncode != 0:
            fail(f"ciuic repo link failed ({r.returncode}): {r.stderr.strip()}")
        result("tier_s3_link", "ciuic", link_s, "s", higher=False)
        state = client.hsm_state(f"{linked}/{samples.key(0)}")
        lazy = state == "released"
        how = (f"the files were left released (bytes load on first read): CiuicDataLoader "
               f"restore_ahead={args.restore_ahead} in epoch 1" if lazy else
               f"the files' HSM state after it is '{state}', not released: the link copied every "
               "byte")
        notes.append(f"`ciuic repo link` of {n} objects: {link_s:.2f} s ({r.stdout.strip()}); "
                     + how)

        W, B = args.workers, args.batch_size
        budget = 256 << 20

        def ciuic_loader(ds, restore_ahead=0):
            return ciuic.CiuicDataLoader(ds, batch_size=B, shuffle=True, num_workers=W,
                                         collate_fn=collate, seed=0, prefetch_bytes=budget,
                                         restore_ahead=restore_ahead)

        def rates(name, target, secs):
            result(name, target, n / secs, "samples/s")
            result(name + "_mbs", target, mb / secs, "MB/s")
            return n / secs

        dropped = drop_caches()
        notes.append("page cache dropped before every epoch" if dropped else
                     "page cache NOT dropped (needs root): epochs may read cached bytes")

        # CiuicDataLoader, first epoch: building the data set (listing, layouts) is part of it.
        t0 = time.perf_counter()
        ds = ciuic.DirectoryDataset(client, linked)
        loader = ciuic_loader(ds, args.restore_ahead if lazy else 0)
        build_s = time.perf_counter() - t0
        secs = build_s + run_epoch(loader, n, size, "CiuicDataLoader epoch 1")
        e1 = rates("tier_s3_epoch1", "ciuic", secs)
        e1_link = n / (secs + link_s)
        notes.append(f"CiuicDataLoader epoch 1: {secs:.2f} s, of which {build_s:.2f} s building "
                     "the data set")
        # The reference for epoch 2: the same samples written into ciuic (data set built
        # outside the timing, as epoch 2 reuses its own), one epoch before and one after it:
        # their mean cancels a drift of the machine's speed during the three.
        ds_direct = ciuic.DirectoryDataset(client, direct)

        def hot_epoch():
            drop_caches()
            return run_epoch(ciuic_loader(ds_direct), n, size, "CiuicDataLoader hot")

        hot_a = hot_epoch()
        drop_caches()
        e2_s = run_epoch(ciuic_loader(ds), n, size, "CiuicDataLoader epoch 2")
        e2 = rates("tier_s3_epoch2", "ciuic", e2_s)
        hot_b = hot_epoch()
        hot = rates("tier_s3_hot", "ciuic", (hot_a + hot_b) / 2)
        notes.append(f"CiuicDataLoader epoch 2: {e2_s:.2f} s; hot, before and after it: "
                     f"{hot_a:.2f} s and {hot_b:.2f} s")
        result("tier_s3_epoch2_vs_hot", "ciuic", e2 / hot, "ratio")

        # torch over s3fs: listing the mount is part of its first epoch, as building is above.
        why = s3fs_problem()
        if why is None:
            why = mount_s3fs(endpoint, mnt, work)
        if why is not None:
            skipped.append({"target": "s3fs", "reason": f"torch over an s3fs mount: {why}"})
        else:
            try:
                drop_caches()
                t0 = time.perf_counter()
                tds = MountFiles(mnt)
                tl = DataLoader(tds, batch_size=B, shuffle=True, num_workers=W,
                                collate_fn=collate, generator=torch.Generator().manual_seed(0))
                list_s = time.perf_counter() - t0
                secs = list_s + run_epoch(tl, n, size, "torch DataLoader over s3fs")
                t1 = rates("tier_s3_epoch1", "s3fs", secs)
                notes.append(f"torch DataLoader over s3fs (s3fs {s3fs_version()}, default "
                             f"options, no local cache): {secs:.2f} s, of which {list_s:.2f} s "
                             "listing the mount")
            finally:
                unmount(mnt)
            result("tier_s3_epoch1_vs_s3fs", "ciuic", e1 / t1, "ratio")
            result("tier_s3_epoch1_with_link_vs_s3fs", "ciuic", e1_link / t1, "ratio")
        notes.append(f"both loaders: batch size {B}, {W} workers, shuffled; CiuicDataLoader "
                     f"budget {budget >> 20} MiB")
    finally:
        unmount(mnt)
        # Before s3rver stops: removing a linked file may remove or check its object too.
        try:
            ciuic_rmtree(client, base)
        except OSError as e:
            notes.append(f"cleanup on ciuic incomplete: {e}")
        if s3 is not None:
            s3.kill()
            s3.wait()
        shutil.rmtree(work, ignore_errors=True)
    write_json()


def s3fs_version():
    r = subprocess.run(["s3fs", "--version"], capture_output=True, text=True, check=False)
    m = re.search(r"V(\d+(\.\d+)+)", r.stdout)
    return m.group(1) if m else "?"


if __name__ == "__main__":
    try:
        main()
    except OSError as e:
        fail(str(e))
    except KeyboardInterrupt:
        fail("interrupted")
    except Exception as e:  # noqa: BLE001  one line, not a traceback
        fail(f"{type(e).__name__}: {e}")
