"""Parallel, atomic checkpoints of nested state dicts on a ciuic cluster.

    import ciuic.checkpoint as ckpt
    ckpt.save({"model": model.state_dict(), "optim": opt.state_dict(), "step": 100},
              "/ckpt/step-100", convert={"model/*": "bfloat16"})
    state = ckpt.load("/ckpt")                  # the checkpoint /ckpt/latest names
    state = ckpt.load("/ckpt/step-100", keys=["model"], upcast=True)

Tensors (torch or numpy) go to the C++ engine (src/checkpoint): wide-striped data files, many
writes in flight, a CRC32C per 4 MiB, a manifest committed last (temp name, fsync, rename), a
`latest` pointer in the parent directory. Tensor names are the '/'-joined keys of the nested
structure ("optim/state/0/exp_avg"); `convert` maps glob patterns over those names to
"float16"/"bfloat16" (fp32 tensors only; the first matching pattern wins).

Non-tensor leaves (step counters, hyper-parameters) are stored as JSON in the manifest when JSON
holds them exactly (None, bool, int, float incl. nan/inf, str, bytes, lists, tuples, dicts with
str/int/float/bool/None keys). Anything else raises TypeError unless allow_pickle=True.

With torch.distributed initialized, every rank calls save(): plain tensors and leaves are taken
from rank 0 (replicated), Dim0Shard(...) leaves are written by every rank; rank 0 commits after
all ranks finished (monitored barrier with `timeout`), and a failure anywhere commits nothing and
raises on every rank. load(..., shard=(rank, world)) splits Dim0Shard tensors for another world
size. See docs/checkpoint.md.
"""

import base64
import json
import math
import os
import pickle
import threading
import time
import uuid

import numpy as np

from . import _ciuic

__all__ = ["save", "load", "Dim0Shard", "SaveHandle", "latest", "list_incomplete",
           "clean_incomplete", "manifest", "CheckpointError"]


class CheckpointError(RuntimeError):
    """A distributed save that failed on some rank (nothing was committed)."""


_default_client = None
_default_lock = threading.Lock()


def _client(client):
    global _default_client
    if client is not None:
        return client
    with _default_lock:
        if _default_client is None:
            from . import connect
            _default_client = connect()
        return _default_client


def _torch():
    try:
        import torch
        return torch
    except ImportError:  # pragma: no cover
        return None


class Dim0Shard:
    """Marks `tensor` as rows [offset, offset + len(tensor)) of a tensor with `global_rows` rows
    (split along dimension 0 across ranks). Only meaningful in save()."""

    def __init__(self, tensor, offset, global_rows):
        self.tensor = tensor
        self.offset = int(offset)
        self.global_rows = int(global_rows)
        if self.offset < 0 or self.offset + tensor.shape[0] > self.global_rows:
            raise ValueError("Dim0Shard: rows [%d, %d) outside [0, %d)"
                             % (self.offset, self.offset + tensor.shape[0], self.global_rows))


# ---- tensors <-> raw buffers ------------------------------------------------------------------

_NUMPY_SAME_SIZE = {"bfloat16": "int16", "complex32": "int32"}


def _is_tensor(x):
    torch = _torch()
    return (torch is not None and isinstance(x, torch.Tensor)) or isinstance(x, np.ndarray)


def _dtype_name(x):
    if isinstance(x, np.ndarray):
        if x.dtype.kind not in "biufc" or x.dtype.byteorder == ">":
            raise TypeError("numpy dtype %s cannot be checkpointed" % x.dtype)
        return "np:" + x.dtype.name
    name = str(x.dtype).replace("torch.", "")
    if name.startswith("q") or name.startswith("quint"):
        raise TypeError("quantized tensors (%s) cannot be checkpointed" % name)
    return name


