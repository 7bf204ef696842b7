"""CiuicDataLoader as torch's DataLoader (issue 19, item 1): the same type, the same arguments
and the same batches as torch's own DataLoader given the same arguments, on a real cluster.

Every comparison runs torch.utils.data.DataLoader over the very same ciuic data set (its
__getitem__ reads a sample with the client) beside CiuicDataLoader, so "the same semantics" is
checked against torch itself, not against a copy of its rules."""

import os
import time

import numpy as np
import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, get_worker_info

from ciuic import CiuicDataLoader, DirectoryDataset

N = 23


def sample_bytes(i):
    return i.to_bytes(4, "little") + bytes([i % 251]) * (100 + 37 * i)


def sample_id(data):
    return int.from_bytes(data[:4], "little")


@pytest.fixture(scope="module")
def ds(client):
    base = "/ds/dropin"
    for i in range(N):
        client.makedirs(f"{base}/c{i % 2}")
        client.write_file(f"{base}/c{i % 2}/{i:04d}.bin", sample_bytes(i))
    return DirectoryDataset(client, base)


def id_of(ds, index):
    """The sample id at data set index `index` (a DirectoryDataset sorts by path)."""
    return sample_id(ds[index][0])


def raw(batch):
    return batch  # collate_fn that keeps the list of (bytes, label)


def as_ids(batches):
    out = []
    for b in batches:
        ids = []
        for data, label in b:
            assert data == sample_bytes(sample_id(data))
            ids.append((sample_id(data), label))
        out.append(ids)
    return out


def both(ds, **kw):
    """Batches of torch's DataLoader and of CiuicDataLoader with the same arguments."""
    theirs = as_ids(DataLoader(ds, collate_fn=raw, **kw))
    ours = as_ids(CiuicDataLoader(ds, collate_fn=raw, **kw))
    return theirs, ours


def test_it_is_a_torch_dataloader_and_a_context_manager(ds):
    with CiuicDataLoader(ds, batch_size=4) as dl:
        assert isinstance(dl, DataLoader)
        assert len(list(dl)) == len(dl) == 6
    dl.close()  # twice is harmless
    assert len(list(dl)) == 6  # and it can run again


@pytest.mark.parametrize("batch_size,drop_last", [(1, False), (4, False), (4, True), (23, True),
                                                  (30, False), (30, True)])
def test_sequential_batches_and_len_match_torch(ds, batch_size, drop_last):
    theirs, ours = both(ds, batch_size=batch_size, drop_last=drop_last)
    assert ours == theirs
    assert len(CiuicDataLoader(ds, batch_size=batch_size, drop_last=drop_last)) == \
        len(DataLoader(ds, batch_size=batch_size, drop_last=drop_last))


def test_a_samplers_order_is_followed_exactly(ds):
    order = [5, 3, 22, 0, 7, 7, 1]  # any iterable of indexes, repeats included
    theirs, ours = both(ds, batch_size=3, sampler=order)
    assert ours == theirs
    assert [i for b in ours for i, _ in b] == [id_of(ds, k) for k in order]
    assert len(CiuicDataLoader(ds, batch_size=3, sampler=order)) == 3
    with pytest.raises(IndexError, match=f"index {N} of a data set of {N}"):
        list(CiuicDataLoader(ds, sampler=[0, N]))


def test_a_batch_samplers_groups_are_the_batches(ds):
    groups = [[4], [0, 1, 2], [22, 21], [9, 9, 9, 9]]
    theirs, ours = both(ds, batch_sampler=groups)
    assert ours == theirs
    assert [[i for i, _ in b] for b in ours] == [[id_of(ds, k) for k in g] for g in groups]
    theirs, ours = both(ds, batch_sampler=BatchSampler(SequentialSampler(ds), 5, True))
    assert ours == theirs and len(ours) == 4


