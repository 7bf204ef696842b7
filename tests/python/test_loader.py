"""CiuicDataLoader and the data sets on a real cluster: exact epochs across ranks, seeded
orders, exact resume at another world size, tar shards from Python's tarfile, bad input, fork
workers, bounded memory, and a tiny training loop end to end."""

import errno
import io
import os
import tarfile
import time

import numpy as np
import pytest

import ciuic
from ciuic import CiuicDataLoader, DirectoryDataset, ShardDataset

N_CLASSES = 3
N = 90


def sample_bytes(i):
    # Sample i: its index in the first 4 bytes, then seeded noise; 300..3000 bytes.
    rng = np.random.default_rng(i)
    size = int(rng.integers(300, 3000))
    return i.to_bytes(4, "little") + rng.integers(0, 256, size, dtype=np.uint8).tobytes()


def sample_id(data):
    return int.from_bytes(data[:4], "little")


@pytest.fixture(scope="module")
def local_tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("tree")
    for i in range(N):
        d = root / f"class{i % N_CLASSES}"
        d.mkdir(exist_ok=True)
        (d / f"{i:05d}.bin").write_bytes(sample_bytes(i))
    return root


@pytest.fixture(scope="module")
def dir_dataset(client, local_tree):
    base = "/ds/dir"
    for path in sorted(local_tree.rglob("*.bin")):
        rel = path.relative_to(local_tree).as_posix()
        client.makedirs(os.path.dirname(f"{base}/{rel}"))
        client.write_file(f"{base}/{rel}", path.read_bytes())
    return DirectoryDataset(client, base)


@pytest.fixture(scope="module")
def shard_dataset(client, local_tree):
    # Small shards so there are several: ~10 samples per shard.
    res = ciuic.pack(client, local_tree, "/ds/shards", shard_bytes=16 << 10)
    assert res["files"] == N and res["shards"] > 3
    return ShardDataset(client, "/ds/shards")


def ids(batches):
    out = []
    for data, labels in batches:
        for d, lab in zip(data, labels.tolist()):
            i = sample_id(d)
            assert d == sample_bytes(i)
            assert lab == i % N_CLASSES  # class directory -> label
            out.append(i)
    return out


@pytest.mark.parametrize("kind", ["dir", "shards"])
def test_every_sample_once_per_epoch_across_ranks(kind, dir_dataset, shard_dataset):
    ds = dir_dataset if kind == "dir" else shard_dataset
    assert len(ds) == N
    for window in (0, 2):
        seen = []
        for rank in range(3):
            dl = CiuicDataLoader(ds, batch_size=7, shuffle=True, seed=5, rank=rank, world_size=3,
                                 locality_window=window)
            got = ids(dl)
            assert len(got) == N // 3  # balanced
            seen += got
        assert sorted(seen) == list(range(N))


def test_same_seed_same_order_other_seed_other_order(shard_dataset):
    def order(seed, epoch=0):
        dl = CiuicDataLoader(shard_dataset, batch_size=16, shuffle=True, seed=seed)
        dl.set_epoch(epoch)
        return ids(dl)

    a = order(1)
    assert a == order(1)
    assert a != order(2)
    assert a != order(1, epoch=1)
    assert sorted(a) == list(range(N))
    # Locality-aware: shards are read two at a time; a window ends before the next begins.
    dl = CiuicDataLoader(shard_dataset, batch_size=5, shuffle=True, seed=3, locality_window=2)
    pos = {shard_dataset.names.index(f"class{i % N_CLASSES}/{i:05d}.bin"): p
           for p, i in enumerate(ids(dl))}
    first, last = {}, {}
    for sample, p in sorted(pos.items(), key=lambda kv: kv[1]):
        g = int(shard_dataset.shard_of[sample])
        first.setdefault(g, p)
        last[g] = p
    by_first = sorted(first, key=first.get)
    windows = [by_first[k:k + 2] for k in range(0, len(by_first), 2)]
    for a, b in zip(windows, windows[1:]):
        assert max(last[g] for g in a) < min(first[g] for g in b)


