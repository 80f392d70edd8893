#!/usr/bin/env python3
"""One worker of the MPS throughput measurement (tests/gpu/run_gpu_check.sh).

Launches many small kernels for a fixed time, starting at a wall-clock time
shared with the other workers, and reports how many ran. Each kernel is an
in-place `add_(1)` on a small int32 tensor (--elems elements: a few thread
blocks, far from filling the GPU); --graph-kernels of them are captured in a
CUDA graph that is replayed, so the CPU launch cost does not hide the GPU
side. Two such processes time-slice the GPU without MPS (one context at a
time) and run side by side under one MPS server: their aggregate rate is
what MPS buys. The tensor's final value is checked against the number of
kernels counted, so a kernel that did not run cannot be counted.

--fake (the check's --dry-run): no CUDA; a CPU loop stands in, to exercise
the start barrier and the bookkeeping.
"""
import argparse
import json
import os
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--start-at", type=float, required=True, help="epoch seconds when all workers start")
    ap.add_argument("--elems", type=int, default=8192)
    ap.add_argument("--graph-kernels", type=int, default=200)
    ap.add_argument("--out", required=True)
    ap.add_argument("--fake", action="store_true")
    a = ap.parse_args()
    res = {"pid": os.getpid(), "elems": a.elems, "graph_kernels": a.graph_kernels, "fake": a.fake,
           "CUDA_MPS_PIPE_DIRECTORY": os.environ.get("CUDA_MPS_PIPE_DIRECTORY")}
    t_init = time.perf_counter()
    if not a.fake:
        import torch
        x = torch.zeros(a.elems, dtype=torch.int32, device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up before capture, as PyTorch asks
            for _ in range(3):
                x.add_(1)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(a.graph_kernels):
                x.add_(1)
        for _ in range(5):
            g.replay()
        torch.cuda.synchronize()
        x.zero_()
        torch.cuda.synchronize()
        replay, sync = g.replay, torch.cuda.synchronize
    else:
        box = [0]

        def replay():
            for _ in range(a.graph_kernels):
                box[0] += 1

        def sync():
            pass
    res["init_s"] = round(time.perf_counter() - t_init, 3)
    delay = a.start_at - time.time()
    res["late_s"] = round(-delay, 3) if delay < 0 else 0.0
    if delay > 0:
        time.sleep(delay)
    t0 = time.perf_counter()
    n = 0
    while time.perf_counter() - t0 < a.seconds:
        replay()
        n += 1
    sync()
    elapsed = time.perf_counter() - t0
    kernels = n * a.graph_kernels
    if not a.fake:
        got = int(x[0].item())
        res["value_check"] = got == kernels
        if got != kernels:
            res["error"] = "tensor says %d kernels ran, counted %d" % (got, kernels)
    res.update({"replays": n, "kernels": kernels, "elapsed_s": round(elapsed, 4),
                "kernels_per_s": round(kernels / elapsed, 1)})
    with open(a.out, "w") as f:
        json.dump(res, f, sort_keys=True)
    return 0 if "error" not in res else 1


if __name__ == "__main__":
    sys.exit(main())
