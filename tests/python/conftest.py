"""Fixtures for the Python tests: one real local cluster (`ciuic cluster up` of the built
binaries in a temp dir) for the whole session, stopped at the end (also on failure).

CIUIC_BIN_DIR names the directory of ciuic, ciuic-mds and ciuic-oss (ctest sets it);
PYTHONPATH must reach <build>/python.
"""

import os
import shutil
import subprocess
import tempfile

import pytest


def _bin_dir():
    d = os.environ.get("CIUIC_BIN_DIR")
    if not d or not os.path.exists(os.path.join(d, "ciuic")):
        raise RuntimeError("set CIUIC_BIN_DIR to the directory holding the built `ciuic` binary")
    return d


@pytest.fixture(scope="session")
def cluster_file():
    cli = os.path.join(_bin_dir(), "ciuic")
    tmp = tempfile.mkdtemp(prefix="ciuic-pytest-")
    cdir = os.path.join(tmp, "cluster")
    try:
        subprocess.run([cli, "cluster", "up", cdir, "--oss", "2", "--osts-per-oss", "1"],
                       check=True, timeout=120, capture_output=True)
        yield os.path.join(cdir, "cluster.conf")
    finally:
        subprocess.run([cli, "cluster", "down", cdir], timeout=120, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="session")
def client(cluster_file):
    import ciuic
    c = ciuic.connect(cluster_file)
    yield c
    c.close()


@pytest.fixture
def cluster_dir(client, request):
    """A fresh cluster directory per test, named after it."""
    path = "/t/" + request.node.name.replace("[", "_").replace("]", "_")
    client.makedirs(path)
    return path
