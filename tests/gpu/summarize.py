#!/usr/bin/env python3
"""Turns the raw outputs of tests/gpu/run_gpu_check.sh into
OUT/gpu-results.json (everything, machine-readable) and OUT/gpu-report.md
(the tables to paste into docs/PERFORMANCE.md). Exit 1 when a check failed.

Usage: summarize.py OUT_DIR real|dry-run
"""
import json
import os
import statistics
import sys


def read_facts(path):
    facts = []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) == 5:
                facts.append(dict(zip(("id", "what", "expected", "observed", "verdict"), parts)))
    return facts


def read_bench(path):
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            rows = [json.loads(l) for l in f if l.strip()]
    groups = {}
    for r in rows:
        kind, n = r["tag"].split("-")[:2]
        groups.setdefault((kind, int(n)), []).append(r)
    summary = {}
    for (kind, n), rs in sorted(groups.items()):
        rates = [r["kernels_per_s"] for r in rs]
        summary["%s-%d" % (kind, n)] = {
            "mps": kind == "mps", "procs": n, "runs": len(rs),
            "median_kernels_per_s": statistics.median(rates), "min": min(rates), "max": max(rates),
            # True/False when every run verified its kernels, None when any did not check.
            "value_checks_ok": (None if any(r.get("value_check") is None for r in rs) else all(r["value_check"] for r in rs)),
            "max_late_s": max(r["late_s"] for r in rs),
        }
    return rows, summary


def main():
    out, mode = sys.argv[1], sys.argv[2]
    facts = read_facts(os.path.join(out, "facts.tsv"))
    rows, bench = read_bench(os.path.join(out, "bench.jsonl"))
    machine = {}
    if os.path.exists(os.path.join(out, "machine.txt")):
        for line in open(os.path.join(out, "machine.txt")):
            k, _, v = line.rstrip("\n").partition("=")
            machine[k] = v
    ratio = None
    if "mps-2" in bench and "nomps-2" in bench and bench["nomps-2"]["median_kernels_per_s"] > 0:
        ratio = bench["mps-2"]["median_kernels_per_s"] / bench["nomps-2"]["median_kernels_per_s"]
    failed = [f for f in facts if f["verdict"] == "fail"]
    differs = [f for f in facts if f["verdict"] == "differs"]
    unchecked = [f for f in facts if f["verdict"] == "not-checked"]
    result = {"mode": mode, "machine": machine, "facts": facts, "throughput": bench,
              "mps_vs_time_slicing_2_procs": ratio, "throughput_runs": rows,
              "failed": len(failed), "differs_from_design": len(differs), "not_checked": len(unchecked),
              "ok": len([f for f in facts if f["verdict"] == "ok"])}
    with open(os.path.join(out, "gpu-results.json"), "w") as f:
        json.dump(result, f, indent=2, sort_keys=True)

    md = []
    md.append("# Real-GPU check (%s)\n" % ("DRY RUN against the fakes: no CUDA was involved" if mode == "dry-run" else "real GPU"))
    md.append("Machine: %s; %s; nvidia-smi %s.\n" % (machine.get("uname", "?"), machine.get("cxx", "?"), machine.get("nvidia_smi", "?")))
    md.append("%d checks ok, %d failed, %d MPS facts differ from DESIGN.md, %d not checked (nothing measured%s).\n"
              % (result["ok"], len(failed), len(differs), len(unchecked), ": a fake cannot show them" if mode == "dry-run" else ""))
    md.append("## Throughput: small kernels, MPS vs time slicing\n")
    if bench:
        md.append("| processes | MPS | kernels/s (median) | range | runs | every kernel verified |")
        md.append("|---:|---|---:|---:|---:|---|")
        for key in ("nomps-1", "nomps-2", "mps-1", "mps-2"):
            b = bench.get(key)
            if b:
                md.append("| %d | %s | %.0f | %.0f-%.0f | %d | %s |" % (b["procs"], "yes" if b["mps"] else "no (time slicing)",
                          b["median_kernels_per_s"], b["min"], b["max"], b["runs"], {True: "yes", False: "NO", None: "not checked"}[b["value_checks_ok"]]))
        if ratio is not None:
            md.append("\nTwo processes under one MPS daemon: **%.2fx** the aggregate throughput of the same two processes time-sliced%s.\n"
                      % (ratio, " (meaningless in a dry run: CPU loops)" if mode == "dry-run" else ""))
    else:
        md.append("(not run)\n")
    md.append("## Checks and MPS facts\n")
    md.append("| id | what | expected (DESIGN.md) | observed | verdict |")
    md.append("|---|---|---|---|---|")
    for f in facts:
        md.append("| %s | %s | %s | %s | %s |" % tuple(f[k].replace("|", "\\|") for k in ("id", "what", "expected", "observed", "verdict")))
    with open(os.path.join(out, "gpu-report.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
