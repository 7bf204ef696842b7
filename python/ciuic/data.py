"""Data sets on ciuic and CiuicDataLoader, a drop-in for torch.utils.data.DataLoader.

The loader computes each epoch's exact sample order (seeded, deterministic), splits it across
ranks, and hands it to the C++ PrefetchEngine, which reads ahead in exactly that order from all
OSTs at once within a memory budget. Worker processes (num_workers > 0) only run the user's
transform and collate_fn on bytes the parent already read: the client, its threads and sockets
stay in the parent, so fork is safe.
"""

import atexit
import io
import math
import multiprocessing
import os
import posixpath
import queue
import random
import re
import threading
import time
import warnings

import numpy as np

from . import _ciuic

try:  # CiuicDataLoader is a torch DataLoader where torch is installed (Debian's python3-torch)
    from torch.utils.data import DataLoader as _TorchDataLoader
except ImportError:  # pragma: no cover - the package itself works without torch
    _TorchDataLoader = object

__all__ = ["DirectoryDataset", "ShardDataset", "CiuicDataLoader", "epoch_order", "split_for_rank"]


class _Dataset:
    """Common part: sources (cluster paths), and per sample (source, offset, length, label, key).

    Sources are resolved once here, never per sample per epoch: shards are listed and their
    indexes read once (the engine keeps a shard open for its samples), sample files are resolved
    to (FID, layout, size) once, so reading one is a single OST read with no MDS round trip.
    A data set assumes its files do not change while it is used: a sample file removed or
    rewritten since raises an OSError (ESTALE); build the data set again to pick up changes.
    """

    keep_sources_open = True
    opener_threads = 2  # shards: opens are rare and reads async, two issuers suffice
    resolved = None  # _ciuic.ResolvedSources for one-file-per-sample data sets

    def __init__(self, client):
        self.client = client
        self.sources = []
        self.classes = []
        self.class_to_idx = {}
        self.source = np.zeros(0, dtype=np.int64)
        self.offset = np.zeros(0, dtype=np.int64)
        self.length = np.zeros(0, dtype=np.int64)
        self.labels = np.zeros(0, dtype=np.int64)
        self.names = []
        self.shard_of = np.zeros(0, dtype=np.int64)  # locality group of each sample

    def __len__(self):
        return len(self.names)

    def _finish(self, source, offset, length, labels, names, shard_of):
        self.source = np.asarray(source, dtype=np.int64)
        self.offset = np.asarray(offset, dtype=np.int64)
        self.length = np.asarray(length, dtype=np.int64)
        self.labels = np.asarray(labels, dtype=np.int64)
        self.names = names
        self.shard_of = np.asarray(shard_of, dtype=np.int64)

    def read(self, index):
        """Read sample `index` (blocking; for inspection, not the loader's path)."""
        if not -len(self) <= index < len(self):
            raise IndexError(f"sample index {index} out of range (data set has {len(self)})")
        index %= len(self)
        with self.client.open(self.sources[self.source[index]], "rb") as f:
            data = f.pread(int(self.length[index]), int(self.offset[index]))
        if len(data) != self.length[index]:
            raise OSError(5, f"{self.sources[self.source[index]]}: sample {index} truncated")
        return data

    def __getitem__(self, index):
        return self.read(index), int(self.labels[index])

    @property
    def num_groups(self):
        return int(self.shard_of.max()) + 1 if len(self) else 0


def _label_from_name(name, class_to_idx, classes):
    cls = name.split("/", 1)[0] if "/" in name else ""
    if cls not in class_to_idx:
        class_to_idx[cls] = len(classes)
        classes.append(cls)
    return class_to_idx[cls]


class DirectoryDataset(_Dataset):
    """A directory of sample files; each subdirectory is a class (as torchvision's ImageFolder).

    Files directly under `root` get the class "" . The tree is listed once, with sizes, in
    sorted order (so sample indexes are stable). `extensions`: keep only these suffixes.
    Locality groups are the class directories.
    """

    keep_sources_open = False
    opener_threads = 2  # sources are resolved: issuing a read is cheap, no MDS round trip

    def __init__(self, client, root, extensions=None, resolve_threads=8):
        super().__init__(client)
        root = root.rstrip("/") or "/"
        self.root = root
        exts = tuple(extensions) if extensions else None
        entries = []  # (relative name, size)
        stack = [""]
        while stack:
            rel = stack.pop()
            for name, is_dir, size in client.scandir(posixpath.join(root, rel) if rel else root):
                r = f"{rel}/{name}" if rel else name
                if is_dir:
                    stack.append(r)
                elif exts is None or name.endswith(exts):
                    entries.append((r, size))
        entries.sort()
        if not entries:
            raise FileNotFoundError(2, f"{root}: no sample files")
        classes = sorted({n.split("/", 1)[0] if "/" in n else "" for n, _ in entries})
        self.classes = classes
        self.class_to_idx = {c: i for i, c in enumerate(classes)}
        labels = [self.class_to_idx[n.split("/", 1)[0] if "/" in n else ""] for n, _ in entries]
        self.sources = [posixpath.join(root, n) for n, _ in entries]
        # (FID, layout, size) of every file, once for the data set's life: a stat and a layout
        # request per file, `resolve_threads` in flight.
        self.resolved = _ciuic.resolve_sources(client, self.sources, resolve_threads)
        n = len(entries)
        self._finish(np.arange(n), np.zeros(n), [s for _, s in entries], labels,
                     [e for e, _ in entries], labels)


class ShardDataset(_Dataset):
    """WebDataset-style tar shards, read sample by sample through member-offset indexes.

    `root`: a cluster directory holding *.tar shards (as `ciuic pack` writes), or a list of shard
    paths. Each shard's index is read from "<shard>.idx" when present, else built by scanning the
    tar headers (only the headers are read). Each regular member is one sample; its label is its
    first directory component as a class (as DirectoryDataset).
    Locality groups are the shards.
    """

    def __init__(self, client, root, build_missing_index=True):
        super().__init__(client)
        if isinstance(root, (list, tuple)):
            shards = list(root)
        else:
            shards = [posixpath.join(root, n) for n in client.listdir(root) if n.endswith(".tar")]
        if not shards:
            raise FileNotFoundError(2, f"{root}: no .tar shards")
        self.sources = shards
        # (FID, layout, size) of every shard, once: the engine then opens a shard (again, after
        # its LRU of open shards dropped it under a global shuffle) with no MDS round trip.
        self.resolved = _ciuic.resolve_sources(client, shards, 8)
        source, offset, length, names, shard_of = [], [], [], [], []
        for i, shard in enumerate(shards):
            members = self._index(shard, build_missing_index)
            for name, off, size in members:
                source.append(i)
                offset.append(off)
                length.append(size)
                names.append(name)
                shard_of.append(i)
        if not names:
            raise ValueError(f"{root}: the shards hold no samples")
        cls = sorted({n.split("/", 1)[0] if "/" in n else "" for n in names})
        self.classes = cls
        self.class_to_idx = {c: k for k, c in enumerate(cls)}
        labels = [self.class_to_idx[n.split("/", 1)[0] if "/" in n else ""] for n in names]
        self._finish(source, offset, length, labels, names, shard_of)

    def _index(self, shard, build_missing_index):
        try:
            text = self.client.read_file(shard + ".idx")
        except FileNotFoundError:
            if not build_missing_index:
                raise
            return _ciuic.scan_tar(self.client, shard)
        try:
            return _ciuic.parse_index(text)
        except OSError as e:
            raise OSError(e.errno, f"{shard}.idx: {e.strerror}") from None


