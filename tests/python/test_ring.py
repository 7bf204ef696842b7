"""ciuic.SharedBuffer and ciuic.Ring (include/ciuic/ring.h), and File.readinto without copies,
on the session's real local cluster: numpy and torch views of the buffer, ring reads and writes,
per-IO errors, timeouts and bad input."""

import errno
import os

import numpy as np
import pytest

import ciuic


def write_file(client, path, data):
    with client.open(path, "wb") as f:
        f.write(data)


def test_shared_buffer_is_viewed_without_copies(client):
    buf = ciuic.SharedBuffer(client, 1 << 20)
    assert len(buf) == 1 << 20
    a = np.frombuffer(buf, dtype=np.uint8)
    a[:4] = [1, 2, 3, 4]
    assert bytes(memoryview(buf)[:4]) == b"\x01\x02\x03\x04"
    torch = pytest.importorskip("torch")
    t = torch.frombuffer(buf, dtype=torch.float32)
    assert t.numel() == (1 << 20) // 4
    # Both alias the region itself: the same address, no copy.
    assert t.data_ptr() == a.ctypes.data == np.frombuffer(buf, dtype=np.uint8).ctypes.data
    t[1] = 2.5
    assert np.frombuffer(buf, dtype=np.float32)[1] == 2.5


def test_ring_writes_then_reads_through_the_buffer(client, cluster_dir):
    data = os.urandom(8 << 20)
    buf = ciuic.SharedBuffer(client, 16 << 20)
    view = np.frombuffer(buf, dtype=np.uint8)
    view[: len(data)] = np.frombuffer(data, dtype=np.uint8)
    path = f"{cluster_dir}/ring.bin"
    with ciuic.Ring(buf, entries=64) as ring:
        with client.open(path, "wb") as f:
            for i in range(8):
                ring.prep_write(f, i << 20, 1 << 20, buffer_offset=i << 20, user_data=("w", i))
            assert ring.prepared == 8
            assert ring.submit() == 8
            done = []
            while len(done) < 8:
                done += ring.wait(min_complete=1)
        assert sorted(done) == [(("w", i), 1 << 20) for i in range(8)]
        with client.open(path, "rb") as f:
            assert f.read() == data
            # Read back in a shuffled order into the second half, plus one read past the end.
            order = [5, 2, 7, 0, 3, 6, 1, 4]
            for i in order:
                ring.prep_read(f, i << 20, 1 << 20, buffer_offset=(8 + i) << 20, user_data=i)
            ring.prep_read(f, 8 << 20, 4096, buffer_offset=0, user_data="end")
            ring.submit()
            done = ring.wait(min_complete=9, max=16)
        assert sorted(done, key=str) == sorted([(i, 1 << 20) for i in order] + [("end", 0)],
                                               key=str)
        assert bytes(view[8 << 20: 16 << 20]) == data


def test_ring_errors_are_per_io_and_bad_input_is_refused(client, cluster_dir):
    path = f"{cluster_dir}/small"
    write_file(client, path, b"x" * 10000)
    buf = ciuic.SharedBuffer(client, 1 << 20)
    ring = ciuic.Ring(buf, entries=4)
    with client.open(path, "rb") as f:
        ring.prep_read(f, 0, 4096, user_data="ok")
        ring.prep_write(f, 0, 4096, buffer_offset=4096, user_data="ro")  # opened read-only
        ring.submit()
        got = dict(ring.wait(min_complete=2))
        assert got["ok"] == 4096
        assert got["ro"] < 0
        with pytest.raises(OSError) as e:
            ring.prep_read(f, 0, 8192, buffer_offset=(1 << 20) - 4096)
        assert e.value.errno == errno.EINVAL
        assert "outside" in str(e.value)
        with pytest.raises(OSError):
            ring.prep_read(f, 0, 0)
        with pytest.raises(TypeError):
            ring.prep_read(b"not a file", 0, 4096)
        with pytest.raises(OSError) as e:  # nothing in flight to wait for
            ring.wait(min_complete=1, timeout=0)
        assert e.value.errno == errno.EINVAL
        for i in range(4):
            ring.prep_read(f, 0, 4096, user_data=i)
        with pytest.raises(OSError) as e:
            ring.prep_read(f, 0, 4096)
        assert e.value.errno == errno.EBUSY
        ring.submit()
        assert len(ring.wait(min_complete=4)) == 4
    ring.close()
    with pytest.raises(ValueError):
        ring.submit()


