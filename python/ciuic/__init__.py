"""ciuic: Python access to a ciuic cluster (files, data loader, checkpoints).

    import ciuic
    fs = ciuic.connect()                 # $CIUIC_CLUSTER, then ~/ciuic/cluster.conf
    with fs.open("/data/a.bin", "wb") as f:
        f.write(b"...")

Errors raise OSError with the errno of the failure (FileNotFoundError, PermissionError...).
Every blocking call releases the GIL.
"""

import os as _os

from . import _ciuic  # noqa: F401
from ._ciuic import Client, File  # noqa: F401


def connect(cluster_file=None, io_threads=1, readahead_bytes=8 << 20):
    """Connect to a ciuic cluster and return a ciuic._ciuic.Client.

    cluster_file: path of the cluster file written by `ciuic cluster up`; None means
    $CIUIC_CLUSTER, then ~/ciuic/cluster.conf.
    """
    if cluster_file is not None:
        cluster_file = _os.fspath(cluster_file)
    return _ciuic.connect(cluster_file or "", io_threads=io_threads,
                          readahead_bytes=readahead_bytes)