def write_index(client, shard):
    """Scan `shard` (a tar on the cluster) and write its index beside it; returns the members."""
    members = _ciuic.scan_tar(client, shard)
    client.write_file(shard + ".idx", _ciuic.format_index(members))
    return members


def epoch_order(dataset, epoch, seed=0, shuffle=True, locality_window=0):
    """The whole job's sample order for `epoch` (array of sample indexes), deterministic in
    (seed, epoch).

    shuffle=False: data set order. locality_window=0: full global shuffle. locality_window=W>0:
    shuffle the locality groups (shards, or class directories), then the samples within each
    window of W consecutive groups: reads stay within W shards at a time.
    """
    n = len(dataset)
    if not shuffle:
        return np.arange(n, dtype=np.int64)
    rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, int(epoch)])
    if locality_window <= 0:
        return rng.permutation(n).astype(np.int64)
    groups = dataset.shard_of
    g = dataset.num_groups
    by_group = np.argsort(groups, kind="stable")
    starts = np.searchsorted(groups[by_group], np.arange(g + 1))
    perm_groups = rng.permutation(g)
    out = []
    for w in range(0, g, locality_window):
        members = np.concatenate([by_group[starts[k]:starts[k + 1]]
                                  for k in perm_groups[w:w + locality_window]])
        out.append(rng.permutation(members))
    return np.concatenate(out).astype(np.int64) if out else np.zeros(0, dtype=np.int64)