@pytest.mark.parametrize("new_world", [1, 2, 4])
def test_resume_after_n_batches_yields_exactly_the_rest(dir_dataset, new_world):
    world = 2
    consumed, states = [], []
    for rank in range(world):
        dl = CiuicDataLoader(dir_dataset, batch_size=4, shuffle=True, seed=9, rank=rank,
                             world_size=world)
        it = iter(dl)
        for _ in range(3):
            consumed += ids([next(it)])
        states.append(dl.state_dict())
        del it
    assert all(s == states[0] for s in states)
    assert states[0]["cursor"] == 3 * 4 * world
    rest = []
    for rank in range(new_world):
        dl = CiuicDataLoader(dir_dataset, batch_size=5, shuffle=True, seed=0, rank=rank,
                             world_size=new_world, num_workers=0)
        dl.load_state_dict(states[0])
        rest += ids(dl)
    assert len(rest) + len(consumed) == N
    assert sorted(rest + consumed) == list(range(N))
    # The rest comes in the same global order the uninterrupted epoch would have used.
    full = ids(CiuicDataLoader(dir_dataset, batch_size=N, shuffle=True, seed=9))
    assert set(full[len(consumed):]) == set(rest)


def test_tar_written_by_python_tarfile(client, tmp_path):
    names = ["a/one.txt", "b/" + "long" * 40 + ".bin", "c/empty", "dir/sub/z.dat"]
    blobs = [b"first", os.urandom(5000), b"", os.urandom(700)]
    for fmt, shard in [(tarfile.PAX_FORMAT, "/ds/py/pax.tar"), (tarfile.GNU_FORMAT,
                                                                 "/ds/py/gnu.tar")]:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
            d = tarfile.TarInfo("a")
            d.type = tarfile.DIRTYPE
            tar.addfile(d)
            for name, blob in zip(names, blobs):
                ti = tarfile.TarInfo(name)
                ti.size = len(blob)
                tar.addfile(ti, io.BytesIO(blob))
        client.makedirs("/ds/py")
        client.write_file(shard, buf.getvalue())
        members = ciuic._ciuic.scan_tar(client, shard)
        # Same offsets as Python's own reader.
        with tarfile.open(fileobj=io.BytesIO(buf.getvalue())) as tar:
            expect = [(m.name, m.offset_data, m.size) for m in tar.getmembers() if m.isfile()]
        assert members == expect
    ds = ShardDataset(client, ["/ds/py/pax.tar", "/ds/py/gnu.tar"])
    assert len(ds) == 2 * len(names)
    got = [b for batch in CiuicDataLoader(ds, batch_size=3, collate_fn=lambda s: s)
           for b, _ in batch]
    assert got == blobs + blobs
    assert ds.read(1) == blobs[1]
    # Our pack output reads back with Python's tarfile too.
    with client.open("/ds/shards/shard-000000.tar", "rb") as f:
        with tarfile.open(fileobj=io.BytesIO(f.read())) as tar:
            m = tar.getmembers()[0]
            assert m.name == "class0/00000.bin"
            assert tar.extractfile(m).read() == sample_bytes(0)


def test_bad_input_raises_clear_errors(client, shard_dataset, tmp_path):
    with pytest.raises(FileNotFoundError):
        DirectoryDataset(client, "/ds/no-such-dir")
    with pytest.raises(FileNotFoundError):
        ShardDataset(client, "/ds/no-such-shards")
    with pytest.raises(IndexError):
        shard_dataset.read(N)
    with pytest.raises(IndexError):
        shard_dataset[N + 5]
    # A corrupt tar header: OSError(EIO) naming the offset.
    good = client.read_file("/ds/shards/shard-000000.tar")
    bad = bytearray(good)
    bad[3] ^= 0xFF
    client.makedirs("/ds/bad")
    client.write_file("/ds/bad/x.tar", bytes(bad))
    with pytest.raises(OSError) as e:
        ShardDataset(client, "/ds/bad")
    assert "checksum" in str(e.value)
    # A truncated tar whose index still claims the full members: the read fails, not silently.
    client.write_file("/ds/bad/x.tar", good[:3000])
    client.write_file("/ds/bad/x.tar.idx", client.read_file("/ds/shards/shard-000000.tar.idx"))
    ds = ShardDataset(client, "/ds/bad")
    with pytest.raises(OSError) as e:
        list(CiuicDataLoader(ds, batch_size=4))
    assert "x.tar" in str(e.value)
    client.write_file("/ds/bad/x.tar.idx", b"not an index")
    with pytest.raises(OSError):
        ShardDataset(client, "/ds/bad")
    with pytest.raises(ValueError):
        CiuicDataLoader(shard_dataset, batch_size=0)
    with pytest.raises(ValueError):
        CiuicDataLoader(shard_dataset, rank=3, world_size=2)
    dl = CiuicDataLoader(shard_dataset)
    with pytest.raises(ValueError):
        dl.load_state_dict({"epoch": 0, "cursor": N + 1})
    with pytest.raises(OSError):
        ciuic.pack(client, str(tmp_path / "nothing-here"), "/ds/x")


