"""fsspec filesystem for the ``ciuic://`` protocol.

    import fsspec
    with fsspec.open("ciuic:///datasets/a.bin", "rb") as f: ...
    fs = fsspec.filesystem("ciuic", cluster_file="~/ciuic/cluster.conf")

Paths are cluster paths ("ciuic:///a/b" and "/a/b" name the same file). Storage options:
cluster_file (default $CIUIC_CLUSTER, then ~/ciuic/cluster.conf).
"""

import posixpath
import stat as _stat

from fsspec.spec import AbstractFileSystem


class CiuicFileSystem(AbstractFileSystem):
    protocol = "ciuic"
    root_marker = "/"

    def __init__(self, cluster_file=None, client=None, **kwargs):
        super().__init__(cluster_file=cluster_file, **kwargs)
        if client is None:
            from . import connect
            client = connect(cluster_file)
        self.client = client

    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, (list, tuple)):
            return [cls._strip_protocol(p) for p in path]
        path = str(path)
        if path.startswith("ciuic://"):
            path = path[len("ciuic://"):]
        elif path.startswith("ciuic:"):
            path = path[len("ciuic:"):]
        path = "/" + path.lstrip("/")
        return path.rstrip("/") or "/"

    def _info_from_stat(self, path, st):
        kind = "directory" if _stat.S_ISDIR(st.st_mode) else "file"
        return {"name": path, "size": st.st_size if kind == "file" else 0, "type": kind,
                "mode": st.st_mode, "mtime": st.st_mtime, "ino": st.st_ino}

    def info(self, path, **kwargs):
        path = self._strip_protocol(path)
        return self._info_from_stat(path, self.client.stat(path))

    def ls(self, path, detail=True, **kwargs):
        path = self._strip_protocol(path)
        st = self.client.stat(path)
        if not _stat.S_ISDIR(st.st_mode):
            entries = [self._info_from_stat(path, st)]
        else:
            entries = [{"name": posixpath.join(path, name), "size": size if not is_dir else 0,
                        "type": "directory" if is_dir else "file"}
                       for name, is_dir, size in self.client.scandir(path)]
        return entries if detail else [e["name"] for e in entries]

    def _open(self, path, mode="rb", block_size=None, autocommit=True, cache_options=None,
              **kwargs):
        return self.client.open(self._strip_protocol(path), mode)

    def mkdir(self, path, create_parents=True, **kwargs):
        path = self._strip_protocol(path)
        if create_parents:
            self.client.makedirs(path, exist_ok=True)
        else:
            self.client.mkdir(path)

    def makedirs(self, path, exist_ok=False):
        self.client.makedirs(self._strip_protocol(path), exist_ok=exist_ok)

    def rmdir(self, path):
        self.client.rmdir(self._strip_protocol(path))

    def rm_file(self, path):
        self.client.remove(self._strip_protocol(path))

    def _rm(self, path):
        path = self._strip_protocol(path)
        if self.isdir(path):
            self.client.rmdir(path)
        else:
            self.client.remove(path)

    def mv(self, path1, path2, recursive=False, maxdepth=None, **kwargs):
        self.client.rename(self._strip_protocol(path1), self._strip_protocol(path2))

    def cat_file(self, path, start=None, end=None, **kwargs):
        path = self._strip_protocol(path)
        if start is None and end is None:
            return self.client.read_file(path)
        with self.client.open(path, "rb") as f:
            size = self.client.stat(path).st_size
            start = 0 if start is None else (start if start >= 0 else max(0, size + start))
            end = size if end is None else (end if end >= 0 else max(0, size + end))
            return f.pread(max(0, end - start), start)

    def pipe_file(self, path, value, **kwargs):
        self.client.write_file(self._strip_protocol(path), value)

    def created(self, path):
        import datetime
        return datetime.datetime.fromtimestamp(self.info(path)["mtime"])

    def modified(self, path):
        return self.created(path)