def _raw(x, copy):
    """(dtype name, shape, contiguous numpy view of the bytes) of a tensor or ndarray."""
    if isinstance(x, np.ndarray):
        arr = np.ascontiguousarray(x)
        if copy and arr is x:
            arr = arr.copy()
        return _dtype_name(x), list(x.shape), arr
    t = x.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    elif copy:
        # A staging copy for async saves: fresh memory mapped in one call, then filled (a page
        # fault per 4 KiB page costs more than the copy itself in a VM).
        src = t
        t = _fresh_tensor(src.shape, src.dtype)
        if t.numel():
            _ciuic.prefault(t.data_ptr(), t.numel() * t.element_size())
        t.copy_(src)
    t = t.contiguous()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    name = _dtype_name(t)
    torch = _torch()
    if name in _NUMPY_SAME_SIZE:
        arr = t.view(getattr(torch, _NUMPY_SAME_SIZE[name])).numpy()
    else:
        arr = t.numpy()
    return name, list(t.shape), arr


def _engine_dtype(name):
    return name[3:] if name.startswith("np:") else name


# Tensors at least this large are allocated in huge-page-backed fresh memory (see _fresh_tensor).
_FRESH_MIN_BYTES = 1 << 20


def _fresh_tensor(shape, dtype):
    """torch.empty(shape, dtype=dtype), except that a large tensor lives in memory mapped with
    transparent huge pages (_ciuic.fresh_buffer): in a VM the first write to each 4 KiB page of
    new memory is a trap that costs more than the copy into it, and filling a loaded tensor or a
    staging copy is exactly such a first write (measured: 0.3-0.4 GiB/s with 4 KiB pages,
    ~12 GiB/s with 2 MiB pages). The tensor keeps its buffer alive."""
    torch = _torch()
    n = math.prod(shape)
    itemsize = torch.empty((), dtype=dtype).element_size()
    if n * itemsize < _FRESH_MIN_BYTES:
        return torch.empty(shape, dtype=dtype)
    buf = _ciuic.fresh_buffer(n * itemsize)
    return torch.frombuffer(buf, dtype=torch.uint8).view(dtype).view(tuple(shape))


def _empty(name, shape, as_numpy):
    """A new tensor (or ndarray) of dtype `name` and its writable numpy view."""
    if name.startswith("np:"):
        dt = np.dtype(name[3:])
        n = math.prod(shape) * dt.itemsize
        if n < _FRESH_MIN_BYTES:
            arr = np.empty(shape, dtype=dt)
        else:
            arr = np.frombuffer(_ciuic.fresh_buffer(n), dtype=dt).reshape(shape)
        return arr, arr
    torch = _torch()
    t = _fresh_tensor(shape, getattr(torch, name))
    if name in _NUMPY_SAME_SIZE:
        return t, t.view(getattr(torch, _NUMPY_SAME_SIZE[name])).numpy()
    return t, t.numpy()


# ---- structure <-> JSON -----------------------------------------------------------------------

_INT64 = 1 << 63


def _key_json(k):
    if k is None or isinstance(k, (bool, str)):
        return k
    if isinstance(k, int):
        return {"__int__": str(k)}
    if isinstance(k, float):
        return {"__float__": repr(k)}
    raise TypeError("dict key %r of type %s cannot be checkpointed" % (k, type(k).__name__))


def _key_from(j):
    if isinstance(j, dict):
        if "__int__" in j:
            return int(j["__int__"])
        return float(j["__float__"])
    return j


def _name_part(k):
    s = str(k)
    return s.replace("/", "%2F")