def split_for_rank(order, cursor, rank, world_size):
    """The part of `order` rank `rank` reads: positions cursor + rank, cursor + rank + world...

    Ranks get disjoint parts whose sizes differ by at most one; together they cover
    order[cursor:] exactly once. `cursor` is a global sample count, valid at any world size.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} not in [0, {world_size})")
    return order[cursor + rank::world_size]


SAMPLE_FORMATS = ("bytes", "memoryview", "numpy", "tensor")


def _as_format(fmt, data):
    """A sample (bytes, or a zero-copy _ciuic.Sample) in the form `fmt` asks, without a copy."""
    if fmt == "bytes":
        return data if isinstance(data, bytes) else bytes(data)
    if fmt == "memoryview":
        return memoryview(data)
    if fmt == "numpy":
        return np.frombuffer(data, dtype=np.uint8)
    import torch
    if len(data) == 0:
        return torch.empty(0, dtype=torch.uint8)
    if isinstance(data, bytes):  # from a worker: bytes are immutable, the tensor gets its own
        return torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return torch.frombuffer(data, dtype=torch.uint8)


def _apply(transform, target_transform, collate_fn, unbatched, fmt, raw, labels):
    samples = []
    for data, label in zip(raw, labels):
        if fmt != "bytes" or not isinstance(data, bytes):
            data = _as_format(fmt, data)
        x = transform(data) if transform is not None else data
        y = target_transform(label) if target_transform is not None else label
        samples.append((x, y))
    if unbatched:  # batch_size=None: one sample at a time, converted rather than collated
        return collate_fn(samples[0]) if collate_fn is not None else samples[0]
    return collate_fn(samples) if collate_fn is not None else samples


_worker_fn = None


def _worker_init(fn, init_fn=None, counter=None, num_workers=0, base_seed=0, dataset=None):
    """A pool worker's start, as torch's workers start: an id (0..num_workers-1), the seeds
    torch gives its workers (random and torch: base_seed + id; numpy: torch's mix of both), the
    WorkerInfo that torch.utils.data.get_worker_info() returns, then the user's worker_init_fn."""
    global _worker_fn
    _worker_fn = fn
    if counter is None:
        return
    with counter.get_lock():
        worker_id = counter.value
        counter.value += 1
    seed = base_seed + worker_id
    random.seed(seed)
    np_seed = seed & 0xFFFFFFFF
    try:
        import torch
        torch.manual_seed(seed)
        from torch.utils.data._utils import worker as _tw
        np_seed = _tw._generate_state(base_seed, worker_id)
        _tw._worker_info = _tw.WorkerInfo(id=worker_id, num_workers=num_workers, seed=seed,
                                          dataset=dataset)
    except (ImportError, AttributeError):  # no torch, or another torch's internals
        pass
    np.random.seed(np_seed)
    if init_fn is not None:
        init_fn(worker_id)


def _worker_run(args):
    raw, labels = args
    return _apply(*_worker_fn, raw, labels)


_malloc_tuned = False


def _keep_freed_memory():
    """Once per process: let glibc keep up to 64 MiB of freed heap instead of trimming it.

    Every batch allocates and frees megabytes of bytes objects; with glibc's default (dynamic)
    trim threshold each free at the top of a heap handed the pages back to the kernel and the
    next batch faulted them in again, which in a VM costs more than the copy: a first epoch of
    100,000 shard samples ran at 7,800-9,300 samples/s instead of 15,700-16,300. Skipped when the
    user set MALLOC_TRIM_THRESHOLD_ or on a C library without mallopt.
    """
    global _malloc_tuned
    if _malloc_tuned:
        return
    _malloc_tuned = True
    if "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return
    try:
        import ctypes
        ctypes.CDLL(None).mallopt(-1, 64 << 20)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass


_running_ahead = set()  # (stop event, engine, finished event) of every _ahead() not finished yet


class _BatchThread:
    """A thread that runs batch hand-offs, one epoch after another, idle in between.

    Kept rather than started per epoch because glibc gives each thread a malloc arena of its own:
    a new thread's arena (or a cold one from the free list) faulted in every page of the first
    three or four batches of an epoch (~1,200 page faults and 15-50 ms per batch of 64 samples of
    74 KiB in this VM), where a kept thread's arena is already warm.
    """

    _lock = threading.Lock()
    _idle = []       # threads waiting for work
    _all = set()     # every live one
    _max_idle = 4

    def __init__(self):
        self.jobs = queue.Queue(maxsize=1)
        self.busy = False
        self.thread = threading.Thread(target=self._loop, name="ciuic-batches", daemon=True)
        _BatchThread._all.add(self)
        self.thread.start()

    @classmethod
    def run(cls, fn):
        """Runs fn() on an idle batch thread (a new one if none is idle)."""
        with cls._lock:
            t = cls._idle.pop() if cls._idle else None
            if t is None:
                t = cls()
            t.busy = True
        t.jobs.put(fn)

    def _loop(self):
        while True:
            fn = self.jobs.get()
            if fn is None:
                return
            try:
                fn()
            except BaseException:  # noqa: BLE001  run() hands its errors to the consumer
                pass
            with _BatchThread._lock:
                self.busy = False
                if len(_BatchThread._idle) >= _BatchThread._max_idle:
                    _BatchThread._all.discard(self)
                    return
                _BatchThread._idle.append(self)

    @classmethod
    def busy_count(cls):
        with cls._lock:
            return sum(1 for t in cls._all if t.busy)

    @classmethod
    def stop_idle(cls):
        with cls._lock:
            idle, cls._idle = cls._idle, []
            for t in idle:
                cls._all.discard(t)
        for t in idle:
            t.jobs.put(None)
        for t in idle:
            t.thread.join(timeout=10)


def _forget_batch_threads():
    # A forked child has none of its parent's threads: a job handed to one would never run.
    _BatchThread._lock = threading.Lock()
    _BatchThread._idle = []
    _BatchThread._all = set()
    _running_ahead.clear()


os.register_at_fork(after_in_child=_forget_batch_threads)


@atexit.register
def _stop_running_ahead():
    # A script may exit in the middle of an epoch without closing its iterator. Batch threads are
    # daemons, and a daemon thread that comes back from a native call after the interpreter began
    # finalizing is torn down mid-frame (an abort in C++ code), so stop the running hand-offs and
    # end the idle threads first.
    for stop, engine, finished in list(_running_ahead):
        stop.set()
        engine.stop()
        finished.wait(timeout=10)
    _BatchThread.stop_idle()


def _ahead(batches, engine, depth=2):
    """Yields the items of the generator `batches`, produced up to `depth` ahead by a thread.

    Turning a batch's samples into Python bytes (a copy of every byte, with the GIL) costs ~0.5 ms
    per 64 samples of 74 KiB; done here it overlaps the training step (which releases the GIL)
    instead of adding to the time the step waits for its next batch, as torch's workers overlap
    it. Only the engine hand-off runs in the thread; transforms and collate_fn stay in the caller.
    The thread is a kept _BatchThread: idle again when the epoch ends or the iterator closes.
    """
    q = queue.Queue(maxsize=depth)
    stop = threading.Event()
    finished = threading.Event()
    done = object()

    def put(item):
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                pass
        return False

    def run():
        try:
            for item in batches:
                if not put(item):
                    return
            put(done)
        except BaseException as e:  # noqa: BLE001  handed to the consumer, raised there
            put(e)
        finally:
            finished.set()

    record = (stop, engine, finished)
    _running_ahead.add(record)
    _BatchThread.run(run)
    try:
        while True:
            item = q.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        engine.stop()  # ends a next_batch() the thread may be blocked in
        finished.wait(timeout=30)
        _running_ahead.discard(record)


def _default_collate():
    try:
        from torch.utils.data import default_collate
    except ImportError:  # torch < 1.11 or no torch
        try:
            from torch.utils.data._utils.collate import default_collate
        except ImportError:
            return None
    return default_collate


def _dist_rank_world():
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except ImportError:
        pass
    return 0, 1


def _stop_pool(pool, pending, wait_s=10.0):
    """Ends a worker pool, also in the middle of an epoch.

    CPython's Pool.terminate() raises AssertionError ("Cannot have cache with result_hander not
    alive") when its result thread has already exited while results are pending, a long-standing
    race. So the few batches in flight get up to `wait_s` to finish first, and if terminate()
    still hits the race, the workers are killed directly.
    """
    deadline = time.monotonic() + wait_s
    for res in pending:
        res.wait(max(0.0, deadline - time.monotonic()))
    try:
        pool.terminate()
    except AssertionError:
        for proc in list(getattr(pool, "_pool", [])):
            proc.kill()
    pool.join()


class _StallTimer:
    """Wraps the loader's batch generator and accounts the time the caller spends blocked in
    next() (and in iter(), from `start`) as IO stall, into the epoch record `rec`."""

    __slots__ = ("_it", "_rec", "_start", "_done")

    def __init__(self, it, rec, start):
        self._it = it
        self._rec = rec
        self._start = start
        self._done = False
        now = time.perf_counter()
        rec["io_stall_s"] += now - start
        self._update(now)

    def _update(self, now):
        rec = self._rec
        rec["epoch_s"] = now - self._start
        rec["stall_fraction"] = rec["io_stall_s"] / rec["epoch_s"] if rec["epoch_s"] > 0 else 0.0

    def __iter__(self):
        return self

    def __next__(self):
        t0 = time.perf_counter()
        try:
            batch = next(self._it)
        except StopIteration:
            if not self._done:
                self._done = True
                now = time.perf_counter()
                self._rec["io_stall_s"] += now - t0
                self._rec["complete"] = True
                self._update(now)
            raise
        now = time.perf_counter()
        self._rec["io_stall_s"] += now - t0
        self._rec["batches"] += 1
        self._update(now)
        return batch

    def close(self):
        self._it.close()


class _RestoreAhead:
    """Restores the epoch's released sources before the reader gets to them (docs/design.md
    "HSM policy"): in the order the epoch first reads them, at most `concurrency` at once, and
    at most `distance` sources past those the reader has begun, so a restore never runs a whole
    epoch ahead and refills the OSTs the policy just emptied. The loader knows the order, so
    nothing is guessed. A source that is not released costs one MDS request; a failed restore
    is left for the read, which restores (or fails) on its own.

    first_pos[i]: the position in the epoch's samples where source paths[i] is first read
    (ascending); advance(consumed) moves the reader."""

    def __init__(self, client, paths, concurrency, distance, first_pos):
        self._client = client
        self._paths = list(paths)
        self._first = np.asarray(first_pos)
        self._distance = max(1, int(distance))
        self._cv = threading.Condition()
        self._next = 0      # index of the next source to hand out
        self._begun = 0     # sources the reader has begun
        self._done = 0      # restores finished (or failed)
        self._stopped = False
        self.restored = []  # paths handed out, in order (for tests and stats)
        self.max_ahead = 0  # the most sources handed out past those begun (for tests)
        self._threads = [threading.Thread(target=self._run, name="ciuic-restore", daemon=True)
                         for _ in range(concurrency)]
        for t in self._threads:
            t.start()

    def advance(self, consumed):
        begun = int(np.searchsorted(self._first, consumed, side="left"))
        with self._cv:
            if begun > self._begun:
                self._begun = begun
                self._cv.notify_all()

    def _run(self):
        while True:
            with self._cv:
                while not self._stopped and self._next < len(self._paths) and \
                        self._next >= self._begun + self._distance:
                    self._cv.wait()
                if self._stopped or self._next >= len(self._paths):
                    return
                path = self._paths[self._next]
                self._next += 1
                self.max_ahead = max(self.max_ahead, self._next - self._begun)
                self.restored.append(path)
            try:
                self._client.hsm_restore(path)
            except OSError:
                pass
            with self._cv:
                self._done += 1
                self._cv.notify_all()

    def wait(self, count=None):
        """Until `count` sources (default: all the distance allows now) were restored."""
        with self._cv:
            target = min(len(self._paths), self._begun + self._distance) if count is None \
                else count
            while not self._stopped and self._done < target:
                self._cv.wait()

    def stop(self):
        with self._cv:
            self._stopped = True
            self._cv.notify_all()


def _unescape_mountinfo(field):
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _ciuic_mounts():
    """Mount points of the ciuic FUSE mounts this process sees, deepest first."""
    out = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields = left.split(" ")
                if right.split(" ", 1)[0] == "fuse.ciuic" and len(fields) > 4:
                    out.append(_unescape_mountinfo(fields[4]))
    except OSError:
        pass
    return sorted(out, key=len, reverse=True)


def _cluster_path(path, mounts):
    """The cluster path of a sample path: a ciuic:// URL, a path inside a ciuic mount, or an
    absolute path that is no local file (a cluster path). None for a local file."""
    p = os.fsdecode(os.fspath(path))
    if p.startswith("ciuic:"):
        rest = p[len("ciuic://"):] if p.startswith("ciuic://") else p[len("ciuic:"):]
        return posixpath.normpath("/" + rest.lstrip("/"))
    ap = os.path.abspath(p)
    for mp in mounts:
        if ap == mp or ap.startswith(mp.rstrip("/") + "/"):
            rel = os.path.relpath(ap, mp)
            return "/" if rel == "." else "/" + rel
    if os.path.isabs(p) and not os.path.lexists(p):
        return posixpath.normpath(p)
    return None


def _is_pil_loader(loader):
    """torchvision's own image loaders, when they decode with PIL: the bytes can go to PIL
    directly (what they do after opening the path)."""
    try:
        import torchvision
        from torchvision.datasets import folder
    except ImportError:
        return False
    if loader is folder.pil_loader:
        return True
    return loader is folder.default_loader and torchvision.get_image_backend() == "PIL"


class _LoadSample:
    """A sample's bytes to the data set's own sample: its loader, then its transform.

    torchvision's PIL loaders get the bytes as a file (what they would read from the path);
    any other loader gets a path, /proc/self/fd/N of an in-memory file holding the bytes, as it
    expects a path to open."""

    def __init__(self, loader, transform):
        self.loader = loader
        self.transform = transform
        self.pil = _is_pil_loader(loader)

    def __call__(self, data):
        if self.pil:
            from PIL import Image
            with Image.open(io.BytesIO(data)) as img:
                sample = img.convert("RGB")
        else:
            fd = os.memfd_create("ciuic-sample", os.MFD_CLOEXEC)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                sample = self.loader(f"/proc/self/fd/{fd}")
            finally:
                os.close(fd)
        return self.transform(sample) if self.transform is not None else sample


class _TargetOf:
    """A sample's index to the data set's own target, then its target_transform."""

    def __init__(self, targets, target_transform):
        self.targets = targets
        self.target_transform = target_transform

    def __call__(self, index):
        t = self.targets[index]
        return self.target_transform(t) if self.target_transform is not None else t


class _PathsDataset(_Dataset):
    """The files of a data set that names them (torchvision's DatasetFolder and ImageFolder, or
    any data set with `samples` (path, target) and a `loader`), resolved once on the cluster.
    Its labels are sample indexes: _TargetOf maps them to the data set's targets."""

    keep_sources_open = False
    opener_threads = 2

    def __init__(self, client, paths, resolve_threads=8):
        super().__init__(client)
        self.sources = list(paths)
        self.resolved = _ciuic.resolve_sources(client, self.sources, resolve_threads)
        n = len(self.sources)
        self._finish(np.arange(n), np.zeros(n), self.resolved.sizes(), np.arange(n),
                     self.sources, np.zeros(n))


def _see_into(dataset, client, resolve_threads=8):
    """(view, transform, target_transform, None) for a data set whose files ciuic can read
    ahead, else (None, None, None, why not)."""
    samples = getattr(dataset, "samples", None)
    loader = getattr(dataset, "loader", None)
    if not isinstance(samples, (list, tuple)) or not callable(loader):
        return None, None, None, "it names no files (no samples and loader)"
    if not samples:
        return None, None, None, "it has no samples"
    mounts = _ciuic_mounts()
    paths, targets = [], []
    for item in samples:
        path, target = item[0], item[1]
        cp = _cluster_path(path, mounts)
        if cp is None:
            return None, None, None, f"{os.fsdecode(os.fspath(path))} is a local file"
        paths.append(cp)
        targets.append(target)
    if client is None:
        try:
            from . import connect
            client = connect()
        except OSError as e:
            return None, None, None, f"no cluster to read it from ({e})"
    # A path inside a mount must name the same file on the client's cluster.
    first = os.fsdecode(os.fspath(samples[0][0]))
    if not first.startswith("ciuic:") and os.path.lexists(first):
        if os.stat(first).st_ino != client.stat(paths[0]).st_ino:
            return None, None, None, (f"the mount holding {first} is not the cluster of the "
                                      "loader's client (pass client=)")
    view = _PathsDataset(client, paths, resolve_threads)
    return (view, _LoadSample(loader, getattr(dataset, "transform", None)),
            _TargetOf(targets, getattr(dataset, "target_transform", None)), None)


def _rng_generators(loader):
    """The torch.Generators an iteration of `loader` may draw its order and worker seeds from:
    torch's global one (None: a sampler without a generator of its own draws there, as does the
    base seed of a loader without one), the loader's, then any its sampler or batch sampler
    holds."""
    gens = [None]
    for obj in (loader, loader.sampler, loader.batch_sampler,
                getattr(loader.batch_sampler, "sampler", None)):
        g = getattr(obj, "generator", None)
        if g is not None and all(g is not h for h in gens):
            gens.append(g)
    return gens


def _save_rng(loader):
    """The state of every generator an iteration draws from (None for torch's global one)."""
    try:
        import torch
    except ImportError:  # pragma: no cover - without torch nothing draws
        return None
    return [torch.get_rng_state() if g is None else g.get_state() for g in _rng_generators(loader)]


def _restore_rng(loader, states):
    import torch
    gens = _rng_generators(loader)
    if len(gens) != len(states):
        raise ValueError(f"state has {len(states)} generator states, this loader draws from "
                         f"{len(gens)} generators")
    for g, st in zip(gens, states):
        if g is None:
            torch.set_rng_state(st)
        else:
            g.set_state(st)


class _Skip:
    """A sampler without its first `n` items: where a resumed iteration of torch's own code
    starts (the indexes are skipped, no sample is loaded)."""

    def __init__(self, sampler, n):
        self.sampler, self.n = sampler, n

    def __iter__(self):
        import itertools
        return itertools.islice(iter(self.sampler), self.n, None)

    def __len__(self):
        return max(0, len(self.sampler) - self.n)


class _CountingIter:
    """torch's DataLoader iterator, counting the batches it hands out (for state_dict())."""

    def __init__(self, it, loader):
        self._it, self._loader = it, loader

    def __iter__(self):
        return self

    def __next__(self):
        try:
            batch = next(self._it)
        except StopIteration:
            if self._loader._iter_token is self:
                self._loader._finished = True
            raise
        if self._loader._iter_token is self:
            self._loader._yielded += 1
        return batch

    def __len__(self):
        return len(self._it)

    def __getattr__(self, name):
        return getattr(self._it, name)


class CiuicDataLoader(_TorchDataLoader):
    """torch.utils.data.DataLoader, reading ciuic data sets ahead in each epoch's exact order.

    It is a DataLoader (a subclass) and takes every argument of torch 1.13's, in its order:
    dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn, pin_memory,
    drop_last, timeout, worker_init_fn, multiprocessing_context, generator, and the keywords
    prefetch_factor, persistent_workers and pin_memory_device, with torch's meaning. It is a
    context manager, and close() stops its workers (persistent ones included).

    Over a DirectoryDataset or ShardDataset the prefetch engine reads the epoch's samples ahead
    in order. Each item is (transform(bytes), target_transform(label)); batches are made by
    collate_fn (torch's default_collate by default, which keeps bytes as a list). The order:
      - without sampler, batch_sampler or generator: ciuic's own, seeded and deterministic
        (seed, shuffle, locality_window; set_epoch), split across ranks (rank/world_size,
        default torch.distributed's when initialized), so len() is this rank's batches;
      - with any of them: exactly the batches torch's would draw (the sampler's order, the
        batch sampler's groups, the generator's shuffle), not split again across ranks (a
        DistributedSampler does that).
    Workers (num_workers > 0) run transform and collate_fn on bytes the parent already read,
    started as torch starts its own: ids, seeds, get_worker_info() and worker_init_fn.
    A data set that names its files (torchvision's ImageFolder and DatasetFolder, or any with
    `samples` (path, target) and `loader`) on the cluster, as ciuic:// URLs, paths in a ciuic
    mount or cluster paths, is read ahead the same way; its own loader and transforms run on
    the bytes (`client=` picks the cluster, default ciuic.connect()). Any other data set is
    loaded by torch's own DataLoader code, with a one-line warning that prefetch is off
    (ciuic's transform and target_transform are refused there: give them to the data set).

    ciuic's own keywords: seed, locality_window (0: global shuffle), prefetch_bytes (memory
    budget of the prefetch engine), prefetch (batches kept read ahead at least: raises the
    budget), context (from ciuic.init_context(); its prefetch acts as prefetch), rank and
    world_size, io_depth (reads in flight, default 256), opener_threads, restore_ahead (N:
    restore released sources ahead of the reader, N at once; 0 off) and restore_distance (at
    most this many sources past those the reader began; 4 * N default). multiprocessing_context
    defaults to "fork" for ciuic data sets (the client stays in the parent).

    IO stall: stats() reports, for the current or last epoch, how long the training loop waited
    on the loader (time blocked in iter() and next() until a batch was handed over: reading,
    and the transforms when they run in this process) against the epoch's wall time, as
    io_stall_s, epoch_s and stall_fraction; epoch_stats() lists every epoch so far.

    Resume: state_dict() may be called at any point (before, during or after an iteration) and
    has the shape of torchdata's StatefulDataLoader state (its single-process keys:
    _num_yielded, _sampler_iter_yielded, _iterator_finished, ...), plus ciuic's exact position:
    {"epoch", "cursor", "seed", ...}. In ciuic's order, cursor is the number of samples of this
    epoch's global order the whole job has consumed (all ranks advance in lockstep, as
    synchronous training does), and load_state_dict() restarts on the next unseen sample at any
    number of workers or ranks. With a sampler, cursor counts this loader's samples of the
    sampler's order; the state keeps the generators' states of the iteration's start, so a
    shuffling sampler draws the same order again. A data set it cannot see into resumes as
    torchdata's does: the sampler's first _sampler_iter_yielded batches are skipped (an
    IterableDataset's are read and dropped). load_state_dict({}) starts afresh.
    """

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, pin_memory=False, drop_last=False, timeout=0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None, *,
                 prefetch_factor=2, persistent_workers=False, pin_memory_device="",
                 transform=None, target_transform=None, seed=0, locality_window=0,
                 prefetch_bytes=256 << 20, rank=None, world_size=None, io_depth=256,
                 opener_threads=None, prefetch=None, context=None, restore_ahead=0,
                 restore_distance=None, client=None, resolve_threads=8, sample_format="bytes"):
        if not isinstance(dataset, _Dataset) and (transform is not None or
                                                  target_transform is not None):
            raise TypeError("transform and target_transform apply to ciuic data sets; give them "
                            f"to your {type(dataset).__name__}")
        # A data set that names its files (ImageFolder, DatasetFolder, samples + loader) on the
        # cluster is read ahead as ciuic's own; its loader and transforms run on the bytes.
        view, why = dataset if isinstance(dataset, _Dataset) else None, None
        if view is None:
            view, transform, target_transform, why = _see_into(dataset, client, resolve_threads)
        accelerated = view is not None
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer or None, got {batch_size}")
        if sample_format not in SAMPLE_FORMATS:
            raise ValueError(f"sample_format must be one of {', '.join(SAMPLE_FORMATS)}, got "
                             f"{sample_format!r}")
        if sample_format != "bytes" and not isinstance(dataset, _Dataset):
            raise ValueError(f"sample_format applies to ciuic data sets; a "
                             f"{type(dataset).__name__} gets its samples from its own loader")
        self.sample_format = sample_format
        if prefetch is not None and prefetch < 0:
            raise ValueError("prefetch must be >= 0 batches")
        if restore_ahead < 0:
            raise ValueError("restore_ahead must be >= 0 concurrent restores")
        if restore_distance is not None and restore_distance < 1:
            raise ValueError("restore_distance must be >= 1 source")
        if _TorchDataLoader is object:  # pragma: no cover - no torch: the same attributes
            if sampler is not None or batch_sampler is not None or generator is not None:
                raise TypeError("sampler, batch_sampler and generator need torch")
            if num_workers < 0:
                raise ValueError("num_workers must be >= 0")
            self.dataset, self.batch_size, self.drop_last = dataset, batch_size, drop_last
            self.num_workers, self.pin_memory, self.timeout = num_workers, pin_memory, timeout
            self.worker_init_fn, self.generator = worker_init_fn, generator
            self.prefetch_factor, self.persistent_workers = prefetch_factor, persistent_workers
            self.sampler = self.batch_sampler = None
            self.collate_fn = collate_fn
        else:
            # torch checks the arguments and builds the sampler and batch sampler it would use.
            super().__init__(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers,
                             collate_fn, pin_memory, drop_last, timeout, worker_init_fn,
                             multiprocessing_context, generator, prefetch_factor=prefetch_factor,
                             persistent_workers=persistent_workers,
                             pin_memory_device=pin_memory_device)
        self._accelerated = accelerated
        self._ds = view  # what the engine reads: the data set, or the view of its files
        # Resume state common to both paths (state_dict()): batches handed out by the current
        # iteration (counting those before a resume), whether it ran to its end, the generators'
        # states at its start, and what load_state_dict() left for the next iteration.
        self._yielded = 0
        self._finished = False
        self._iter_rng = None
        self._iter_token = None
        self._next_state = None
        # A sampler, batch sampler or generator of the caller's: torch's batches, in its order.
        self._sampler_order = sampler is not None or batch_sampler is not None or \
            generator is not None
        if not accelerated:
            warnings.warn(f"CiuicDataLoader: cannot read {type(dataset).__name__} ahead ({why}); "
                          "loading it as torch's DataLoader does, prefetch off", stacklevel=2)
            return
        self.restore_ahead = int(restore_ahead)  # > 0: restore released sources ahead, N at once
        # Sources restored past those the reader began: enough to keep N restores busy while
        # the reader consumes, small enough not to refill the OSTs the policy emptied.
        self.restore_distance = int(restore_distance) if restore_distance is not None else \
            4 * max(1, self.restore_ahead)
        self._restore = None
        self.prefetch = prefetch  # batches kept read ahead at least (the seed's argument)
        self.shuffle = bool(shuffle)
        if self.collate_fn is None:
            self.collate_fn = _default_collate()
        self.transform = transform
        self.target_transform = target_transform
        self.seed = seed
        self.locality_window = locality_window
        self.prefetch_bytes = int(prefetch_bytes)
        self.io_depth = io_depth
        self.opener_threads = opener_threads or view.opener_threads
        self.mp_context = multiprocessing_context or "fork"
        self.context = context  # ciuic.init_context(): its .prefetch batches raise the budget
        if rank is None or world_size is None:
            r, w = _dist_rank_world()
            rank = r if rank is None else rank
            world_size = w if world_size is None else world_size
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} not in [0, world_size={world_size})")
        self.rank = rank
        self.world_size = world_size
        self.epoch = 0
        self._cursor = 0          # samples consumed before this iteration started
        self._consumed = 0        # samples this rank consumed in the current iteration
        self._resume = None
        self._engine = None
        self._pool = None
        self._pool_fn = None      # what the pool's workers run: (transform, ..., unbatched)
        self._epoch_total = None  # samples of the sampler's order this epoch (sampler order)
        self._base_seed = 0       # this iteration's worker base seed (_draw_base_seed)
        # Sample buffers kept across epochs: shared with the OSSes on this host (they place
        # samples straight into them), and already mapped, where fresh memory per epoch would be
        # faulted in page by page again.
        self._buffers = None
        self._buffers_budget = None
        self.last_stats = None
        self.last_budget = None
        self._epoch_stats = []  # one dict per iteration (epoch), see stats()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        """Stops the prefetch engine and every worker, persistent ones included. The loader
        can be iterated again afterwards (it starts them anew)."""
        if self._accelerated:
            self._close(keep_pool=False)
        else:
            it = getattr(self, "_iterator", None)
            if it is not None and hasattr(it, "_shutdown_workers"):
                it._shutdown_workers()
            self._iterator = None

    def set_epoch(self, epoch):
        self.epoch = int(epoch)

    def _my_indexes(self):
        order = epoch_order(self._ds, self.epoch, self.seed, self.shuffle,
                            self.locality_window)
        return split_for_rank(order, self._cursor, self.rank, self.world_size)

    def __len__(self):
        if not self._accelerated or self._sampler_order:
            return super().__len__()  # torch's: its (or the caller's) batch sampler's length
        n = len(self._ds)
        mine = len(range(self.rank, n, self.world_size))
        if self.batch_size is None:
            return mine
        return mine // self.batch_size if self.drop_last else math.ceil(mine / self.batch_size)

    def _torchdata_keys(self, yielded, finished):
        # torchdata's StatefulDataLoader keys (its single-process iterator's), ciuic's values.
        return {"_index_sampler_state": None, "_sampler_iter_state": None,
                "_sampler_iter_yielded": yielded, "_num_yielded": yielded,
                "_IterableDataset_len_called": None, "_shared_seed": None,
                "fetcher_state": None, "dataset_state": None, "_iterator_finished": finished}

    def state_dict(self):
        if not self._accelerated:
            # torch's code runs: its position is the batches handed out, and the generators'
            # states at the iteration's start (the sampler draws the same order again).
            finished = self._finished
            rng = _save_rng(self) if finished or self._iter_rng is None else self._iter_rng
            state = self._torchdata_keys(self._yielded, finished)
            state["rng_state"] = rng
            return state
        if self._sampler_order:
            total = self._epoch_total  # the sampler's samples this epoch (None before one)
            cursor = self._cursor + self._consumed
        else:
            total = len(self._ds)
            cursor = min(self._cursor + self._consumed * self.world_size, total)
        epoch = self.epoch
        finished = total is not None and cursor >= total
        if finished:  # epoch done: resume at the next one's start
            epoch, cursor = epoch + 1, 0
        rng = None
        if self._sampler_order:
            # The order the sampler draws: from the generators' states at this iteration's start
            # (mid-epoch), or their states now (the next iteration draws from them).
            rng = _save_rng(self) if finished or self._iter_rng is None else self._iter_rng
        state = self._torchdata_keys(self._yielded, finished)
        state.update({"epoch": epoch, "cursor": cursor, "seed": self.seed, "shuffle": self.shuffle,
                      "locality_window": self.locality_window, "num_samples": len(self._ds),
                      "sampler": self._sampler_order, "rng_state": rng})
        return state

    def load_state_dict(self, state):
        if not state:  # as torchdata: an empty state starts afresh
            self._next_state = None
            if self._accelerated:
                self._resume = None
            return
        if not self._accelerated:
            if "_sampler_iter_yielded" not in state:
                raise ValueError("state has no _sampler_iter_yielded: not a DataLoader state")
            self._next_state = state
            return
        if "cursor" not in state:
            # A state of torchdata's shape from another loader: its batches are skipped, in
            # this loader's order.
            if "_sampler_iter_yielded" not in state:
                raise ValueError("state has neither cursor nor _sampler_iter_yielded")
            yielded = int(state["_sampler_iter_yielded"])
            per = (self.batch_size or 1) * (1 if self._sampler_order else self.world_size)
            state = {"epoch": self.epoch, "cursor": min(yielded * per, len(self._ds)),
                     "_num_yielded": yielded}
        if state.get("num_samples", len(self._ds)) != len(self._ds):
            raise ValueError(f"state is for a data set of {state['num_samples']} samples, "
                             f"this one has {len(self._ds)}")
        cursor = int(state["cursor"])
        if not 0 <= cursor <= len(self._ds):
            raise ValueError(f"cursor {cursor} out of range [0, {len(self._ds)}]")
        rng = state.get("rng_state")
        if rng is not None and self._sampler_order and len(rng) != len(_rng_generators(self)):
            raise ValueError(f"state has {len(rng)} generator states, this loader draws from "
                             f"{len(_rng_generators(self))} generators")
        self.epoch = int(state["epoch"])
        self.seed = state.get("seed", self.seed)
        self.shuffle = state.get("shuffle", self.shuffle)
        self.locality_window = state.get("locality_window", self.locality_window)
        self._resume = cursor
        self._next_state = state

    def stats(self):
        """Figures of the current (or last) epoch, as a dict:
        epoch, batches, io_stall_s (seconds the training loop was blocked waiting for the
        loader), epoch_s (wall seconds from iter() to the end, or to the last batch so far),
        stall_fraction (io_stall_s / epoch_s), complete (the epoch ran to its end), and engine
        (the prefetch engine's counters of the last finished iteration). Empty figures before
        the first iteration."""
        cur = dict(self._epoch_stats[-1]) if self._epoch_stats else {
            "epoch": self.epoch, "batches": 0, "io_stall_s": 0.0, "epoch_s": 0.0,
            "stall_fraction": 0.0, "complete": False}
        cur["engine"] = self.last_stats
        return cur

    def epoch_stats(self):
        """The stats() figures of every iteration so far, oldest first (without engine)."""
        return [dict(e) for e in self._epoch_stats]

    @property
    def _index_sampler(self):
        # torch's iterators take their sampler here; a resumed one skips what was handed out.
        sampler = super()._index_sampler
        skip = getattr(self, "_skip", 0)
        return _Skip(sampler, skip) if skip else sampler

    def _torch_iter(self):
        """An iteration of torch's own code (data sets it cannot see into), resumable."""
        state, self._next_state = self._next_state, None
        yielded = 0
        if state is not None and not state.get("_iterator_finished", False):
            yielded = int(state["_sampler_iter_yielded"])
            if state.get("rng_state") is not None:
                _restore_rng(self, state["rng_state"])
        elif state is not None and state.get("rng_state") is not None:
            _restore_rng(self, state["rng_state"])  # the next epoch's draws
        self._iter_rng = _save_rng(self)
        iterable = getattr(self, "_dataset_kind", None) == 1  # torch's _DatasetKind.Iterable
        self._skip = 0 if iterable else yielded
        try:
            it = _CountingIter(super().__iter__(), self)
        finally:
            self._skip = 0
        self._iter_token = it
        self._yielded, self._finished = 0, False
        if iterable:
            for _ in range(yielded):  # no indexes to skip: read the batches and drop them
                next(it)
        else:
            self._yielded = yielded
        return it

    def __iter__(self):
        if not self._accelerated:
            return self._torch_iter()
        start = time.perf_counter()
        rec = {"epoch": self.epoch, "batches": 0, "io_stall_s": 0.0, "epoch_s": 0.0,
               "stall_fraction": 0.0, "complete": False}
        self._epoch_stats.append(rec)
        # Bounded: a long run keeps the last 1000 epochs.
        del self._epoch_stats[:-1000]
        it = self._start_iter()
        return _StallTimer(it, rec, start)

    def _order(self):
        """This iteration's sample indexes and batch sizes, past the resume cursor."""
        if not self._sampler_order:
            idx = self._my_indexes()
            n = len(idx)
            if self.batch_size is None:
                return idx, [1] * n
            b = self.batch_size
            sizes = [b] * (n // b)
            if n % b and not self.drop_last:
                sizes.append(n % b)
            return idx[:sum(sizes)], sizes
        groups = [[i] for i in self.sampler] if self.batch_sampler is None else \
            [list(g) for g in self.batch_sampler]
        self._epoch_total = sum(len(g) for g in groups)
        skip, first = self._cursor, 0  # whole batches consumed before (counted whole)
        while first < len(groups) and skip >= len(groups[first]) > 0:
            skip -= len(groups[first])
            first += 1
        groups = groups[first:]
        idx = np.fromiter((i for g in groups for i in g), dtype=np.int64)
        n = len(self._ds)
        if len(idx) and (idx.min() < -n or idx.max() >= n):
            bad = int(idx[(idx < -n) | (idx >= n)][0])
            raise IndexError(f"the sampler gave index {bad} of a data set of {n} samples")
        return idx, [len(g) for g in groups]

    def _draw_base_seed(self):
        # As torch's iterators do at their start, before the sampler draws its order: the
        # workers' base seed, from the generator (or torch's global one), so a generator shared
        # with torch's DataLoader gives both the same orders.
        try:
            import torch
            self._base_seed = int(torch.empty((), dtype=torch.int64).random_(
                generator=self.generator).item())
        except ImportError:
            self._base_seed = random.getrandbits(63)

    def _start_iter(self):
        self._close(keep_pool=self.persistent_workers)
        state, self._next_state = self._next_state, None
        if state and state.get("rng_state") is not None and self._sampler_order:
            _restore_rng(self, state["rng_state"])  # the sampler draws that iteration's order
        self._iter_rng = _save_rng(self) if self._sampler_order else None
        self._draw_base_seed()
        self._cursor = self._resume if self._resume is not None else 0
        self._resume = None
        self._consumed = 0
        self._finished = False
        self._yielded = int(state.get("_num_yielded", 0)) if state and self._cursor else 0
        idx, sizes = self._order()
        ds = self._ds
        budget = self.prefetch_bytes
        batches = max(self.prefetch or 0, self.context.prefetch if self.context else 0)
        if batches and len(ds):
            budget = max(budget, int(batches * self.batch_size * float(ds.length.mean())))
        self.last_budget = budget
        if self._buffers is None or self._buffers_budget != budget:
            self._buffers = _ciuic.SamplePool(ds.client, budget)
            self._buffers_budget = budget
        if self.restore_ahead and len(idx):
            src = ds.source[idx]
            _, first = np.unique(src, return_index=True)
            first = np.sort(first)
            paths = [ds.sources[int(i)] for i in src[first]]
            self._restore = _RestoreAhead(ds.client, paths, self.restore_ahead,
                                          self.restore_distance, first)
        nxt = {}
        if ds.resolved is not None and ds.client.has_node_cache():
            # The next epoch's order (deterministic from the seed) follows this one's in the
            # node cache's plan: what it reads first stays cached past the end of this epoch.
            order = epoch_order(ds, self.epoch + 1, self.seed, self.shuffle,
                                self.locality_window)
            n_idx = split_for_rank(order, 0, self.rank, self.world_size)
            nxt = dict(next_source=ds.source[n_idx], next_offset=ds.offset[n_idx],
                       next_length=ds.length[n_idx])
        engine = _ciuic.PrefetchEngine(
            ds.client, ds.sources, ds.source[idx], ds.offset[idx], ds.length[idx],
            budget_bytes=budget, max_inflight=self.io_depth,
            opener_threads=self.opener_threads, keep_sources_open=ds.keep_sources_open,
            resolved=ds.resolved, pool=self._buffers, **nxt)
        self._engine = engine
        labels = ds.labels[idx]
        _keep_freed_memory()
        return self._iterate(engine, labels, sizes)

    def _raw_batches(self, engine, labels, sizes, zero_copy=False):
        # zero_copy: the engine's own buffers (no copy into bytes), for the sample formats that
        # view them; batches for workers are pickled, so they travel as bytes.
        start = 0
        for count in sizes:
            raw = engine.next_batch(count, zero_copy)
            if len(raw) != count:
                raise OSError(5, "prefetch engine ended early")
            yield raw, [int(x) for x in labels[start:start + count]], count
            start += count

    def _get_pool(self, fn):
        """The worker pool: new for each iteration, or kept across them (persistent_workers)."""
        if self._pool is not None and self._pool_fn == fn:
            return self._pool
        if self._pool is not None:
            _stop_pool(self._pool, [])
        ctx = multiprocessing.get_context(self.mp_context)
        try:
            import torch.multiprocessing  # noqa: F401  (tensors through shared memory)
        except ImportError:
            pass
        base_seed = self._base_seed
        counter = ctx.Value("i", 0)
        dataset = self.dataset if self.mp_context == "fork" else None  # fork: not pickled
        self._pool = ctx.Pool(self.num_workers, initializer=_worker_init,
                              initargs=(fn, self.worker_init_fn, counter, self.num_workers,
                                        base_seed, dataset))
        self._pool_fn = fn
        return self._pool

    def _result(self, res):
        try:
            return res.get(self.timeout if self.timeout and self.timeout > 0 else None)
        except multiprocessing.TimeoutError:
            raise RuntimeError(f"DataLoader timed out after {self.timeout} seconds") from None

    def _iterate(self, engine, labels, sizes):
        # Unbatched (batch_size=None) as torch decides it: no batch sampler to group samples.
        unbatched = self.batch_sampler is None if _TorchDataLoader is not object else \
            self.batch_size is None
        fn = (self.transform, self.target_transform, self.collate_fn, unbatched,
              self.sample_format)
        pool = None
        window = []  # (AsyncResult, count) of batches handed to the pool, oldest first
        try:
            # Workers exist for the transforms (and a worker_init_fn); without them batches are
            # only regrouped and collated, which the parent does faster than shipping the bytes
            # to a worker and back.
            if self.num_workers == 0 or (self.transform is None and
                                         self.target_transform is None and
                                         self.worker_init_fn is None):
                batches = self._raw_batches(engine, labels, sizes,
                                            zero_copy=self.sample_format != "bytes")
                for raw, lab, count in _ahead(batches, engine):
                    batch = _apply(*fn, raw, lab)
                    self._consumed += count
                    self._yielded += 1
                    self._advance_restore()
                    yield self._pin(batch)
            else:
                pool = self._get_pool(fn)
                limit = self.num_workers * max(1, self.prefetch_factor or 1)
                for raw, lab, count in _ahead(self._raw_batches(engine, labels, sizes), engine):
                    window.append((pool.apply_async(_worker_run, ((raw, lab),)), count))
                    if len(window) >= limit:
                        res, c = window.pop(0)
                        batch = self._result(res)
                        self._consumed += c
                        self._yielded += 1
                        self._advance_restore()
                        yield self._pin(batch)
                while window:
                    res, c = window.pop(0)
                    batch = self._result(res)
                    self._consumed += c
                    self._yielded += 1
                    self._advance_restore()
                    yield self._pin(batch)
        finally:
            # Only this iterator's engine and pool: a newer iterator may own self._engine.
            self.last_stats = engine.stats()
            engine.stop()
            pending = [res for res, _ in window]
            if pool is not None and (not self.persistent_workers or pending):
                # A persistent pool stays for the next epoch, unless this one ended with
                # batches in flight (an exception, a timeout, an iterator dropped early).
                _stop_pool(pool, pending)
                if self._pool is pool:
                    self._pool = None
            if self._engine is engine:
                self._engine = None

    def _advance_restore(self):
        if self._restore is not None:
            self._restore.advance(self._consumed)

    def _pin(self, batch):
        if not self.pin_memory:
            return batch
        try:
            import torch
            if not torch.cuda.is_available():
                return batch
            if isinstance(batch, torch.Tensor):
                return batch.pin_memory()
            if isinstance(batch, (list, tuple)):
                return type(batch)(x.pin_memory() if isinstance(x, torch.Tensor) else x
                                   for x in batch)
        except ImportError:
            pass
        return batch

    def _close(self, keep_pool=False):
        if self._restore is not None:
            self._restore.stop()
            self._restore = None
        if self._pool is not None and not keep_pool:
            _stop_pool(self._pool, [])
            self._pool = None
        if self._engine is not None:
            self.last_stats = self._engine.stats()
            self._engine.stop()
            self._engine = None

    def __del__(self):
        try:
            if getattr(self, "_accelerated", False):
                self._close()
        except Exception:  # noqa: BLE001  interpreter shutdown
            pass

