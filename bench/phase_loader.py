#!/usr/bin/python3
"""ciuic-benchmark phase "loader": CiuicDataLoader on ciuic against torch's DataLoader on the
local disk (issue 4).

    /usr/bin/python3 bench/phase_loader.py --cluster FILE --local-dir DIR --json OUT [--quick]

(PYTHONPATH must reach <build>/python.) Generates N samples of 16-128 KiB in K class
directories, stores them one file per sample under DIR and on ciuic, and packs them into tar
shards on both. Then, one shuffled epoch each with caches dropped before it (when root):
  torch DataLoader, local files        | CiuicDataLoader, ciuic files   (gain of the engine)
  torch DataLoader, local shards       | CiuicDataLoader, ciuic shards  (gain of packing)
then torchvision's ImageFolder on real JPEG files (generated with PIL, one twentieth of N,
decoded in the transform): torch's DataLoader over local files (cold, and again with every file
in the page cache: the decode-bound ceiling) against CiuicDataLoader over the same images on
ciuic as an ImageFolder-shaped data set of ciuic:// paths, same transform and workers;
and a DLIO-style simulated accelerator: a fixed compute time per batch (sleep), utilization =
compute / (compute + time waiting for the next batch), at a compute time where the torch
loader's utilization is below 60% (searched for: shortened until torch measures below 60%).
Writes {"phase": "loader", "results": [...], "notes": [...]}.
Exits non-zero with one line on stderr on failure.
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np


def fail(msg):
    print(f"phase_loader: {msg}", file=sys.stderr)
    sys.exit(1)


def drop_caches(notes):
    try:
        subprocess.run(["sync"], check=False, timeout=120)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError as e:
        if not any("drop_caches" in n for n in notes):
            notes.append(f"could not drop caches ({e.strerror}): local reads may hit the page "
                         "cache")
        return False


class LocalFiles:
    """torch Dataset: one file per sample on the local disk (as ImageFolder reads)."""

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


class LocalShards:
    """torch Dataset: samples read from local tar shards through their member indexes."""

    def __init__(self, root):
        import ciuic._ciuic as native
        self.items = []
        self.paths = []
        for name in sorted(n for n in os.listdir(root) if n.endswith(".tar")):
            path = os.path.join(root, name)
            with open(path + ".idx", "rb") as f:
                members = native.parse_index(f.read())
            k = len(self.paths)
            self.paths.append(path)
            for mname, off, size in members:
                self.items.append((k, off, size, int(mname.split("/")[0][5:])))
        self.fds = None

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        if self.fds is None:  # opened lazily in each worker
            self.fds = [os.open(p, os.O_RDONLY) for p in self.paths]
        k, off, size, label = self.items[i]
        return os.pread(self.fds[k], size, off), label


class ListedImages:
    """A data set in torchvision's DatasetFolder shape (samples, loader, transform) over images
    named by ciuic:// URLs: what CiuicDataLoader reads ahead without conversion (issue 19)."""

    def __init__(self, samples, loader, transform):
        self.samples, self.loader, self.transform = samples, loader, transform
        self.target_transform = None

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        path, target = self.samples[i]
        return self.transform(self.loader(path)), target


def to_tensor(img):
    """The transform of the ImageFolder rows: the decoded image as a uint8 tensor."""
    import torch
    return torch.from_numpy(np.array(img))


def generate_jpegs(root, n, classes, seed, side=160):
    """n JPEG images (smooth gradients and noise, as photos compress: 10-30 KiB each)."""
    from PIL import Image
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:side, 0:side]
    total = 0
    for c in range(classes):
        os.makedirs(os.path.join(root, f"class{c}"), exist_ok=True)
    for i in range(n):
        a, b, d = rng.integers(1, 6, 3)
        base = np.stack([(xx * a + yy * b) % 256, (xx * b + i) % 256, (yy * d) % 256], -1)
        noise = rng.integers(0, 48, (side, side, 3))
        img = Image.fromarray(((base + noise) % 256).astype(np.uint8))
        path = os.path.join(root, f"class{i % classes}", f"{i:06d}.jpg")
        img.save(path, format="JPEG", quality=90)
        total += os.path.getsize(path)
    return total


def collate(batch):
    return [b for b, _ in batch], [lab for _, lab in batch]


def run_epoch(loader, compute_s=0.0):
    """Returns (samples, seconds, seconds waiting for data)."""
    n = 0
    waited = 0.0
    t0 = time.perf_counter()
    it = iter(loader)
    while True:
        w0 = time.perf_counter()
        try:
            data, _ = next(it)
        except StopIteration:
            break
        waited += time.perf_counter() - w0
        n += len(data)
        if compute_s:
            time.sleep(compute_s)
    return n, time.perf_counter() - t0, waited