class _Flattener:
    def __init__(self, allow_pickle, rank, world):
        self.allow_pickle = allow_pickle
        self.rank = rank
        self.world = world
        self.tensors = []       # dicts for the engine
        self.by_id = {}         # id(tensor object) -> name (one tensor saved once)
        self.names = set()

    def leaf_name(self, path):
        name = "/".join(path) if path else "_"
        if name in self.names:
            raise ValueError("two leaves map to tensor name %r" % name)
        self.names.add(name)
        return name

    def tensor(self, x, path, copy):
        if id(x) in self.by_id:
            return {"__tensor__": self.by_id[id(x)]}
        name = self.leaf_name(path)
        self.by_id[id(x)] = name
        shard = None
        if isinstance(x, Dim0Shard):
            shard, x = x, x.tensor
        dtype, shape, arr = _raw(x, copy)
        if shard is None and self.rank != 0:
            return {"__tensor__": name}  # replicated: rank 0 writes it
        if shard is not None and len(shape) == 0:
            raise ValueError("Dim0Shard of a 0-d tensor %r" % name)
        entry = {"name": name, "dtype": _engine_dtype(dtype), "shape": shape,
                 "data": arr.reshape(-1).view(np.uint8) if arr.size else arr.view(np.uint8),
                 "_keep": arr}
        if shard is not None:
            entry["global_shape"] = [shard.global_rows] + shape[1:]
            entry["offsets"] = [shard.offset] + [0] * (len(shape) - 1)
        self.tensors.append(entry)
        node = {"__tensor__": name}
        if dtype.startswith("np:"):
            node["numpy"] = True
        if shard is not None:
            node["dim0"] = True
        return node

    def walk(self, x, path, copy):
        if isinstance(x, Dim0Shard) or _is_tensor(x):
            return self.tensor(x, path, copy)
        if x is None or isinstance(x, (bool, str)):
            return x
        if isinstance(x, int):
            return x if -_INT64 <= x < _INT64 else {"__int__": str(x)}
        if isinstance(x, float):
            return x if math.isfinite(x) else {"__float__": repr(x)}
        if isinstance(x, bytes):
            return {"__bytes__": base64.b64encode(x).decode()}
        if isinstance(x, dict):
            items = [[_key_json(k), self.walk(v, path + [_name_part(k)], copy)]
                     for k, v in x.items()]
            return {"__dict__": items, "__type__": "OrderedDict"
                    if type(x).__name__ == "OrderedDict" else "dict"}
        if isinstance(x, (list, tuple)):
            items = [self.walk(v, path + [str(i)], copy) for i, v in enumerate(x)]
            return items if isinstance(x, list) else {"__tuple__": items}
        if self.allow_pickle:
            return {"__pickle__": base64.b64encode(pickle.dumps(x)).decode()}
        raise TypeError("leaf %r of type %s is neither a tensor nor JSON-representable; pass "
                        "allow_pickle=True to store it with pickle" % ("/".join(path),
                                                                       type(x).__name__))


def _unflatten(j, tensors, allow_pickle, path=(), select=None):
    """Rebuilds the structure; `select(path)` False drops a subtree (returns _SKIP)."""
    if select is not None and not select(path):
        return _SKIP
    if isinstance(j, list):
        out = [_unflatten(v, tensors, allow_pickle, path + (str(i),), select)
               for i, v in enumerate(j)]
        return [v for v in out if v is not _SKIP]
    if not isinstance(j, dict):
        return j
    if "__tensor__" in j:
        return tensors.get(j["__tensor__"], _SKIP)
    if "__int__" in j:
        return int(j["__int__"])
    if "__float__" in j:
        return float(j["__float__"])
    if "__bytes__" in j:
        return base64.b64decode(j["__bytes__"])
    if "__tuple__" in j:
        out = [_unflatten(v, tensors, allow_pickle, path + (str(i),), select)
               for i, v in enumerate(j["__tuple__"])]
        return tuple(v for v in out if v is not _SKIP)
    if "__pickle__" in j:
        if not allow_pickle:
            raise TypeError("leaf %r was stored with pickle; pass allow_pickle=True to load it"
                            % "/".join(path))
        return pickle.loads(base64.b64decode(j["__pickle__"]))
    if "__dict__" in j:
        if j.get("__type__") == "OrderedDict":
            from collections import OrderedDict
            out = OrderedDict()
        else:
            out = {}
        for kj, vj in j["__dict__"]:
            k = _key_from(kj)
            v = _unflatten(vj, tensors, allow_pickle, path + (_name_part(k),), select)
            if v is not _SKIP:
                out[k] = v
        return out
    raise ValueError("bad checkpoint structure node %r" % (j,))


class _Skip:
    pass


_SKIP = _Skip()


def _tensor_nodes(j, out):
    if isinstance(j, list):
        for v in j:
            _tensor_nodes(v, out)
    elif isinstance(j, dict):
        if "__tensor__" in j:
            out[j["__tensor__"]] = j
        for key in ("__tuple__",):
            if key in j:
                _tensor_nodes(j[key], out)
        if "__dict__" in j:
            for _, v in j["__dict__"]:
                _tensor_nodes(v, out)
    return out