def decode(data):
    return np.frombuffer(data[4:260], dtype=np.uint8).astype(np.float32) / 255.0


def test_workers_run_transforms_and_exit(shard_dataset):
    import torch
    dl = CiuicDataLoader(shard_dataset, batch_size=8, shuffle=True, seed=2, num_workers=2,
                         transform=lambda b: torch.from_numpy(decode(b)))
    n = 0
    for x, y in dl:
        assert x.dtype == torch.float32 and x.shape[1] == 256
        n += len(y)
    assert n == N
    assert dl._pool is None  # the pool was shut down at the end of the epoch
    # Stopping mid-epoch also ends the workers.
    it = iter(dl)
    next(it)
    pool = dl._pool
    assert pool is not None
    it.close()
    assert dl._pool is None


def test_memory_stays_within_budget_across_epochs(shard_dataset):
    import gc
    gc.collect()  # iterators earlier tests left behind: their engines and batch threads end now
    budget = 8 << 10

    def settled_tasks():
        # A joined thread can still be listed for a moment while the kernel finishes its exit.
        n = len(os.listdir("/proc/self/task"))
        for _ in range(40):
            time.sleep(0.05)
            m = len(os.listdir("/proc/self/task"))
            if m == n:
                break
            n = m
        return n

    dl = CiuicDataLoader(shard_dataset, batch_size=4, shuffle=True, prefetch_bytes=budget)
    threads = []
    for epoch in range(3):
        dl.set_epoch(epoch)
        assert len(ids(dl)) == N
        threads.append(settled_tasks())  # engine and batch threads joined each epoch
        stats = dl.last_stats
        assert stats["samples"] == N
        assert stats["peak_buffered"] <= max(budget, int(shard_dataset.length.max()))
        # Shards are resolved once with the data set: no epoch opens one on the MDS (a global
        # shuffle over more shards than the engine keeps open made ~40 % of samples an open).
        assert stats["opens"] == 0
    assert threads[0] == threads[-1]
    assert len(shard_dataset.resolved) == len(shard_dataset.sources)


def test_batches_are_fetched_ahead_and_the_thread_is_idle_after_the_epoch(shard_dataset):
    # Batches are turned into bytes one or two ahead by a thread, so the training step does not
    # wait for that copy; a consumer that stops early must not leave the thread working (or the
    # engine running), and the resume cursor counts only batches the consumer took. The thread
    # is kept idle for the next epoch (its malloc arena stays warm), not started per epoch.
    import gc
    import threading

    from ciuic.data import _BatchThread
    gc.collect()  # iterators earlier tests left behind finish their epochs' hand-offs now

    def batch_threads():
        return {t for t in threading.enumerate() if t.name == "ciuic-batches"}

    busy = _BatchThread.busy_count()  # (0 unless an earlier test still holds an iterator)
    dl = CiuicDataLoader(shard_dataset, batch_size=4, shuffle=True, seed=1)
    it = iter(dl)
    first = [next(it), next(it)]
    time.sleep(0.2)  # let the thread run ahead
    assert _BatchThread.busy_count() == busy + 1
    assert dl.state_dict()["cursor"] == 8
    it.close()
    assert _BatchThread.busy_count() == busy
    assert len(ids(first)) == 8
    kept = batch_threads()
    assert kept
    for _ in range(3):
        assert sorted(ids(dl)) == list(range(N))  # a full epoch afterwards
        assert _BatchThread.busy_count() == busy
        assert batch_threads() == kept  # the same idle thread served it


def test_script_that_exits_mid_epoch_exits_cleanly(cluster_file, shard_dataset):
    # The iterator is left open at exit, its batch thread possibly inside the engine: the
    # interpreter must still exit with status 0 (it aborted in C++ before the atexit hook).
    import subprocess
    import sys
    code = (
        "import sys, ciuic\n"
        f"c = ciuic.connect({cluster_file!r})\n"
        "ds = ciuic.ShardDataset(c, '/ds/shards')\n"
        "it = iter(ciuic.CiuicDataLoader(ds, batch_size=4, shuffle=True, io_depth=1))\n"
        "next(it); next(it)\n"
        "print('ok')\n")
    for _ in range(3):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == "ok"