def test_a_generator_shuffles_as_torchs_does(ds):
    theirs = as_ids(DataLoader(ds, batch_size=4, shuffle=True, collate_fn=raw,
                               generator=torch.Generator().manual_seed(11)))
    g = torch.Generator().manual_seed(11)
    dl = CiuicDataLoader(ds, batch_size=4, shuffle=True, collate_fn=raw, generator=g)
    assert as_ids(dl) == theirs
    second = as_ids(dl)  # the next epoch draws a new order from the same generator
    assert sorted(i for b in second for i, _ in b) == list(range(N)) and second != theirs


def test_without_a_sampler_the_seeded_order_is_kept(ds):
    # ciuic's own order (seed, rank split) when no sampler or generator is given.
    a = as_ids(CiuicDataLoader(ds, batch_size=5, shuffle=True, seed=3, collate_fn=raw))
    b = as_ids(CiuicDataLoader(ds, batch_size=5, shuffle=True, seed=3, collate_fn=raw))
    assert a == b and sorted(i for x in a for i, _ in x) == list(range(N))


def test_batch_size_none_yields_single_samples(ds):
    theirs = list(DataLoader(ds, batch_size=None))
    ours = list(CiuicDataLoader(ds, batch_size=None))
    assert len(ours) == len(theirs) == N
    for (d1, l1), (d2, l2) in zip(theirs, ours):
        assert d1 == d2 and int(l1) == int(l2)


def _worker_view(data):
    info = get_worker_info()
    return (sample_id(data), os.getpid(), info.id, info.num_workers, info.seed,
            int(np.random.randint(1 << 30)), int(torch.randint(1 << 30, ())))


def test_workers_get_ids_seeds_and_worker_init_fn(ds, tmp_path):
    marks = tmp_path / "inits"
    marks.mkdir()

    def init(worker_id):
        (marks / f"{worker_id}-{os.getpid()}").write_text("")

    dl = CiuicDataLoader(ds, batch_size=3, num_workers=2, transform=_worker_view,
                         worker_init_fn=init, collate_fn=raw)
    rows = [x for b in dl for x, _ in b]
    assert sorted(r[0] for r in rows) == list(range(N))
    ids = {(r[1], r[2]) for r in rows}
    assert {wid for _, wid in ids} <= {0, 1} and len({pid for pid, _ in ids}) == len(ids)
    assert {r[3] for r in rows} == {2}
    base = {r[4] - r[2] for r in rows}
    assert len(base) == 1  # seed = base_seed + worker id, as torch seeds its workers
    inits = sorted(p.name for p in marks.iterdir())
    assert sorted(f"{wid}-{pid}" for pid, wid in ids) == [i for i in inits
                                                         if int(i.split("-")[1]) in
                                                         {pid for pid, _ in ids}]
    # Two workers draw different numpy and torch random numbers.
    by_worker = {}
    for r in rows:
        by_worker.setdefault(r[2], set()).add((r[5], r[6]))
    if len(by_worker) == 2:
        assert not by_worker[0] & by_worker[1]


def test_persistent_workers_stay_across_epochs(ds):
    def pids(dl):
        return {x[1] for b in dl for x, _ in b}

    with CiuicDataLoader(ds, batch_size=4, num_workers=2, transform=_worker_view,
                         persistent_workers=True, collate_fn=raw) as dl:
        first = pids(dl)
        second = pids(dl)
        assert len(first | second) <= 2  # the same two workers (one may have done all)
    dl2 = CiuicDataLoader(ds, batch_size=4, num_workers=2, transform=_worker_view,
                          collate_fn=raw)
    assert not pids(dl2) & pids(dl2)  # without it each epoch starts new workers
    with pytest.raises(ValueError):
        CiuicDataLoader(ds, persistent_workers=True)  # torch's rule: needs workers


def _slow(data):
    time.sleep(3)
    return data