# ---- save -------------------------------------------------------------------------------------

def _options(convert, extra, chunk_bytes, stripe_count, convert_threads):
    rules = []
    for pattern, to in (convert or {}).items():
        to = str(to).replace("torch.", "")
        if to not in ("float16", "bfloat16"):
            raise ValueError("convert target must be float16 or bfloat16, not %r" % to)
        rules.append((pattern, to))
    opts = {"convert": rules, "extra_json": json.dumps(extra, allow_nan=False),
            "convert_threads": convert_threads}
    if chunk_bytes:
        opts["chunk_bytes"] = int(chunk_bytes)
    if stripe_count:
        opts["stripe_count"] = int(stripe_count)
    return opts


def _dist():
    torch = _torch()
    if torch is None:
        return None
    d = torch.distributed
    if d.is_available() and d.is_initialized() and d.get_world_size() > 1:
        return d
    return None


class SaveHandle:
    """What save(..., async_save=True) returns. wait() blocks until the save is committed and
    returns its stats, or raises its error. done() tells without blocking (single process)."""

    def __init__(self, thread, box, finish=None):
        self._thread = thread
        self._box = box
        self._finish = finish
        self._result = None

    def done(self):
        return not self._thread.is_alive()

    def wait(self, timeout=None):
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError("checkpoint save still running after %s s" % timeout)
        if self._result is None:
            if self._finish is not None:  # distributed: the commit protocol runs here
                self._result = self._finish(self._box)
            elif "error" in self._box:
                raise self._box["error"]
            else:
                self._result = self._box["stats"]
        return self._result


def save(state_dict, path, convert=None, async_save=False, client=None, allow_pickle=False,
         timeout=600.0, chunk_bytes=None, stripe_count=None, convert_threads=1):
    """Save `state_dict` (nested dicts/lists/tuples of tensors and plain values) as checkpoint
    `path` in the cluster. Returns stats {bytes_in, bytes_written, tensors, seconds}, or a
    SaveHandle with async_save=True (tensors are copied to host memory before it returns)."""
    cl = _client(client)
    dist = _dist()
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist else (0, 1)
    box = {}
    try:
        flat = _Flattener(allow_pickle, rank, world)
        tree = flat.walk(state_dict, [], copy=async_save)
        opts = _options(convert, {"ciuic_python": 1, "tree": tree}, chunk_bytes, stripe_count,
                        convert_threads)
        tensors = flat.tensors
    except Exception as e:
        if dist is None:
            raise
        box["error"] = e  # every rank must still take part in the commit protocol
        opts, tensors = None, None
    if dist is None:
        if not async_save:
            return _ciuic.checkpoint_save(cl, path, tensors, opts)

        def run():
            try:
                box["stats"] = _ciuic.checkpoint_save(cl, path, tensors, opts)
            except BaseException as e:  # noqa: B902 - handed to wait()
                box["error"] = e

        th = threading.Thread(target=run, name="ciuic-ckpt-save", daemon=True)
        th.start()
        return SaveHandle(th, box)

    ids = [uuid.uuid4().hex[:16] if rank == 0 else None]
    dist.broadcast_object_list(ids, src=0)
    save_id = ids[0]

    def write():
        if "error" in box:
            return
        try:
            box["stats"] = _ciuic.checkpoint_save_shard(cl, path, save_id, rank, tensors, opts)
        except BaseException as e:  # noqa: B902 - reported through the commit protocol
            box["error"] = e

    def finish(b):
        return _commit_all(dist, cl, path, save_id, rank, world, opts, b, timeout)

    if async_save:
        th = threading.Thread(target=write, name="ciuic-ckpt-save", daemon=True)
        th.start()
        return SaveHandle(th, box, finish)
    write()
    return finish(box)