def test_directory_dataset_reads_samples_without_mds_opens(client, dir_dataset):
    # Sources are resolved once when the data set is built: no epoch opens a sample file.
    assert len(dir_dataset.resolved) == N
    dl = CiuicDataLoader(dir_dataset, batch_size=7, shuffle=True, seed=3)
    for epoch in range(2):
        dl.set_epoch(epoch)
        assert sorted(ids(dl)) == list(range(N))
        assert dl.last_stats["opens"] == 0
    # A sample file removed after the data set was built: ESTALE naming the file, not zeros.
    client.makedirs("/ds/stale/a")
    for i in range(3):
        client.write_file(f"/ds/stale/a/{i}.bin", sample_bytes(i))
    ds = DirectoryDataset(client, "/ds/stale")
    client.remove("/ds/stale/a/1.bin")
    err = None
    for _ in range(100):  # the OSTs destroy the objects in the background
        try:
            list(CiuicDataLoader(ds, batch_size=3))
        except OSError as e:
            err = e
            break
        time.sleep(0.1)
    assert err is not None and err.errno == errno.ESTALE, err
    assert "/ds/stale/a/1.bin" in str(err)


def test_init_context_and_async_prefetch(cluster_file, shard_dataset):
    ctx = ciuic.init_context(cluster_file)
    assert ciuic.async_prefetch(ctx, 8) is ctx and ctx.prefetch == 8
    dl = CiuicDataLoader(shard_dataset, batch_size=4, context=ctx, prefetch_bytes=1)
    assert len(ids(dl)) == N
    assert dl.last_budget >= int(8 * 4 * shard_dataset.length.mean())  # 8 batches, not 1 byte
    ctx.client.close()


def test_tiny_training_loop_end_to_end(shard_dataset):
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, N_CLASSES))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dl = CiuicDataLoader(shard_dataset, batch_size=10, shuffle=True, num_workers=1,
                         transform=lambda b: torch.from_numpy(decode(b)), drop_last=True)
    assert len(dl) == N // 10
    losses = []
    for epoch in range(3):
        dl.set_epoch(epoch)
        steps = 0
        for x, y in dl:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            steps += 1
        assert steps == N // 10
    assert all(np.isfinite(losses))