def generate(local, n, classes, seed):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(16 << 10, (128 << 10) + 1, n)
    block = rng.integers(0, 256, (256 << 10), dtype=np.uint8).tobytes()
    files = os.path.join(local, "files")
    for c in range(classes):
        os.makedirs(os.path.join(files, f"class{c}"), exist_ok=True)
    total = 0
    for i, size in enumerate(sizes):
        start = (i * 7919) % (len(block) - int(size))
        data = i.to_bytes(8, "little") + block[start:start + int(size) - 8]
        with open(os.path.join(files, f"class{i % classes}", f"{i:07d}.bin"), "wb") as f:
            f.write(data)
        total += len(data)
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--local-dir", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--quick", action="store_true", help="small data set, under 60 s")
    ap.add_argument("--samples", type=int, default=0, help="default 100000 (600 with --quick)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--budget-mib", type=int, default=256, help="CiuicDataLoader memory budget")
    ap.add_argument("--keep", action="store_true", help="keep the generated data")
    args = ap.parse_args()
    n = args.samples or (600 if args.quick else 100000)
    notes = []
    results = []

    try:
        import torch
        from torch.utils.data import DataLoader

        import ciuic
    except ImportError as e:
        fail(f"cannot import {e.name} (PYTHONPATH must reach <build>/python)")

    def result(name, target, value, unit, higher=True):
        results.append({"name": name, "target": target, "value": float(value), "unit": unit,
                        "higher_is_better": higher})

    client = ciuic.connect(args.cluster)
    local = os.path.join(args.local_dir, "phase_loader")
    remote = "/bench/phase_loader"
    shutil.rmtree(local, ignore_errors=True)
    os.makedirs(local)
    try:
        t0 = time.perf_counter()
        total = generate(local, n, 10, 1)
        notes.append(f"data set: {n} samples of 16-128 KiB ({total / 2**30:.2f} GiB), 10 classes; "
                     f"generated in {time.perf_counter() - t0:.1f} s")
        # ciuic copies: one file per sample, and shards.
        t0 = time.perf_counter()
        client.makedirs(remote)
        files = os.path.join(local, "files")
        jobs = []
        for cls in sorted(os.listdir(files)):
            client.makedirs(f"{remote}/files/{cls}")
            jobs += [(os.path.join(files, cls, name), f"{remote}/files/{cls}/{name}")
                     for name in sorted(os.listdir(os.path.join(files, cls)))]

        def upload(job):
            # Durable, as the local copies are (sync before every epoch): a data set is stored
            # once and read many times, and no epoch should pay for syncing what was just stored.
            with open(job[0], "rb") as f:
                data = f.read()
            with client.open(job[1], "wb") as g:  # releases the GIL: threads overlap
                g.write(data)
                g.fsync()

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(upload, jobs))
        ciuic.pack(client, files, f"{remote}/shards", 64 << 20)
        # Local shards: the same tar + index bytes.
        os.makedirs(os.path.join(local, "shards"))
        for name in client.listdir(f"{remote}/shards"):
            with open(os.path.join(local, "shards", name), "wb") as f:
                f.write(client.read_file(f"{remote}/shards/{name}"))
        notes.append(f"stored on ciuic (each file fsynced) and packed (`ciuic pack` fsyncs its "
                     f"shards) in {time.perf_counter() - t0:.1f} s")

        W = args.workers
        B = args.batch_size
        budget = args.budget_mib << 20

        def torch_loader(ds, workers=W):
            return DataLoader(ds, batch_size=B, shuffle=True, num_workers=workers,
                              collate_fn=collate, generator=torch.Generator().manual_seed(0))

        def ciuic_loader(ds, workers=W):
            return ciuic.CiuicDataLoader(ds, batch_size=B, shuffle=True, num_workers=workers,
                                         collate_fn=collate, seed=0, prefetch_bytes=budget)

        dropped = drop_caches(notes)
        if dropped:
            notes.append("page cache dropped (sync; echo 3 > /proc/sys/vm/drop_caches) before "
                         "every epoch")
        measures = {}

        def measure(key, make, compute_s=0.0):
            drop_caches(notes)
            loader = make()
            got, secs, waited = run_epoch(loader, compute_s)
            if got != n:
                fail(f"{key}: epoch yielded {got} samples, expected {n}")
            measures[key] = (got / secs, secs, waited, loader)
            return got / secs

        local_files = LocalFiles(files)
        local_shards = LocalShards(os.path.join(local, "shards"))
        ciuic_files = ciuic.DirectoryDataset(client, f"{remote}/files")
        ciuic_shards = ciuic.ShardDataset(client, f"{remote}/shards")

        t_files = measure("torch_files", lambda: torch_loader(local_files))
        c_files = measure("ciuic_files", lambda: ciuic_loader(ciuic_files))
        t_shards = measure("torch_shards", lambda: torch_loader(local_shards))
        c_shards = measure("ciuic_shards", lambda: ciuic_loader(ciuic_shards))
        if not args.quick:
            # torch's first epoch follows the data set's creation, when the disk may still be
            # settling: a second one later in the run, and the faster of the two is the baseline.
            t_files = max(t_files, measure("torch_files_2", lambda: torch_loader(local_files)))
        result(f"torch DataLoader, local files, {W} workers (best of "
               f"{1 if args.quick else 2} epochs)", "local disk", t_files, "samples/s")
        result(f"CiuicDataLoader, ciuic files, {W} workers", "ciuic", c_files, "samples/s")
        result(f"torch DataLoader, local tar shards, {W} workers", "local disk", t_shards,
               "samples/s")
        result(f"CiuicDataLoader, ciuic tar shards, {W} workers", "ciuic", c_shards, "samples/s")
        result("CiuicDataLoader shards on ciuic / torch files on local disk", "ratio",
               c_shards / t_files, "x")
        if not args.quick:
            t0_files = measure("torch_files_w0", lambda: torch_loader(local_files, 0))
            c0_shards = measure("ciuic_shards_w0", lambda: ciuic_loader(ciuic_shards, 0))
            result("torch DataLoader, local files, 0 workers", "local disk", t0_files,
                   "samples/s")
            result("CiuicDataLoader, ciuic tar shards, 0 workers", "ciuic", c0_shards,
                   "samples/s")
            result("CiuicDataLoader shards on ciuic / torch files on local disk, 0 workers",
                   "ratio", c0_shards / t0_files, "x")
            # The same engine with every sample over loopback TCP: what the shared-memory reads
            # (OSSes on this machine place samples in the loader's memory) add.
            tcp_client = ciuic.connect(args.cluster, shm_reads=False)
            tcp_shards = ciuic.ShardDataset(tcp_client, f"{remote}/shards")
            c0_tcp = measure("ciuic_shards_w0_tcp", lambda: ciuic_loader(tcp_shards, 0))
            result("CiuicDataLoader, ciuic tar shards, 0 workers, over TCP (shared-memory reads "
                   "off)", "ciuic", c0_tcp, "samples/s")

        # Simulated accelerator (DLIO-style): a fixed compute time per batch. The goal is
        # >= 90% for ciuic at a compute time where torch is below 60%, so the compute time is
        # found for torch first: start at half of torch's own time per batch and shorten it (x0.7,
        # at most 3 more tries) while torch still measures 60% or more (its workers keep reading
        # while a batch computes, so it measures above the ratio). Then ciuic at the same time.
        batches = (n + B - 1) // B

        def utilization(key, make, compute):
            measure(key, make, compute)
            _, secs, waited, _ = measures[key]
            busy = batches * compute
            return busy / (busy + waited)

        compute = 0.5 * B / t_files
        for attempt in range(1 if args.quick else 4):
            if attempt:
                compute *= 0.7
            torch_util = utilization("torch_files_sim", lambda: torch_loader(local_files),
                                     compute)
            if torch_util < 0.6:
                break
        ciuic_util = utilization("ciuic_shards_sim", lambda: ciuic_loader(ciuic_shards), compute)
        result(f"simulated utilization, torch local files, {compute * 1e3:.1f} ms/batch",
               "local disk", 100 * torch_util, "%")
        result(f"simulated utilization, CiuicDataLoader ciuic shards, {compute * 1e3:.1f} "
               "ms/batch", "ciuic", 100 * ciuic_util, "%")

        # torchvision ImageFolder on real JPEG files, decoded (PIL) in the workers: torch's
        # DataLoader over the local files (cold, and with every file in the page cache: the
        # decode-bound ceiling) against CiuicDataLoader over the same images on ciuic, given as
        # an ImageFolder-shaped data set of ciuic:// URLs (read ahead, decoded by the data
        # set's own loader). Same transform, workers and batch size.
        from torchvision.datasets import ImageFolder
        from torchvision.datasets.folder import default_loader
        n_img = max(64, n // 20)
        images = os.path.join(local, "images")
        t0 = time.perf_counter()
        img_bytes = generate_jpegs(images, n_img, 10, 2)
        img_jobs = []
        for cls in sorted(os.listdir(images)):
            client.makedirs(f"{remote}/images/{cls}")
            img_jobs += [(os.path.join(images, cls, name), f"{remote}/images/{cls}/{name}")
                         for name in sorted(os.listdir(os.path.join(images, cls)))]
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(upload, img_jobs))
        notes.append(f"ImageFolder rows: {n_img} JPEG images of 160x160 "
                     f"({img_bytes / n_img / 1024:.0f} KiB each on average), 10 classes, "
                     f"decoded by PIL in the transform; made and stored in "
                     f"{time.perf_counter() - t0:.1f} s")
        local_images = ImageFolder(images, transform=to_tensor)
        ciuic_images = ListedImages([("ciuic://" + dst, int(os.path.basename(
            os.path.dirname(src))[5:])) for src, dst in img_jobs], default_loader, to_tensor)

        def torch_images():
            return DataLoader(local_images, batch_size=B, shuffle=True, num_workers=W,
                              generator=torch.Generator().manual_seed(0))

        def ciuic_images_loader():
            return ciuic.CiuicDataLoader(ciuic_images, batch_size=B, shuffle=True,
                                         num_workers=W, seed=0, prefetch_bytes=budget,
                                         client=client)

        def measure_images(key, make, drop=True):
            if drop:
                drop_caches(notes)
            loader = make()
            got, secs, _ = run_epoch(loader)
            if got != n_img:
                fail(f"{key}: epoch yielded {got} images, expected {n_img}")
            return got / secs

        t_img = measure_images("torch_images", torch_images)
        c_img = measure_images("ciuic_images", ciuic_images_loader)
        run_epoch(torch_images())  # every image now in the page cache
        ceiling = measure_images("torch_images_cached", torch_images, drop=False)
        result(f"torch DataLoader, ImageFolder JPEG, local files, {W} workers", "local disk",
               t_img, "images/s")
        result(f"torch DataLoader, ImageFolder JPEG, local files in the page cache (decode-bound "
               f"ceiling), {W} workers", "local disk", ceiling, "images/s")
        result(f"CiuicDataLoader, ImageFolder-shaped JPEG on ciuic (ciuic:// paths), {W} "
               "workers", "ciuic", c_img, "images/s")
        result("CiuicDataLoader ImageFolder on ciuic / torch on local disk", "ratio",
               c_img / t_img, "x")
        result("CiuicDataLoader ImageFolder on ciuic / decode-bound ceiling", "ratio",
               c_img / ceiling, "x")

        stats = measures["ciuic_shards"][3].last_stats
        result("CiuicDataLoader peak buffered bytes (budget "
               f"{args.budget_mib} MiB)", "ciuic", stats["peak_buffered"] / 2**20, "MiB",
               higher=False)
        result("CiuicDataLoader shared sample memory in use (pages allocated; its limit is 2x "
               "the budget)", "ciuic", stats["pool_shared_bytes"] / 2**20, "MiB", higher=False)
        result("benchmark process peak RSS", "process",
               resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "MiB", higher=False)
        notes.append(f"batch size {B}; {W} workers; CiuicDataLoader budget {args.budget_mib} "
                     f"MiB, {len(ciuic_shards.sources)} shards of <= 64 MiB; "
                     "ciuic files epoch made "
                     f"{measures['ciuic_files'][3].last_stats['opens']} MDS opens (the data set "
                     "resolved each file's layout once when it was built)")
    finally:
        if not args.keep:
            shutil.rmtree(local, ignore_errors=True)
            try:
                for sub in ("files", "shards", "images"):
                    base = f"{remote}/{sub}"
                    if not client.exists(base):
                        continue
                    for name, is_dir, _ in client.scandir(base):
                        if is_dir:
                            for leaf in client.listdir(f"{base}/{name}"):
                                client.remove(f"{base}/{name}/{leaf}")
                            client.rmdir(f"{base}/{name}")
                        else:
                            client.remove(f"{base}/{name}")
                    client.rmdir(base)
            except OSError as e:
                notes.append(f"cleanup on ciuic incomplete: {e}")
    with open(args.json, "w") as f:
        json.dump({"phase": "loader", "results": results, "notes": notes}, f, indent=1)


if __name__ == "__main__":
    try:
        main()
    except OSError as e:
        fail(str(e))
    except KeyboardInterrupt:
        fail("interrupted")
    except Exception as e:  # noqa: BLE001  one line, not a traceback
        fail(f"{type(e).__name__}: {e}")