def test_timeout_raises_as_torchs(ds):
    dl = CiuicDataLoader(ds, batch_size=4, num_workers=1, transform=_slow, timeout=0.5)
    with pytest.raises(RuntimeError, match="timed out after 0.5 seconds"):
        list(dl)
    with pytest.raises(ValueError):
        CiuicDataLoader(ds, timeout=-1)


def _bad_transform(data):
    if sample_id(data) == 7:
        raise KeyError("sample 7 is bad")
    return data


def _bad_collate(batch):
    raise ZeroDivisionError("collate failed")


@pytest.mark.parametrize("workers", [0, 2])
def test_exceptions_in_user_code_reach_the_caller(ds, workers):
    with pytest.raises(KeyError, match="sample 7"):
        list(CiuicDataLoader(ds, batch_size=4, num_workers=workers, transform=_bad_transform))
    with pytest.raises(ZeroDivisionError):
        list(CiuicDataLoader(ds, batch_size=4, num_workers=workers, collate_fn=_bad_collate))
    with pytest.raises(ZeroDivisionError):  # collated in the workers, beside a transform
        list(CiuicDataLoader(ds, batch_size=4, num_workers=workers, collate_fn=_bad_collate,
                             transform=bytes))


def test_resume_with_a_sampler(ds):
    order = list(range(N - 1, -1, -1))
    dl = CiuicDataLoader(ds, batch_size=4, sampler=order, collate_fn=raw)
    it = iter(dl)
    first = [as_ids([next(it)])[0] for _ in range(2)]
    state = dl.state_dict()
    assert state["cursor"] == 8 and state["sampler"] is True
    again = CiuicDataLoader(ds, batch_size=4, sampler=order, collate_fn=raw)
    again.load_state_dict(state)
    rest = as_ids(again)
    assert [i for b in first + rest for i, _ in b] == [id_of(ds, k) for k in order]


class Squares(torch.utils.data.Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, i):
        return i * i


def test_a_data_set_it_cannot_see_into_runs_as_torch(ds):
    with pytest.warns(UserWarning, match="prefetch off"):
        dl = CiuicDataLoader(Squares(), batch_size=4, shuffle=False)
    assert [b.tolist() for b in dl] == [[0, 1, 4, 9], [16, 25, 36, 49], [64, 81]]
    assert isinstance(dl, DataLoader) and len(dl) == 3
    with pytest.raises(TypeError, match="give them to your Squares"):
        CiuicDataLoader(Squares(), transform=lambda x: x)
    with pytest.raises(ValueError):  # torch's own checks still apply
        CiuicDataLoader(ds, sampler=[0, 1], shuffle=True)


# -- Data sets that name their files (issue 19, item 2) ------------------------------------------

def jpeg_bytes(i):
    import io
    from PIL import Image
    rng = np.random.default_rng(1000 + i)
    img = Image.fromarray(rng.integers(0, 256, (24, 16 + i % 5, 3), dtype=np.uint8))
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=90)
    return out.getvalue()


class Listed(torch.utils.data.Dataset):
    """A data set in torchvision's DatasetFolder shape: samples (path, target) and a loader
    taking a path; __getitem__ as DatasetFolder's (what torch's own DataLoader runs)."""

    def __init__(self, samples, loader, transform=None, target_transform=None):
        self.samples, self.loader = samples, loader
        self.transform, self.target_transform = transform, target_transform

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        path, target = self.samples[i]
        x = self.loader(path)
        x = self.transform(x) if self.transform is not None else x
        return x, (self.target_transform(target) if self.target_transform else target)


@pytest.fixture(scope="module")
def jpegs(client):
    base = "/ds/jpeg"
    client.makedirs(base)
    paths = []
    for i in range(12):
        p = f"{base}/img{i:03d}.jpg"
        client.write_file(p, jpeg_bytes(i))
        paths.append(p)
    return paths


