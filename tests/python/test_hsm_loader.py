"""CiuicDataLoader with restore_ahead on a real cluster (docs/design.md "HSM policy"): released
sample files are restored before the reader gets to them, in the epoch's exact order, never more
than restore_distance sources past the reader."""
import os
import subprocess
import time

import numpy as np

from ciuic import CiuicDataLoader, DirectoryDataset


def cli(cluster_file, *args):
    env = dict(os.environ, CIUIC_CLUSTER=cluster_file)
    subprocess.run([os.path.join(os.environ["CIUIC_BIN_DIR"], "ciuic"), *args], env=env,
                   check=True, timeout=120, capture_output=True)


def sample(i):
    return i.to_bytes(4, "little") + np.random.default_rng(i).bytes(20000 + i)


def test_released_sources_are_restored_ahead_in_epoch_order(client, cluster_file, cluster_dir):
    n = 12
    for i in range(n):
        client.makedirs(f"{cluster_dir}/c{i % 2}")
        client.write_file(f"{cluster_dir}/c{i % 2}/{i:02d}.bin", sample(i))
    ds = DirectoryDataset(client, cluster_dir)
    cli(cluster_file, "hsm", "archive", "-r", cluster_dir)
    cli(cluster_file, "hsm", "release", "-r", cluster_dir)
    assert all(client.hsm_state(p) == "released" for p in ds.sources)

    dl = CiuicDataLoader(ds, batch_size=4, shuffle=True, seed=5, restore_ahead=1,
                         restore_distance=n)
    expected = [ds.sources[int(ds.source[i])] for i in dl._my_indexes()]
    assert expected != sorted(expected)  # shuffled: the order is the epoch's, not the listing's
    it = iter(dl)
    ahead = dl._restore
    ahead.wait()
    assert ahead.restored == expected
    got = []
    for data, _ in it:
        for d in data:
            i = int.from_bytes(d[:4], "little")
            assert d == sample(i)
            got.append(i)
    assert sorted(got) == list(range(n))
    assert all(client.hsm_state(p) == "archived" for p in ds.sources)


def test_restore_ahead_stays_within_its_distance(client, cluster_file, cluster_dir):
    n = 16
    for i in range(n):
        client.write_file(f"{cluster_dir}/{i:02d}.bin", sample(i))
    ds = DirectoryDataset(client, cluster_dir)
    cli(cluster_file, "hsm", "archive", "-r", cluster_dir)
    cli(cluster_file, "hsm", "release", "-r", cluster_dir)

    dl = CiuicDataLoader(ds, batch_size=2, shuffle=True, seed=3, restore_ahead=2,
                         restore_distance=3)
    assert CiuicDataLoader(ds, restore_ahead=2).restore_distance == 8  # 4 * N by default
    expected = [ds.sources[int(ds.source[i])] for i in dl._my_indexes()]
    it = iter(dl)
    ahead = dl._restore
    ahead.wait()
    time.sleep(0.3)  # a restore past the distance would have started by now
    # Nothing consumed yet: only the first 3 sources, in the epoch's order (the prefetch
    # engine's own reads may restore more: those are bounded by its memory budget instead).
    assert ahead.restored == expected[:3]
    got = []
    for data, _ in it:
        got += [int.from_bytes(d[:4], "little") for d in data]
        for d in data:
            assert d == sample(int.from_bytes(d[:4], "little"))
    assert sorted(got) == list(range(n))
    assert ahead.max_ahead <= 3
    assert set(ahead.restored) <= set(expected) and ahead.restored == expected[:len(ahead.restored)]


def test_restore_ahead_must_not_be_negative(client, cluster_dir):
    client.write_file(f"{cluster_dir}/x.bin", b"x")
    ds = DirectoryDataset(client, cluster_dir)
    try:
        CiuicDataLoader(ds, restore_ahead=-1)
    except ValueError as e:
        assert "restore_ahead" in str(e)
    else:
        raise AssertionError("restore_ahead=-1 accepted")
    try:
        CiuicDataLoader(ds, restore_ahead=1, restore_distance=0)
    except ValueError as e:
        assert "restore_distance" in str(e)
    else:
        raise AssertionError("restore_distance=0 accepted")