def test_readinto_numpy_and_torch_without_copies(client, cluster_dir):
    data = os.urandom(3 << 20)
    path = f"{cluster_dir}/tensor.bin"
    write_file(client, path, data)
    with client.open(path, "rb") as f:
        a = np.empty(len(data), dtype=np.uint8)
        assert f.readinto(a) == len(data)
        assert a.tobytes() == data
    torch = pytest.importorskip("torch")
    t = torch.empty(len(data) // 4, dtype=torch.float32)
    with client.open(path, "rb") as f:
        assert f.readinto(t) == len(data)
    assert t.numpy().tobytes() == data
    # A tensor over a SharedBuffer: the OSS places the bytes in it.
    buf = ciuic.SharedBuffer(client, len(data))
    st = torch.frombuffer(buf, dtype=torch.uint8)
    with client.open(path, "rb") as f:
        assert f.readinto(st) == len(data)
    assert bytes(memoryview(buf)[: len(data)]) == data
    with client.open(path, "rb") as f:
        with pytest.raises((BufferError, ValueError)):
            f.readinto(t[::2])  # not contiguous


CUDA_SCRIPT = r"""
import os, sys, numpy as np, ciuic
ok, why = ciuic.cuda_available()
if os.environ["CIUIC_CUDART"].startswith("/nonexistent"):
    assert not ok and "/nonexistent" in why, why
    print("absent ok")
    sys.exit(0)
assert ok, why

class FakeCudaTensor:
    # What read_into needs of a CUDA tensor; its "device memory" is a numpy array, which the
    # fake runtime treats as device memory.
    def __init__(self, n):
        self.arr = np.zeros(n, dtype=np.uint8)
        self.is_cuda = True
    def is_contiguous(self): return True
    def data_ptr(self): return self.arr.ctypes.data
    def numel(self): return self.arr.size
    def element_size(self): return 1

fs = ciuic.connect(sys.argv[1])
data = os.urandom((9 << 20) + 123)
with fs.open(sys.argv[2], "wb") as f:
    f.write(data)
t = FakeCudaTensor(len(data) - 1000)
with fs.open(sys.argv[2], "rb") as f:
    assert ciuic.read_into(f, t, offset=1000) == len(data) - 1000
    assert t.arr.tobytes() == data[1000:]
    assert f.tell() == 0
    a = np.zeros(100, dtype=np.uint8)
    assert ciuic.read_into(f, a, offset=5) == 100 and a.tobytes() == data[5:105]
print("device ok")
"""


@pytest.mark.parametrize("runtime", ["fake", "absent"])
def test_read_into_a_device_through_the_cuda_runtime(cluster_file, cluster_dir, runtime):
    import subprocess
    import sys
    fake = os.environ.get("CIUIC_FAKE_CUDART")
    if runtime == "fake" and not fake:
        pytest.skip("CIUIC_FAKE_CUDART not set (ctest sets it to tests/cuda's fake runtime)")
    env = dict(os.environ, CIUIC_CUDART=fake if runtime == "fake" else "/nonexistent/cudart.so")
    r = subprocess.run([sys.executable, "-c", CUDA_SCRIPT, cluster_file, f"{cluster_dir}/w.bin"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert ("device ok" if runtime == "fake" else "absent ok") in r.stdout


CHECKPOINT_CUDA_SCRIPT = r"""
import os, sys, numpy as np, torch, ciuic
import ciuic.checkpoint as ck
fs = ciuic.connect(sys.argv[1])
path = sys.argv[2]
g = torch.Generator().manual_seed(3)
state = {"model": {"w": torch.randn(300000, generator=g),
                   "b": torch.randn(64, 33, generator=g).to(torch.bfloat16)},
         "steps": torch.arange(1000, dtype=torch.int64), "np": np.arange(10), "epoch": 4}
ck.save(state, path, client=fs)
if os.environ["CIUIC_CUDART"].startswith("/nonexistent"):
    # No runtime ciuic can load: map_location keeps torch's meaning (load, then .to).
    assert ck._cuda_target("cuda") is None
    assert ck._cuda_target("cpu") is None
    print("absent ok")
    sys.exit(0)
assert ck._cuda_target("cuda:1") == torch.device("cuda:1")
assert ck._cuda_target("cpu") is None
# This torch may have no CUDA: "device memory" comes from the test, as the fake runtime treats
# host memory as device memory. Each tensor is made here and filled by the device path.
made = []
def device_empty(name, shape, device):
    assert device.type == "cuda"
    t = torch.full(shape, 7, dtype=getattr(torch, name))
    made.append(t)
    return t
ck._device_empty = device_empty
got = ck.load(path, map_location="cuda", client=fs)
assert len(made) == 3, len(made)
assert any(got["model"]["w"] is t for t in made)
assert torch.equal(got["model"]["w"], state["model"]["w"])
assert torch.equal(got["model"]["b"], state["model"]["b"])
assert torch.equal(got["steps"], state["steps"])
assert isinstance(got["np"], np.ndarray) and np.array_equal(got["np"], state["np"])
assert got["epoch"] == 4
made.clear()
up = ck.load(path, map_location=torch.device("cuda", 0), client=fs, upcast=True,
             keys=["model/b"])
assert len(made) == 1 and up["model"]["b"].dtype == torch.float32
assert torch.equal(up["model"]["b"], state["model"]["b"].float())
print("device ok")
"""


@pytest.mark.parametrize("runtime", ["fake", "absent"])
def test_checkpoint_loads_straight_to_a_device(cluster_file, cluster_dir, runtime):
    import subprocess
    import sys
    pytest.importorskip("torch")
    fake = os.environ.get("CIUIC_FAKE_CUDART")
    if runtime == "fake" and not fake:
        pytest.skip("CIUIC_FAKE_CUDART not set (ctest sets it to tests/cuda's fake runtime)")
    env = dict(os.environ, CIUIC_CUDART=fake if runtime == "fake" else "/nonexistent/cudart.so")
    r = subprocess.run([sys.executable, "-c", CHECKPOINT_CUDA_SCRIPT, cluster_file,
                        f"{cluster_dir}/ck"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert ("device ok" if runtime == "fake" else "absent ok") in r.stdout