def test_ciuic_pack_cli(cluster_file, client, local_tree, tmp_path):
    import subprocess
    cli = os.path.join(os.environ["CIUIC_BIN_DIR"], "ciuic")
    env = dict(os.environ, CIUIC_CLUSTER=cluster_file)
    r = subprocess.run([cli, "pack", str(local_tree), "/ds/cli", "--shard-mib", "1"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"packed {N} files" in r.stdout
    ds = ShardDataset(client, "/ds/cli")
    assert sorted(ids(CiuicDataLoader(ds, batch_size=32))) == list(range(N))
    r = subprocess.run([cli, "pack", str(tmp_path / "missing"), "/ds/cli2"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "no such directory" in r.stderr


@pytest.mark.parametrize("shm_reads", [True, False])
def test_same_samples_with_and_without_shared_memory_and_buffers_kept_across_epochs(
        cluster_file, shard_dataset, shm_reads):
    # The OSSes of the test cluster run on this machine: with shm_reads they place samples in
    # the loader's memory, without it every sample comes over TCP. Both must give the same bytes,
    # and one loader keeps its sample buffers from epoch to epoch.
    c = ciuic.connect(cluster_file, shm_reads=shm_reads)
    ds = ShardDataset(c, "/ds/shards")
    dl = CiuicDataLoader(ds, batch_size=7, shuffle=True, seed=3, collate_fn=lambda b: b)
    pools = []
    for epoch in range(2):
        dl.set_epoch(epoch)
        seen = {}
        for batch in dl:
            for data, _ in batch:
                seen[sample_id(data)] = data
        assert sorted(seen) == list(range(N))
        assert all(seen[i] == sample_bytes(i) for i in range(N))
        pools.append(dl._buffers)
    assert pools[0] is not None and pools[0] is pools[1]


def _slow_decode(data):
    time.sleep(0.01)
    return data


def test_io_stall_is_measured_per_epoch(shard_dataset):
    # Epoch 0: the loader is fast and the training loop slow, so it rarely waits.
    dl = CiuicDataLoader(shard_dataset, batch_size=10, shuffle=True)
    assert dl.stats()["batches"] == 0 and dl.stats()["io_stall_s"] == 0.0
    dl.set_epoch(0)
    for _ in dl:
        time.sleep(0.03)
    s0 = dl.stats()
    assert s0["epoch"] == 0 and s0["complete"] and s0["batches"] == len(dl)
    assert s0["epoch_s"] >= 0.03 * len(dl)
    assert 0 < s0["io_stall_s"] < s0["epoch_s"]
    assert s0["stall_fraction"] < 0.5
    assert s0["engine"] is not None
    # Epoch 1: the transform (run in this process without workers) makes every batch wait
    # ~0.1 s, and the loop does nothing: nearly all of the epoch is stall.
    dl.transform = _slow_decode
    dl.set_epoch(1)
    batches = 0
    for _ in dl:
        batches += 1
    s1 = dl.stats()
    assert s1["epoch"] == 1 and s1["complete"] and s1["batches"] == batches == len(dl)
    assert s1["io_stall_s"] >= 0.01 * N * 0.9
    assert s1["stall_fraction"] > 0.8
    assert s1["stall_fraction"] <= 1.0
    # An epoch abandoned mid-way is recorded as incomplete; the history keeps every epoch.
    dl.set_epoch(2)
    it = iter(dl)
    next(it)
    s2 = dl.stats()
    assert s2["epoch"] == 2 and not s2["complete"] and s2["batches"] == 1
    del it
    hist = dl.epoch_stats()
    assert [e["epoch"] for e in hist] == [0, 1, 2]
    assert hist[0]["io_stall_s"] == s0["io_stall_s"]


def _kind_and_bytes(x):
    # A worker's transform: what it was given, and the bytes (a view cannot be pickled back).
    return type(x).__name__, bytes(memoryview(x.numpy() if hasattr(x, "numpy") else x))


@pytest.mark.parametrize("fmt", ["memoryview", "numpy", "tensor"])
def test_zero_copy_samples_stay_valid_until_dropped(fmt, shard_dataset):
    """sample_format gives views of the loader's own buffers (no copy into bytes); a view held
    past its epoch keeps its buffer (the next epoch reuses only buffers given back), and the
    bytes are the sample's."""
    if fmt == "tensor":
        torch = pytest.importorskip("torch")
    kinds = {"memoryview": memoryview, "numpy": np.ndarray}
    loader = CiuicDataLoader(shard_dataset, batch_size=8, shuffle=True, seed=3,
                             sample_format=fmt, collate_fn=lambda samples: samples)
    held = []
    for _ in range(2):
        for batch in loader:
            for x, label in batch:
                if fmt == "tensor":
                    assert isinstance(x, torch.Tensor) and x.dtype == torch.uint8
                else:
                    assert isinstance(x, kinds[fmt])
                held.append((x, label))
    assert len(held) == 2 * N
    # Views alias the engine's buffers: no two held samples share an address (none was reused
    # while held), and a second view of a sample is the same memory.
    addr = (lambda x: x.data_ptr()) if fmt == "tensor" else (
        lambda x: np.frombuffer(x, dtype=np.uint8).ctypes.data if len(x) else 0)
    addrs = [addr(x) for x, _ in held if len(x)]
    assert len(set(addrs)) == len(addrs)
    for x, label in held:  # every view still holds its own sample's bytes
        data = bytes(x.numpy()) if fmt == "tensor" else bytes(x)
        i = sample_id(data)
        assert data == sample_bytes(i)
        assert label == i % N_CLASSES
    del held


@pytest.mark.parametrize("fmt", ["memoryview", "numpy", "tensor"])
def test_sample_format_reaches_worker_transforms(fmt, shard_dataset):
    """With workers the samples travel to them as bytes and their transform gets the format."""
    if fmt == "tensor":
        pytest.importorskip("torch")
    want = {"memoryview": "memoryview", "numpy": "ndarray", "tensor": "Tensor"}[fmt]
    loader = CiuicDataLoader(shard_dataset, batch_size=8, num_workers=2, sample_format=fmt,
                             transform=_kind_and_bytes, collate_fn=lambda samples: samples)
    seen = 0
    for batch in loader:
        for (kind, data), label in batch:
            assert kind == want
            assert data == sample_bytes(sample_id(data))
            seen += 1
    assert seen == N


def test_sample_format_is_checked(client, shard_dataset):
    with pytest.raises(ValueError, match="sample_format"):
        CiuicDataLoader(shard_dataset, sample_format="jpeg")
    torch = pytest.importorskip("torch")

    class Plain(torch.utils.data.Dataset):
        def __len__(self):
            return 1

        def __getitem__(self, i):
            return i

    with pytest.raises(ValueError, match="ciuic data sets"):
        CiuicDataLoader(Plain(), sample_format="numpy")
