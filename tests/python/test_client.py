"""The ciuic Python client: files round-trip against a local copy; errors are OSErrors."""

import errno
import os
import threading

import numpy as np
import pytest

import ciuic


def test_round_trip_against_local_copy(client, cluster_dir, tmp_path):
    rng = np.random.default_rng(1)
    for i, size in enumerate([0, 1, 4095, 4096, 1 << 20, (3 << 20) + 17]):
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        local = tmp_path / f"f{i}"
        local.write_bytes(data)
        path = f"{cluster_dir}/f{i}"
        with client.open(path, "wb") as f:
            half = size // 2
            assert f.write(data[:half]) == half
            assert f.write(memoryview(data)[half:]) == size - half
            assert f.tell() == size
        assert client.stat(path).st_size == size
        with client.open(path, "rb") as f:
            assert f.read() == local.read_bytes()
            f.seek(size // 3)
            assert f.read(100) == data[size // 3:size // 3 + 100]
            f.seek(-min(size, 10), os.SEEK_END)
            assert f.read() == data[size - min(size, 10):]
            assert f.read(5) == b""
        # readinto fills caller memory directly: numpy array, bytearray, memoryview slice.
        arr = np.empty(size, dtype=np.uint8)
        with client.open(path, "rb") as f:
            assert f.readinto(arr) == size
        assert arr.tobytes() == data
        buf = bytearray(size + 10)
        with client.open(path, "rb") as f:
            assert f.readinto(memoryview(buf)[5:]) == size
        assert bytes(buf[5:5 + size]) == data


def test_namespace_operations(client, cluster_dir):
    client.makedirs(f"{cluster_dir}/a/b/c")
    client.makedirs(f"{cluster_dir}/a/b/c", exist_ok=True)
    with pytest.raises(FileExistsError):
        client.makedirs(f"{cluster_dir}/a/b/c", exist_ok=False)
    client.write_file(f"{cluster_dir}/a/x", b"xyz")
    assert client.listdir(f"{cluster_dir}/a") == ["b", "x"]
    client.rename(f"{cluster_dir}/a/x", f"{cluster_dir}/a/b/y")
    assert client.read_file(f"{cluster_dir}/a/b/y") == b"xyz"
    assert not client.exists(f"{cluster_dir}/a/x")
    client.remove(f"{cluster_dir}/a/b/y")
    with pytest.raises(OSError) as e:
        client.rmdir(f"{cluster_dir}/a")
    assert e.value.errno == errno.ENOTEMPTY
    st = client.stat(f"{cluster_dir}/a")
    assert st.st_mode & 0o170000 == 0o040000


def test_errors_carry_errno(client, cluster_dir):
    with pytest.raises(FileNotFoundError) as e:
        client.open(f"{cluster_dir}/missing", "rb")
    assert e.value.errno == errno.ENOENT and "missing" in str(e.value)
    with pytest.raises(FileNotFoundError):
        client.stat(f"{cluster_dir}/missing")
    client.write_file(f"{cluster_dir}/f", b"1")
    with pytest.raises(FileExistsError):
        client.open(f"{cluster_dir}/f", "xb")
    with pytest.raises(NotADirectoryError):
        client.listdir(f"{cluster_dir}/f")
    with pytest.raises(OSError) as e:
        client.open("relative/path", "rb")
    assert e.value.errno == errno.EINVAL
    with pytest.raises(ValueError):
        client.open(f"{cluster_dir}/f", "r")  # text mode refused
    f = client.open(f"{cluster_dir}/f", "rb")
    f.close()
    with pytest.raises(ValueError):
        f.read()
    with client.open(f"{cluster_dir}/f", "rb") as f:
        with pytest.raises(OSError):
            f.write(b"no")  # opened read-only


def test_connect_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        ciuic.connect(str(tmp_path / "nope.conf"))


def test_gil_released_during_io(client, cluster_dir):
    # Another Python thread keeps running while reads block in C++.
    data = os.urandom(4 << 20)
    client.write_file(f"{cluster_dir}/big", data)
    ticks = []
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks.append(1)

    t = threading.Thread(target=spin)
    t.start()
    try:
        for _ in range(5):
            assert client.read_file(f"{cluster_dir}/big") == data
    finally:
        stop.set()
        t.join()
    assert ticks


def test_fsspec_protocol(cluster_file, client, cluster_dir):
    import fsspec
    fs = fsspec.filesystem("ciuic", cluster_file=cluster_file)
    with fsspec.open(f"ciuic://{cluster_dir}/s.bin", "wb", cluster_file=cluster_file) as f:
        f.write(b"hello fsspec")
    assert fs.cat_file(f"ciuic://{cluster_dir}/s.bin") == b"hello fsspec"
    assert fs.cat_file(f"{cluster_dir}/s.bin", start=6) == b"fsspec"
    assert fs.info(f"{cluster_dir}/s.bin")["size"] == 12
    assert fs.ls(cluster_dir, detail=False) == [f"{cluster_dir}/s.bin"]
    with fs.open(f"{cluster_dir}/s.bin", "rb") as f:
        assert f.read(5) == b"hello"
    fs.mv(f"{cluster_dir}/s.bin", f"{cluster_dir}/t.bin")
    assert fs.exists(f"{cluster_dir}/t.bin") and not fs.exists(f"{cluster_dir}/s.bin")
    fs.rm(f"{cluster_dir}/t.bin")
    assert fs.ls(cluster_dir) == []