def _commit_all(dist, cl, path, save_id, rank, world, opts, box, timeout):
    from datetime import timedelta
    err = box.get("error")
    mine = None if err is None else "rank %d: %s" % (rank, err)
    try:
        if dist.get_backend() == "gloo":
            dist.monitored_barrier(timeout=timedelta(seconds=timeout), wait_all_ranks=True)
        else:
            dist.barrier()
        states = [None] * world
        dist.all_gather_object(states, mine)
    except Exception as e:  # a rank died or timed out
        _ciuic.checkpoint_abort(cl, path, save_id)
        raise CheckpointError("checkpoint %s not committed: barrier failed on rank %d: %s"
                              % (path, rank, e)) from e
    failed = [s for s in states if s is not None]
    result = [None]
    if rank == 0:
        if failed:
            result[0] = "; ".join(failed)
        else:
            try:
                _ciuic.checkpoint_commit(cl, path, save_id, world, opts)
            except Exception as e:
                result[0] = "commit on rank 0: %s" % e
    try:
        dist.broadcast_object_list(result, src=0)
    except Exception as e:
        raise CheckpointError("checkpoint %s: lost rank 0 during the commit: %s" % (path, e)) \
            from e
    if result[0] is not None:
        _ciuic.checkpoint_abort(cl, path, save_id)
        raise CheckpointError("checkpoint %s not committed: %s" % (path, result[0]))
    return box["stats"]


# ---- load -------------------------------------------------------------------------------------

def manifest(path, client=None):
    """The committed manifest of `path` (or of the checkpoint `path/latest` names)."""
    return _ciuic.checkpoint_manifest(_client(client), path)


def latest(root, client=None):
    """Name of the checkpoint `root/latest` points at, or None."""
    return _ciuic.checkpoint_latest(_client(client), root) or None


def list_incomplete(root, client=None):
    """Incomplete checkpoints under `root` (directories, or files of uncommitted saves)."""
    return _ciuic.checkpoint_list_incomplete(_client(client), root)


def clean_incomplete(root, keep="", client=None, min_age_s=0):
    """Remove what list_incomplete(root) lists, except under `keep` and entries modified less
    than `min_age_s` seconds ago (a save may be in progress there). save() already does this
    after every commit with min_age_s=600."""
    _ciuic.checkpoint_clean_incomplete(_client(client), root, keep, int(min_age_s))


def _split(rows, rank, world):
    base, extra = divmod(rows, world)
    begin = rank * base + min(rank, extra)
    return begin, begin + base + (1 if rank < extra else 0)


def _leaves(x, path, out):
    """Tensor leaves of a nested structure by checkpoint tensor name."""
    if _is_tensor(x):
        out.setdefault("/".join(path) if path else "_", x)
    elif isinstance(x, dict):
        for k, v in x.items():
            _leaves(v, path + [_name_part(k)], out)
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            _leaves(v, path + [str(i)], out)
    return out


def _fits(x, out_dtype, shape):
    """A writable contiguous numpy view of `x` if it can receive a tensor in place, else None."""
    if isinstance(x, np.ndarray):
        ok = ("np:" + x.dtype.name == out_dtype and list(x.shape) == shape
              and x.flags.c_contiguous and x.flags.writeable)
        return x if ok else None
    ok = (str(x.dtype).replace("torch.", "") == out_dtype and list(x.shape) == shape
          and x.device.type == "cpu" and x.is_contiguous() and not x.requires_grad)
    if not ok:
        return None
    torch = _torch()
    if out_dtype in _NUMPY_SAME_SIZE:
        return x.view(getattr(torch, _NUMPY_SAME_SIZE[out_dtype])).numpy()
    return x.numpy()


def _cuda_target(map_location):
    """The torch.device to load straight into when `map_location` names a CUDA device and ciuic
    can load a CUDA runtime (ciuic.cuda_available()); else None (load on the CPU, then .to)."""
    if map_location is None or str(map_location) == "cpu":
        return None
    torch = _torch()
    try:
        dev = torch.device(map_location)
    except (TypeError, RuntimeError):
        return None  # a callable or a dict: torch's own meaning, applied after the load
    if dev.type != "cuda" or not _ciuic.cuda_available()[0]:
        return None
    return dev


def _device_empty(name, shape, device):
    """A new tensor of dtype `name` in `device`'s memory."""
    torch = _torch()
    return torch.empty(shape, dtype=getattr(torch, name), device=device)