def decoded(i):
    import io
    from PIL import Image
    with Image.open(io.BytesIO(jpeg_bytes(i))) as img:
        return torch.from_numpy(np.array(img.convert("RGB"))).permute(2, 0, 1)


def _to_tensor(img):
    return torch.from_numpy(np.array(img)).permute(2, 0, 1)


@pytest.mark.parametrize("form", ["cluster", "url"])
def test_a_data_set_of_image_paths_is_read_ahead_and_decoded_by_its_loader(client, jpegs, form):
    from torchvision.datasets.folder import default_loader
    paths = jpegs if form == "cluster" else ["ciuic://" + p for p in jpegs]
    ds = Listed([(p, i % 3) for i, p in enumerate(paths)], default_loader, transform=_to_tensor,
                target_transform=lambda t: t * 10)
    import warnings as w
    with w.catch_warnings():
        w.simplefilter("error")  # no "prefetch off" warning: it was seen into
        dl = CiuicDataLoader(ds, batch_size=None, client=client)
    got = list(dl)
    assert len(got) == 12
    for i, (x, y) in enumerate(got):
        assert torch.equal(x, decoded(i)) and y == (i % 3) * 10
    assert dl.last_stats["opens"] == 0  # resolved once: no MDS open per sample
    # Shuffled and in workers: every sample once, each decoded right.
    dl = CiuicDataLoader(ds, batch_size=None, shuffle=True, num_workers=2, client=client)
    seen = sorted((int(y) // 10, x.shape) for x, y in dl)
    assert len(seen) == 12


def test_any_loader_gets_a_path_holding_the_prefetched_bytes(client, jpegs):
    def raw_loader(path):
        with open(path, "rb") as f:
            return f.read()

    ds = Listed([(p, 0) for p in jpegs], raw_loader)
    got = [x for x, _ in CiuicDataLoader(ds, batch_size=None, client=client)]
    assert got == [jpeg_bytes(i) for i in range(12)]


def test_local_files_and_missing_files(client, jpegs, tmp_path):
    local = tmp_path / "a.bin"
    local.write_bytes(b"local bytes")
    ds = Listed([(str(local), 0)], lambda p: open(p, "rb").read())
    with pytest.warns(UserWarning, match="a.bin is a local file"):
        dl = CiuicDataLoader(ds, batch_size=None, client=client)
    assert [x for x, _ in dl] == [b"local bytes"]  # run as torch would
    gone = Listed([(jpegs[0], 0), ("/ds/jpeg/no-such.jpg", 0)], lambda p: p)
    with pytest.raises(OSError, match="no-such.jpg"):
        CiuicDataLoader(gone, client=client)


# State in torchdata's StatefulDataLoader shape (issue 19, item 4).

TORCHDATA_KEYS = {"_index_sampler_state", "_sampler_iter_state", "_sampler_iter_yielded",
                  "_num_yielded", "_IterableDataset_len_called", "_shared_seed", "fetcher_state",
                  "dataset_state", "_iterator_finished"}


def test_state_has_torchdata_shape_at_any_point(ds):
    dl = CiuicDataLoader(ds, batch_size=4, shuffle=True, seed=3, collate_fn=raw)
    before = dl.state_dict()
    assert TORCHDATA_KEYS <= set(before)
    assert before["_num_yielded"] == 0 and before["_iterator_finished"] is False
    it = iter(dl)
    for k in range(1, 4):
        next(it)
        state = dl.state_dict()
        assert state["_num_yielded"] == state["_sampler_iter_yielded"] == k
        assert state["cursor"] == 4 * k and state["_iterator_finished"] is False
    list(it)
    done = dl.state_dict()
    assert done["_iterator_finished"] is True and done["_num_yielded"] == (N + 3) // 4
    assert (done["epoch"], done["cursor"]) == (1, 0)
    # Resumed: the count goes on from the state's.
    again = CiuicDataLoader(ds, batch_size=4, shuffle=True, seed=3, collate_fn=raw)
    again.load_state_dict(state)
    it = iter(again)
    next(it)
    assert again.state_dict()["_num_yielded"] == 4
    it.close()


def test_empty_state_starts_afresh_and_old_states_still_load(ds):
    full = as_ids(CiuicDataLoader(ds, batch_size=4, shuffle=True, seed=5, collate_fn=raw))
    dl = CiuicDataLoader(ds, batch_size=4, shuffle=True, seed=5, collate_fn=raw)
    dl.load_state_dict({"epoch": 0, "cursor": 8})  # the shape states had before
    assert as_ids(dl) == full[2:]
    dl.load_state_dict({"epoch": 0, "cursor": 8})
    dl.load_state_dict({})  # torchdata's "no state": the next iteration starts at the beginning
    assert as_ids(dl) == full
    # A bare torchdata state (no ciuic keys) skips its batches in this loader's order.
    dl.load_state_dict({"_sampler_iter_yielded": 3, "_num_yielded": 3,
                        "_iterator_finished": False})
    assert as_ids(dl) == full[3:]
    with pytest.raises(ValueError):
        dl.load_state_dict({"_num_yielded": 3})


@pytest.mark.parametrize("with_generator", [False, True])
def test_resume_with_a_shuffling_sampler_draws_the_same_order(ds, with_generator):
    def make():
        g = torch.Generator().manual_seed(11) if with_generator else None
        return CiuicDataLoader(ds, batch_size=3, sampler=torch.utils.data.RandomSampler(ds),
                               generator=g, collate_fn=raw)

    torch.manual_seed(7)
    dl = make()
    it = iter(dl)
    first = as_ids([next(it), next(it)])
    state = dl.state_dict()
    rest_uninterrupted = as_ids(it)
    torch.manual_seed(12345)  # a restarted process draws other numbers until the state loads
    again = make()
    again.load_state_dict(state)
    assert as_ids(again) == rest_uninterrupted
    assert len(first) * 3 + sum(len(b) for b in rest_uninterrupted) == N


class Numbers(torch.utils.data.Dataset):
    """A data set CiuicDataLoader cannot see into: torch's own code loads it."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


class NumberStream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(range(30))


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("with_generator", [False, True])
def test_torch_path_resumes_as_torchdata_does(workers, with_generator):
    def make():
        g = torch.Generator().manual_seed(4) if with_generator else None
        with pytest.warns(UserWarning, match="prefetch off"):
            return CiuicDataLoader(Numbers(40), batch_size=6, shuffle=True, generator=g,
                                   num_workers=workers)

    torch.manual_seed(1)
    dl = make()
    assert TORCHDATA_KEYS <= set(dl.state_dict())
    it = iter(dl)
    first = [next(it).tolist() for _ in range(3)]
    state = dl.state_dict()
    assert state["_num_yielded"] == 3 and state["_iterator_finished"] is False
    rest = [b.tolist() for b in it]
    assert dl.state_dict()["_iterator_finished"] is True
    torch.manual_seed(99)
    again = make()
    again.load_state_dict(state)
    it = iter(again)
    assert len(it) == len(rest)
    assert [b.tolist() for b in it] == rest
    assert sorted(sum(first + rest, [])) == list(range(40))
    assert again.state_dict()["_num_yielded"] == 3 + len(rest)


def test_torch_path_iterable_data_set_resumes_by_reading_ahead():
    with pytest.warns(UserWarning):
        dl = CiuicDataLoader(NumberStream(), batch_size=4)
    it = iter(dl)
    next(it), next(it)
    state = dl.state_dict()
    with pytest.warns(UserWarning):
        again = CiuicDataLoader(NumberStream(), batch_size=4)
    again.load_state_dict(state)
    assert [b.tolist() for b in again][0] == [8, 9, 10, 11]
    with pytest.raises(ValueError):
        again.load_state_dict({"epoch": 0})
