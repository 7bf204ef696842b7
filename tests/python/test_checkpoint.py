"""ciuic.checkpoint on a real local cluster (conftest.py): round trips, conversion against torch,
async saves, checksums, subsets, crash safety (SIGKILL) and torch.distributed (gloo)."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import OrderedDict

import warnings

import numpy as np
import pytest
import torch

warnings.filterwarnings("ignore", message="ComplexHalf support is experimental")

import ciuic
import ciuic.checkpoint as ckpt
from ciuic import _ciuic

CPU_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
              torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64,
              torch.complex128, torch.complex32]


def _same(a, b):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), (a, b)
        assert a.dtype == b.dtype and a.shape == b.shape
        if a.dtype == torch.complex32:  # few operators support it: compare the bits
            a, b = a.view(torch.int32), b.view(torch.int32)
        assert torch.equal(a.view(torch.uint8) if a.dtype == torch.bool else a,
                           b.view(torch.uint8) if b.dtype == torch.bool else b) or \
            (a.is_floating_point() and torch.equal(torch.nan_to_num(a), torch.nan_to_num(b)))
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    elif isinstance(a, dict):
        assert type(a) is type(b) and list(a.keys()) == list(b.keys())
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, float) and a != a:
        assert b != b
    else:
        assert a == b and type(a) is type(b), (a, b)


def test_round_trip_of_nested_state_dict(client, cluster_dir):
    g = torch.Generator().manual_seed(0)
    base = torch.randn(64, 33, generator=g)
    tensors = {}
    for dt in CPU_DTYPES:
        if dt == torch.complex32:
            tensors[str(dt)] = torch.randn(7, 5, generator=g).to(torch.complex64).to(dt)
        elif dt.is_floating_point or dt.is_complex:
            tensors[str(dt)] = (torch.randn(7, 5, generator=g) * 100).to(dt)
        elif dt == torch.bool:
            tensors[str(dt)] = torch.randn(7, 5, generator=g) > 0
        else:
            tensors[str(dt)] = torch.randint(-100 if dt != torch.uint8 else 0, 100, (7, 5),
                                             generator=g).to(dt)
    state = {
        "model": OrderedDict([("w", base), ("w.T", base.t()), ("cols", base[:, ::3]),
                              ("row", base[5]), ("empty", torch.empty(0, 4)),
                              ("scalar", torch.tensor(2.5)), ("int0d", torch.tensor(7))]),
        "dtypes": tensors,
        "optim": {"state": {0: {"exp_avg": torch.ones(3), "step": 10},
                            1: {"exp_avg": torch.zeros(2), "step": 11}},
                  "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "params": [0, 1],
                                    "nesterov": False, "name": None}]},
        "step": 12345678901234567890123, "loss": float("nan"), "inf": float("-inf"),
        "blob": b"\x00\xff", "numpy": np.arange(10, dtype=np.int32).reshape(2, 5),
    }
    state["same"] = state["model"]["w"]  # one tensor under two names comes back as one
    path = cluster_dir + "/ck"
    stats = ckpt.save(state, path, client=client)
    assert stats["tensors"] > 20
    got = ckpt.load(path, client=client)
    _same(state, got)
    assert got["same"] is got["model"]["w"]
    assert got["model"]["w.T"].is_contiguous()
    assert ckpt.latest(cluster_dir, client=client) == "ck"


def test_large_tensors_load_into_huge_page_memory(client, cluster_dir):
    # Tensors of 1 MiB and more are loaded into fresh 2 MiB-aligned (huge-page) memory rather
    # than torch.empty: every dtype, odd shapes, numpy arrays, and the tensors behave like any.
    g = torch.Generator().manual_seed(1)
    state = {}
    for dt in CPU_DTYPES:
        if dt == torch.bool:
            state[str(dt)] = torch.randn(1031, 1027, generator=g) > 0
        elif dt.is_floating_point or dt.is_complex:
            x = torch.randn(1031, 517, generator=g)
            state[str(dt)] = (x.to(torch.complex64) if dt == torch.complex32 else x).to(dt)
        else:
            state[str(dt)] = torch.randint(0, 100, (1031, 517), generator=g).to(dt)
    state["np"] = np.arange(3 << 18, dtype=np.float64).reshape(3, -1)
    ckpt.save(state, cluster_dir + "/big", client=client)
    got = ckpt.load(cluster_dir + "/big", client=client)
    _same(state, got)
    w = got[str(torch.float32)]
    assert w.data_ptr() % (2 << 20) == 0  # the huge-page path was taken
    w.add_(1)  # writable, and usable by ordinary operators
    assert torch.equal(w, state[str(torch.float32)] + 1)
    got["np"][0, 0] = -1.0
    assert got["np"][0, 0] == -1.0
    up = ckpt.load(cluster_dir + "/big", client=client, keys=[str(torch.bfloat16)], upcast=True)
    assert torch.equal(up[str(torch.bfloat16)], state[str(torch.bfloat16)].float())
    del got, w  # the buffer is unmapped with the last tensor: nothing dangles
    buf = _ciuic.fresh_buffer(5 << 20)
    view = memoryview(buf)
    assert len(buf) == 5 << 20 and view.nbytes == 5 << 20 and not view.readonly
    assert bytes(view[:8]) == bytes(8)


def test_load_into_existing_tensors(client, cluster_dir):
    state = {"w": torch.randn(100, 10), "b": torch.randn(10), "n": np.arange(5.0), "step": 4}
    ckpt.save(state, cluster_dir + "/o", client=client)
    dest = {"w": torch.zeros(100, 10), "b": torch.zeros(3), "n": np.zeros(5)}
    w_before = dest["w"]
    got = ckpt.load(cluster_dir + "/o", client=client, out=dest)
    assert got["w"] is w_before and torch.equal(w_before, state["w"])  # filled in place
    assert torch.equal(got["b"], state["b"]) and dest["b"].shape == (3,)  # shape differs: new
    assert got["n"] is dest["n"] and np.array_equal(dest["n"], state["n"])
    assert got["step"] == 4


def test_leaves_json_cannot_hold_need_allow_pickle(client, cluster_dir):
    from fractions import Fraction
    with pytest.raises(TypeError, match="allow_pickle"):
        ckpt.save({"x": Fraction(1, 3)}, cluster_dir + "/p", client=client)
    ckpt.save({"x": Fraction(1, 3), "t": torch.ones(2)}, cluster_dir + "/p", client=client,
              allow_pickle=True)
    with pytest.raises(TypeError, match="allow_pickle"):
        ckpt.load(cluster_dir + "/p", client=client)
    assert ckpt.load(cluster_dir + "/p", client=client, allow_pickle=True)["x"] == Fraction(1, 3)


def _special_fp32():
    bases = [0x00000000, 0x7F800000, 0x7FC00000, 0x477FF000, 0x477FE000, 0x38800000, 0x33000000,
             0x00800000, 0x7F7F0000, 0x3F800000, 0x387FC000, 0x33800000]
    vals = []
    for b in bases:
        for d in range(-300, 300):
            vals.append((b + d) & 0x7FFFFFFF)
    v = np.array(vals, dtype=np.uint32)
    return np.concatenate([v, v | np.uint32(0x80000000)])


@pytest.mark.parametrize("kind", ["float16", "bfloat16"])
def test_conversion_bit_identical_to_torch(kind):
    rng = np.random.default_rng(1234)
    bits = np.concatenate([rng.integers(0, 1 << 32, size=1 << 23, dtype=np.uint64)
                           .astype(np.uint32), _special_fp32()])
    src = bits.view(np.float32)
    want = torch.from_numpy(src).to(getattr(torch, kind)).view(torch.int16).numpy() \
        .view(np.uint16)
    for threads in (1, 2):
        got = np.empty(len(src), dtype=np.uint16)
        _ciuic.narrow_float32(src, got, kind, threads)
        bad = np.nonzero(got != want)[0]
        assert len(bad) == 0, "0x%08x -> 0x%04x, torch 0x%04x" % (bits[bad[0]], got[bad[0]],
                                                                 want[bad[0]])
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    wide = np.empty(len(halves), dtype=np.float32)
    _ciuic.widen_to_float32(halves, wide, kind)
    ref = torch.from_numpy(halves.view(np.int16)).view(getattr(torch, kind)).float().numpy()
    assert np.array_equal(wide.view(np.uint32), ref.view(np.uint32))


def test_convert_on_save_halves_bytes_and_upcasts(client, cluster_dir):
    w = torch.randn(1000, 300)
    w[0, :4] = torch.tensor([float("nan"), float("inf"), 1e-40, 70000.0])
    state = {"model": {"w": w}, "optim": {"m": w.clone()}}
    stats = ckpt.save(state, cluster_dir + "/c", client=client,
                      convert={"model/*": torch.bfloat16})
    assert stats["bytes_written"] == stats["bytes_in"] - w.numel() * 2
    got = ckpt.load(cluster_dir + "/c", client=client)
    assert got["model"]["w"].dtype == torch.bfloat16
    assert torch.equal(got["model"]["w"].view(torch.int16), w.to(torch.bfloat16).view(torch.int16))
    assert torch.equal(got["optim"]["m"].view(torch.int32), w.view(torch.int32))
    up = ckpt.load(cluster_dir + "/c", client=client, upcast=True, keys=["model"])
    assert list(up.keys()) == ["model"]
    assert up["model"]["w"].dtype == torch.float32
    assert torch.equal(up["model"]["w"].view(torch.int32),
                       w.to(torch.bfloat16).float().view(torch.int32))
    fp16 = ckpt.save(state, cluster_dir + "/h", client=client, convert={"model/*": "float16"})
    assert fp16["bytes_written"] < fp16["bytes_in"]
    h = ckpt.load(cluster_dir + "/h", client=client, keys=["model/w"])["model"]["w"]
    assert torch.equal(h.view(torch.int16), w.to(torch.float16).view(torch.int16))


def test_async_save_copies_before_returning(client, cluster_dir):
    w = torch.arange(1 << 20, dtype=torch.float32)
    h = ckpt.save({"w": w, "step": 3}, cluster_dir + "/a", client=client, async_save=True)
    w.zero_()  # the caller may reuse its tensors at once
    stats = h.wait(timeout=120)
    assert stats["tensors"] == 1 and h.done()
    got = ckpt.load(cluster_dir + "/a", client=client)
    assert torch.equal(got["w"], torch.arange(1 << 20, dtype=torch.float32))
    bad = ckpt.save({"w": torch.ones(1)}, "relative/path", client=client, async_save=True)
    with pytest.raises(OSError):
        bad.wait(timeout=60)


def test_corrupted_byte_names_the_tensor(client, cluster_dir):
    ckpt.save({"enc": {"weight": torch.randn(4096)}, "other": torch.ones(3)},
              cluster_dir + "/x", client=client)
    m = ckpt.manifest(cluster_dir + "/x", client=client)
    info = [t for t in m.tensors() if t["name"] == "enc/weight"][0]
    shard = info["shards"][0]
    f = client.open(m.dir + "/" + shard["file"], "r+b")
    f.seek(shard["offset"] + 100)
    b = f.read(1)
    f.seek(shard["offset"] + 100)
    f.write(bytes([b[0] ^ 0x01]))
    f.close()
    with pytest.raises(OSError, match="enc/weight.*checksum|checksum.*enc/weight"):
        ckpt.load(cluster_dir + "/x", client=client)
    # The other tensor still loads on its own.
    assert torch.equal(ckpt.load(cluster_dir + "/x", client=client, keys=["other"])["other"],
                       torch.ones(3))


def test_sigkill_during_save_leaves_previous_checkpoint(client, cluster_file, cluster_dir):
    root = cluster_dir
    ckpt.save({"v": torch.full((1000,), 1.0), "step": 1}, root + "/step-1", client=client)
    child = textwrap.dedent("""
        import sys, torch, ciuic, ciuic.checkpoint as ckpt
        c = ciuic.connect(sys.argv[1])
        state = {"v": torch.full((1000,), 2.0), "step": 2,
                 "big": [torch.randn(1 << 20) for _ in range(48)]}
        print("ready", flush=True)
        while True:
            ckpt.save(state, sys.argv[2] + "/step-2", client=c)
    """)
    p = subprocess.Popen([sys.executable, "-c", child, cluster_file, root],
                         stdout=subprocess.PIPE, env=dict(os.environ))
    try:
        assert p.stdout.readline().strip() == b"ready"
        deadline = time.time() + 60
        while time.time() < deadline:  # kill it while data files of a save exist
            try:
                names = client.listdir(root + "/step-2")
            except OSError:
                names = []
            if any(n.startswith("data-") for n in names):
                time.sleep(0.05)
                break
            time.sleep(0.01)
        p.send_signal(signal.SIGKILL)
    finally:
        p.kill()
        p.wait(timeout=30)
    for ck in ("step-1", ckpt.latest(root, client=client)):
        got = ckpt.load(root + "/" + ck, client=client)
        assert got["step"] in (1, 2)
        assert torch.equal(got["v"], torch.full((1000,), float(got["step"])))
    try:
        new = ckpt.load(root + "/step-2", client=client)
        assert new["step"] == 2 and len(new["big"]) == 48  # complete
    except FileNotFoundError:
        assert ckpt.latest(root, client=client) == "step-1"  # invisible
    incomplete = ckpt.list_incomplete(root, client=client)
    ckpt.clean_incomplete(root, client=client)
    assert ckpt.list_incomplete(root, client=client) == []
    assert ckpt.load(root + "/step-1", client=client)["step"] == 1
    print("incomplete before cleaning:", incomplete)


_DIST_WORKER = textwrap.dedent("""
    import os, sys, datetime, torch, torch.distributed as dist
    import ciuic, ciuic.checkpoint as ckpt
    rank, world = int(sys.argv[1]), int(sys.argv[2])
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    c = ciuic.connect(sys.argv[3])
    root = sys.argv[4]
    full = torch.arange(10 * 6, dtype=torch.float32).reshape(10, 6)
    lo, hi = [(0, 4), (4, 10)][rank]
    state = {"emb": ckpt.Dim0Shard(full[lo:hi], lo, 10), "bias": torch.ones(6) * 3,
             "step": 77, "mask": ckpt.Dim0Shard(full[lo:hi] > 20, lo, 10)}
    ckpt.save(state, root + "/good", client=c, timeout=60)
    h = ckpt.save(state, root + "/async", client=c, async_save=True, timeout=60)
    h.wait()
    bad = dict(state)
    if rank == 1:
        bad["oops"] = object()  # refused on rank 1 only
    try:
        ckpt.save(bad, root + "/bad", client=c, timeout=60)
        print("rank %d: bad save committed" % rank)
        sys.exit(3)
    except (ckpt.CheckpointError, TypeError) as e:
        print("rank %d: refused: %s" % (rank, e))
    # Every rank must have raised; the failing rank joins the protocol through save's error path.
    dist.barrier()
    dist.destroy_process_group()
""")


def test_distributed_gloo_two_ranks_and_load_at_other_world_size(client, cluster_file,
                                                                  cluster_dir):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    procs = [subprocess.Popen([sys.executable, "-c", _DIST_WORKER, str(r), "2", cluster_file,
                               cluster_dir], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT) for r in range(2)]
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=150)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        outs.append(out.decode())
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out
        assert "refused" in out, out
    full = torch.arange(10 * 6, dtype=torch.float32).reshape(10, 6)
    for name in ("good", "async"):
        got = ckpt.load(cluster_dir + "/" + name, client=client)
        assert torch.equal(got["emb"], full) and torch.equal(got["mask"], full > 20)
        assert torch.equal(got["bias"], torch.ones(6) * 3) and got["step"] == 77
        parts = [ckpt.load(cluster_dir + "/" + name, client=client, shard=(r, 3))["emb"]
                 for r in range(3)]
        assert [len(p) for p in parts] == [4, 3, 3]
        assert torch.equal(torch.cat(parts), full)
    with pytest.raises(FileNotFoundError):
        ckpt.load(cluster_dir + "/bad", client=client)