def _fits_device(x, out_dtype, shape, device):
    """Whether tensor `x` can receive a tensor in place on `device`."""
    return (x is not None and not isinstance(x, np.ndarray) and getattr(x, "is_cuda", False)
            and str(x.dtype).replace("torch.", "") == out_dtype and list(x.shape) == shape
            and (device.index is None or x.device.index == device.index)
            and x.is_contiguous() and not x.requires_grad)


def load(path, map_location=None, keys=None, client=None, upcast=False, shard=None,
         allow_pickle=False, out=None):
    """Load checkpoint `path` (or the one `path/latest` names) as the nested structure it was
    saved from. keys: tensor-name prefixes to load ("model", "optim/state/0"); None: all.
    upcast: return float16/bfloat16-stored tensors as float32. shard=(rank, world): Dim0Shard
    tensors come back as this rank's even split along dimension 0 (other world sizes welcome);
    otherwise whole. map_location: device for the tensors (default: cpu); a CUDA device gets
    each tensor straight from storage (verified and converted in pinned staging memory, no CPU
    tensor made) when ciuic can load a CUDA runtime (ciuic.cuda_available()), else the tensors
    are loaded on the CPU and moved. out: a nested structure (e.g. the state dict being
    resumed) whose tensors of the same name, shape and dtype (contiguous, on the CPU or on the
    map_location device, not requiring grad) receive the data in place and are returned; saves
    allocating and page-faulting new memory."""
    cl = _client(client)
    m = _ciuic.checkpoint_manifest(cl, path)
    extra = json.loads(m.extra_json) if m.extra_json else None
    if not extra or "tree" not in extra:
        raise ValueError("%s was not saved by ciuic.checkpoint.save" % m.dir)
    tree = extra["tree"]
    nodes = _tensor_nodes(tree, {})
    select = None
    if keys is not None:
        prefixes = [k.strip("/") for k in keys]

        def select(p):
            name = "/".join(p)
            return any(name == k or name.startswith(k + "/") or k.startswith(name + "/")
                       or not name for k in prefixes)
    wanted = {}
    requests = []
    on_device = set()
    device = _cuda_target(map_location)
    out_map = _leaves(out, [], {}) if out is not None else {}
    for info in m.tensors():
        name = info["name"]
        if select is not None and not select(tuple(name.split("/"))):
            continue
        node = nodes.get(name, {})
        stored = info["stored_dtype"]
        out_dtype = "float32" if upcast and stored in ("float16", "bfloat16") else stored
        if node.get("numpy"):
            out_dtype = "np:" + out_dtype
            if out_dtype in ("np:bfloat16",):
                raise TypeError("tensor %r is stored as bfloat16, which numpy lacks; load with "
                                "upcast=True" % name)
        shape = list(info["shape"])
        begin, end = 0, -1
        if shard is not None and node.get("dim0") and shape:
            begin, end = _split(shape[0], shard[0], shard[1])
            shape[0] = end - begin
        target = out_map.get(name)
        widen = out_dtype.endswith("float32") and stored != "float32"
        if device is not None and not node.get("numpy"):
            obj = (target if _fits_device(target, out_dtype, shape, device)
                   else _device_empty(out_dtype, shape, device))
            requests.append((name, (obj.data_ptr(), obj.numel() * obj.element_size()), begin,
                             end, widen))
            wanted[name] = obj
            on_device.add(name)
            continue
        view = _fits(target, out_dtype, shape) if target is not None else None
        if view is not None:
            obj = target
        else:
            obj, view = _empty(out_dtype, shape, node.get("numpy"))
        flat_view = view.reshape(-1).view(np.uint8) if view.size else view.view(np.uint8)
        requests.append((name, flat_view, begin, end, widen))
        wanted[name] = obj
    _ciuic.checkpoint_load(cl, m, requests)
    if map_location is not None and str(map_location) != "cpu":
        wanted = {k: (v.to(map_location) if not isinstance(v, np.ndarray) and k not in on_device
                      else v)
                  for k, v in wanted.items()}
    return _unflatten(tree, wanted, allow_pickle, (), select)
