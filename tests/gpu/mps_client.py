#!/usr/bin/env python3
"""A CUDA client for tests/gpu/run_gpu_check.sh.

Real mode (PyTorch): initialises CUDA in this process (under whatever
CUDA_MPS_PIPE_DIRECTORY / CUDA_VISIBLE_DEVICES the caller exported), runs a
few kernels, optionally runs a command from inside the client (the
`unilab-mps probe` of the check: it sees exactly the client's environment),
writes what it saw as JSON to --ready, then keeps the context alive with a
small kernel every 0.2 s for --hold seconds.

--fake PATH (the check's --dry-run): no CUDA; runs the fake CUDA client
(tests/fakes) for --hold seconds and reports that process as the client, so
the same flow is exercised against the fake MPS daemon.

--fault: once ready, cause a fatal GPU fault (a device-side assert) and
record CUDA's message as "fault_error"; exit 3. A holding client whose
kernels start failing (another client's fault on the same MPS server)
records "hold_error" and exits 4.

Exit 0 on success, 1 when CUDA (or the fake client) fails; the error is in
the JSON ("error") and on stderr.
"""
import argparse
import json
import os
import subprocess
import sys
import time


def write_json(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True)
    os.replace(tmp, path)


def run_probe(cmd):
    if not cmd:
        return None
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    return {"argv": cmd, "rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr}


def real(args, out):
    t0 = time.perf_counter()
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - report whatever the import raised
        out["error"] = "cannot import torch: %s" % e
        return 1
    out["torch_version"] = torch.__version__
    out["torch_cuda"] = torch.version.cuda
    try:
        torch.cuda.init()
        out["device_count"] = torch.cuda.device_count()
        out["device_count_source"] = "torch.cuda.device_count()"
        x = torch.ones(1 << 20, device="cuda")
        out["sum"] = float((x * 2).sum().item())
        torch.cuda.synchronize()
        props = torch.cuda.get_device_properties(0)
        out["device_name"] = props.name
        uuid = getattr(props, "uuid", None)
        out["device_uuid"] = str(uuid) if uuid is not None else None
        # Under an active thread percentage the client sees fewer SMs.
        out["sm_count"] = props.multi_processor_count
        out["cuda_init_s"] = round(time.perf_counter() - t0, 3)
    except Exception as e:  # noqa: BLE001
        out["error"] = "CUDA failed: %s" % e
        return 1
    out["probe"] = run_probe(args.probe)
    write_json(args.ready, out)
    if args.fault:
        # A fatal fault in this client: a device-side assert (index out of
        # bounds), sticky for the context, fatal for the MPS server's clients.
        try:
            idx = torch.tensor([1 << 30], device="cuda")
            y = x[idx]
            torch.cuda.synchronize()
            out["fault_error"] = "no error (value %s)" % float(y.sum().item())
        except Exception as e:  # noqa: BLE001
            out["fault_error"] = str(e).splitlines()[0][:300]
        write_json(args.ready, out)
        return 3
    end = time.time() + args.hold
    while time.time() < end:
        try:
            x.add_(1.0)
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - e.g. another client's fatal fault on the same server
            out["hold_error"] = str(e).splitlines()[0][:300]
            out["hold_error_after_s"] = round(args.hold - (end - time.time()), 2)
            write_json(args.ready, out)
            return 4
        time.sleep(0.2)
    return 0


def fake(args, out):
    p = subprocess.Popen([args.fake, "--hold", str(args.hold)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in p.stdout:
        lines.append(line.rstrip("\n"))
        if line.startswith("devices="):
            break
    out["cuda_pid"] = p.pid
    out["fake_output"] = lines
    if not any("connected to MPS server" in l for l in lines):
        p.wait()
        out["error"] = "fake client failed: %s" % p.stderr.read().strip()
        return 1
    # What the fake daemon answered for this client's mask (its devices= line):
    # measured, not assumed. "unknown" or no line: not known (None).
    devices = lines[-1].split("=", 1)[1] if lines and lines[-1].startswith("devices=") else ""
    known = [d for d in devices.split(",") if d and d != "unknown"]
    out["device_count"] = len(known) if known else None
    out["device_count_source"] = "the fake client's devices= line"
    out["device_uuid"] = known[0] if len(known) == 1 else (devices or None)
    out["probe"] = run_probe(args.probe)
    write_json(args.ready, out)
    return 0 if p.wait() == 0 else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hold", type=float, default=10.0)
    ap.add_argument("--ready", required=True, help="JSON file written once CUDA works")
    ap.add_argument("--fake", help="fake CUDA client to run instead of PyTorch (dry run)")
    ap.add_argument("--fault", action="store_true", help="after --ready, cause a fatal fault (device-side assert); exit 3")
    ap.add_argument("--probe", nargs=argparse.REMAINDER, help="command to run from inside the client")
    args = ap.parse_args()
    out = {
        "pid": os.getpid(),
        "cuda_pid": os.getpid(),
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "CUDA_MPS_PIPE_DIRECTORY": os.environ.get("CUDA_MPS_PIPE_DIRECTORY"),
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
        "CUDA_MPS_CLIENT_PRIORITY": os.environ.get("CUDA_MPS_CLIENT_PRIORITY"),
    }
    rc = fake(args, out) if args.fake else real(args, out)
    if rc != 0:
        write_json(args.ready, out)
        print(out.get("error", "client failed"), file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
