#!/usr/bin/python3
"""ciuic-benchmark phase "checkpoint": ciuic.checkpoint against torch.save/torch.load on the
local disk (issue 5).

    /usr/bin/python3 bench/phase_checkpoint.py --cluster FILE --local-dir DIR --json OUT [--quick]

(PYTHONPATH must reach <build>/python.) Builds a transformer-shaped fp32 state dict (embedding,
per layer qkv/out/mlp weights and norms) plus Adam optimizer state (exp_avg, exp_avg_sq), >= 2 GiB
in full mode (about 64 MiB with --quick), then measures, each fsynced:
  torch.save to DIR (+ fsync)              | ciuic.checkpoint.save             (GiB/s of fp32 input)
  torch.load from DIR (caches dropped)     | ciuic.checkpoint.load             (GiB/s)
                                           | ciuic.checkpoint.load(out=state)  (in place)
  weights only, no conversion vs bf16 conversion (save time, bytes written)
  async save: time the caller is blocked   | in-memory copy of the same tensors (s)
  fp32 -> fp16 conversion, one thread: ciuic kernel vs torch's .to(float16) (GiB/s of input)
Writes {"phase": "checkpoint", "results": [...], "notes": [...]}; exits non-zero with one line
on stderr on failure.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time


def fail(msg):
    print(f"phase_checkpoint: {msg}", file=sys.stderr)
    sys.exit(1)


def drop_caches(notes):
    try:
        subprocess.run(["sync"], check=False, timeout=300)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError as e:
        if not any("drop_caches" in n for n in notes):
            notes.append(f"could not drop caches ({e.strerror}): torch.load may read from the "
                         "page cache (favours torch)")
        return False


def make_state(torch, total_bytes):
    """Transformer-shaped weights (~1/3 of the bytes) and Adam state (~2/3)."""
    d, vocab = (1024, 32000) if total_bytes >= 2**30 else (256, 4000)
    layer = 12 * d * d + 4 * d  # qkv 3d*d, out d*d, mlp 4d*d + d*4d, 2 norms
    weights_target = total_bytes // 3 // 4
    layers = max(1, (weights_target - vocab * d) // layer)
    g = torch.Generator().manual_seed(0)
    model = {"embed.weight": torch.randn(vocab, d, generator=g) * 0.02}
    for i in range(layers):
        p = f"layers.{i}."
        model[p + "attn.qkv.weight"] = torch.randn(3 * d, d, generator=g) * 0.02
        model[p + "attn.out.weight"] = torch.randn(d, d, generator=g) * 0.02
        model[p + "mlp.up.weight"] = torch.randn(4 * d, d, generator=g) * 0.02
        model[p + "mlp.down.weight"] = torch.randn(d, 4 * d, generator=g) * 0.02
        model[p + "norm1.weight"] = torch.ones(d)
        model[p + "norm2.weight"] = torch.ones(d)
    state = {}
    for i, (k, v) in enumerate(model.items()):
        state[i] = {"step": 1000, "exp_avg": v * 0.1, "exp_avg_sq": v * v}
    optim = {"state": state, "param_groups": [{"lr": 3e-4, "betas": (0.9, 0.999),
                                               "params": list(range(len(model)))}]}
    return {"model": model, "optim": optim, "step": 1000}, layers


def nbytes(x):
    if hasattr(x, "element_size") and hasattr(x, "numel"):
        return x.element_size() * x.numel()
    if isinstance(x, dict):
        return sum(nbytes(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return sum(nbytes(v) for v in x)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--local-dir", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--quick", action="store_true", help="small state dict, under 60 s")
    ap.add_argument("--gib", type=float, default=0, help="state dict size (default 2.1, quick 0.06)")
    args = ap.parse_args()
    size = int((args.gib or (0.06 if args.quick else 2.1)) * 2**30)
    notes, results = [], []

    try:
        import torch

        import ciuic
        import ciuic.checkpoint as ckpt
        from ciuic import _ciuic
    except ImportError as e:
        fail(f"cannot import {e.name} (PYTHONPATH must reach <build>/python)")

    def result(name, target, value, unit, higher=True):
        results.append({"name": name, "target": target, "value": float(value), "unit": unit,
                        "higher_is_better": higher})

    try:
        client = ciuic.connect(args.cluster)
    except OSError as e:
        fail(f"cannot connect to the cluster in {args.cluster}: {e}")
    local = os.path.join(args.local_dir, "phase_checkpoint")
    remote = "/bench/phase_checkpoint"
    shutil.rmtree(local, ignore_errors=True)
    os.makedirs(local)
    torch.set_num_threads(1)
    try:
        state, layers = make_state(torch, size)
        total = nbytes(state)
        gib = total / 2**30
        weights = state["model"]
        wbytes = nbytes(weights)
        osts = len(client.ost_map()) if hasattr(client, "ost_map") else 0
        d = state["model"]["embed.weight"].shape[1]
        notes.append(f"state dict: {gib:.2f} GiB fp32 ({layers} layers of d={d} + embedding; "
                     f"weights {wbytes / 2**30:.2f} GiB, Adam state the rest)"
                     + (f"; cluster with {osts} OSTs" if osts else ""))
        try:
            client.makedirs(remote)
        except OSError:
            pass

        # torch.save + fsync to the local disk, then a cold torch.load.
        lp = os.path.join(local, "ckpt.pt")
        t0 = time.perf_counter()
        with open(lp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        t_tsave = time.perf_counter() - t0
        drop_caches(notes)
        t0 = time.perf_counter()
        loaded = torch.load(lp)
        t_tload = time.perf_counter() - t0
        del loaded
        os.unlink(lp)
        result("save, fp32 state dict (fsynced)", "local disk (torch.save)", gib / t_tsave, "GiB/s")
        result("load, fp32 state dict", "local disk (torch.load)", gib / t_tload, "GiB/s")

        # ciuic.checkpoint save + load.
        t0 = time.perf_counter()
        st = ckpt.save(state, remote + "/full", client=client)
        t_csave = time.perf_counter() - t0
        drop_caches(notes)
        t0 = time.perf_counter()
        loaded = ckpt.load(remote + "/full", client=client)
        t_cload = time.perf_counter() - t0
        ok = torch.equal(loaded["model"]["embed.weight"], weights["embed.weight"])
        del loaded
        if not ok:
            fail("loaded checkpoint differs from the saved state dict")
        drop_caches(notes)
        t0 = time.perf_counter()
        ckpt.load(remote + "/full", client=client, out=state)  # the resume case: in place
        t_cinto = time.perf_counter() - t0
        result("save, fp32 state dict (fsynced)", "ciuic (checkpoint.save)", gib / t_csave, "GiB/s")
        result("load, fp32 state dict", "ciuic (checkpoint.load)", gib / t_cload, "GiB/s")
        result("load into the existing state dict (out=, no allocation)", "ciuic (checkpoint.load)",
               gib / t_cinto, "GiB/s")
        notes.append(f"save speedup vs torch.save: {t_tsave / t_csave:.2f}x; load speedup vs "
                     f"torch.load: {t_tload / t_cload:.2f}x")
        result("bytes written, full state dict, no conversion", "ciuic", st["bytes_written"],
               "bytes", False)

        # Weights only: without vs with bf16 conversion.
        t0 = time.perf_counter()
        s_plain = ckpt.save({"model": weights}, remote + "/w-fp32", client=client)
        t_plain = time.perf_counter() - t0
        t0 = time.perf_counter()
        s_conv = ckpt.save({"model": weights}, remote + "/w-bf16", client=client,
                           convert={"model/*": "bfloat16"}, convert_threads=1)
        t_conv = time.perf_counter() - t0
        result("save weights, fp32", "ciuic", t_plain, "s", False)
        result("save weights, converted to bf16", "ciuic", t_conv, "s", False)
        result("bytes written, weights fp32", "ciuic", s_plain["bytes_written"], "bytes", False)
        result("bytes written, weights bf16", "ciuic", s_conv["bytes_written"], "bytes", False)
        pct = t_conv / t_plain * 100
        change = f"{100 - pct:.0f}% less" if pct <= 100 else f"{pct - 100:.0f}% more"
        notes.append(f"weights-only save time with bf16 conversion: {pct:.0f}% of the fp32 save "
                     f"({change})")

        # Async save: blocked time vs an in-memory copy of the same tensors.
        t0 = time.perf_counter()
        h = ckpt.save(state, remote + "/async", client=client, async_save=True)
        t_block = time.perf_counter() - t0
        h.wait()
        t_async_total = time.perf_counter() - t0
        flat = [v for v in weights.values()] + [
            t for s in state["optim"]["state"].values() for t in (s["exp_avg"], s["exp_avg_sq"])]
        t0 = time.perf_counter()
        copies = [t.clone() for t in flat]
        t_copy = time.perf_counter() - t0
        del copies
        result("async save, time the caller is blocked", "ciuic", t_block, "s", False)
        result("in-memory copy of the same tensors (clone)", "memory", t_copy, "s", False)
        notes.append(f"async save finished {t_async_total:.2f} s after the call")

        # Conversion speed, one thread.
        import numpy as np
        x = torch.randn(64 << 20 if not args.quick else 8 << 20)
        out = np.empty(x.numel(), dtype=np.uint16)
        src = x.numpy()
        pre = torch.empty(x.numel(), dtype=torch.float16)
        best_c = best_t = best_p = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            _ciuic.narrow_float32(src, out, "float16", 1)
            best_c = min(best_c, time.perf_counter() - t0)
            t0 = time.perf_counter()
            y = x.to(torch.float16)
            best_t = min(best_t, time.perf_counter() - t0)
            t0 = time.perf_counter()
            pre.copy_(x)  # the same cast into memory that is already mapped, as ours
            best_p = min(best_p, time.perf_counter() - t0)
        if not np.array_equal(out, y.view(torch.int16).numpy().view(np.uint16)):
            fail("ciuic fp16 conversion differs from torch's")
        gi = x.numel() * 4 / 2**30
        result("fp32 -> fp16 conversion, 1 thread", "ciuic kernel", gi / best_c, "GiB/s")
        result("fp32 -> fp16 conversion, 1 thread", "torch .to(float16)", gi / best_t, "GiB/s")
        result("fp32 -> fp16 conversion, 1 thread, preallocated output", "torch copy_",
               gi / best_p, "GiB/s")
        notes.append("conversion: ciuic writes into a preallocated buffer; torch's .to() also "
                     "allocates (and page-faults) its output, copy_ into a preallocated tensor "
                     "does not")
    except OSError as e:
        fail(f"ciuic: {e}")
    finally:
        shutil.rmtree(local, ignore_errors=True)
        for name in ("full", "w-fp32", "w-bf16", "async"):
            try:
                for f in client.listdir(f"{remote}/{name}"):
                    client.remove(f"{remote}/{name}/{f}")
                client.rmdir(f"{remote}/{name}")
            except (OSError, AttributeError):
                pass
    with open(args.json, "w") as f:
        json.dump({"phase": "checkpoint", "results": results, "notes": notes}, f, indent=1)


if __name__ == "__main__":
    main()
