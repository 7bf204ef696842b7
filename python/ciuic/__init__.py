"""ciuic: Python access to a ciuic cluster (files, data loader, checkpoints).

    import ciuic
    fs = ciuic.connect()                 # $CIUIC_CLUSTER, then ~/ciuic/cluster.conf
    with fs.open("/data/a.bin", "wb") as f:
        f.write(b"...")

Errors raise OSError with the errno of the failure (FileNotFoundError, PermissionError...).
Every blocking call releases the GIL. See docs/python.md.
"""

import os as _os

from . import _ciuic  # noqa: F401
from ._ciuic import Client, File, Ring, SharedBuffer  # noqa: F401


def connect(cluster_file=None, io_threads=1, readahead_bytes=8 << 20, shm_reads=True):
    """Connect to a ciuic cluster and return a ciuic._ciuic.Client.

    cluster_file: path of the cluster file written by `ciuic cluster up`; None means
    $CIUIC_CLUSTER, then ~/ciuic/cluster.conf. shm_reads=False reads over TCP even from OSSes
    on this machine (which otherwise place the loader's samples in memory shared with it).
    """
    if cluster_file is not None:
        cluster_file = _os.fspath(cluster_file)
    return _ciuic.connect(cluster_file or "", io_threads=io_threads,
                          readahead_bytes=readahead_bytes, shm_reads=shm_reads)


def pack(client, src, dest, shard_bytes=64 << 20):
    """Pack local directory `src` into tar shards + indexes under cluster directory `dest`."""
    return _ciuic.pack(client, _os.fspath(src), dest, shard_bytes)


class Context:
    """What `init_context()` returns: a connected client and the read-ahead depth (in batches)
    that loaders made with `CiuicDataLoader(..., context=ctx)` keep at least in memory."""

    def __init__(self, client, prefetch=4):
        self.client = client
        self.prefetch = prefetch


def init_context(cluster_file=None, prefetch=4):
    """Connect and return a Context (the seed's name for a loader's IO context)."""
    return Context(connect(cluster_file), prefetch)


def async_prefetch(ctx, n):
    """Ask loaders of `ctx` to keep at least `n` batches read ahead (from their next epoch).

    The prefetch engine already reads the whole epoch ahead in its exact order within its memory
    budget; this only raises that budget to hold n batches. Returns ctx."""
    if n < 0:
        raise ValueError("n must be >= 0")
    ctx.prefetch = int(n)
    return ctx


from .data import (CiuicDataLoader, DirectoryDataset, ShardDataset, epoch_order,  # noqa: E402
                   split_for_rank, write_index)

from . import checkpoint  # noqa: E402,F401

try:  # fsspec is optional
    import fsspec as _fsspec

    from .fsspec_fs import CiuicFileSystem  # noqa: E402
    _fsspec.register_implementation("ciuic", CiuicFileSystem, clobber=True)
except ImportError:  # pragma: no cover
    pass

__all__ = ["connect", "Client", "File", "pack", "init_context", "async_prefetch", "Context",
           "CiuicDataLoader", "DirectoryDataset", "ShardDataset", "epoch_order", "split_for_rank",
           "write_index"]


def read_into(file, dest, offset=0):
    """Read len(dest) bytes of `file` at `offset` into `dest` without copies through Python.

    dest: a CUDA tensor (contiguous: read through pinned staging memory and copied on two
    streams, CUDA's runtime loaded at run time), a torch CPU tensor, a numpy array or any
    writable buffer. Returns the bytes read (fewer only at the end of the file).
    """
    if getattr(dest, "is_cuda", False):
        if not dest.is_contiguous():
            raise ValueError("read_into: the CUDA tensor is not contiguous")
        return file.read_to_device(dest.data_ptr(), dest.numel() * dest.element_size(), offset)
    pos = file.tell()
    try:
        file.seek(offset)
        return file.readinto(dest)
    finally:
        file.seek(pos)


def cuda_available():
    """(True, "") when a CUDA runtime can be loaded ($CIUIC_CUDART, libcudart.so), else (False,
    the reason)."""
    return _ciuic.cuda_available()
