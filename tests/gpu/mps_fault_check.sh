#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, CUDA and PyTorch: what a real MPS control
# daemon and server write, and answer, when one client meets a fatal GPU
# fault (an illegal memory access) while another client runs, so that the
# fault lines unilab-mps reads (common/mps/mps_faults.hpp) come from a real
# daemon, not only from NVIDIA's documentation. Changes no GPU mode; the
# daemon runs as the caller with private pipe/log directories and is quit at
# the end.
#
# Usage: tests/gpu/mps_fault_check.sh OUT_DIR
# Writes OUT_DIR/control.log, server.log (the daemon's logs), victim.out,
# faulty.out, after.out (the clients), answers.txt (control commands before
# and after) and summary.txt.
set -uo pipefail
out=${1:?usage: $0 OUT_DIR}
mkdir -p "$out"
for d in /usr/local/nvidia/bin /usr/bin; do
  [ -x "$d/nvidia-cuda-mps-control" ] && { BIN=$d; break; }
done
[ -n "${BIN:-}" ] || { echo "no nvidia-cuda-mps-control" | tee "$out/summary.txt"; exit 1; }
export PATH=$BIN:$PATH
[ -d /usr/local/nvidia/lib64 ] && export LD_LIBRARY_PATH=/usr/local/nvidia/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
w=$(mktemp -d /tmp/mpsf.XXXXXX)  # short: the socket path must fit 108 bytes
export CUDA_MPS_PIPE_DIRECTORY=$w/pipe CUDA_MPS_LOG_DIRECTORY=$w/log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -n1)
export CUDA_VISIBLE_DEVICES=$uuid
ctl() { printf '%s\n' "$@" | nvidia-cuda-mps-control 2>&1; }
answers() {
  echo "== $1"
  local s
  for s in $(ctl get_server_list); do
    echo "server $s: get_server_status -> $(ctl "get_server_status $s")"
    echo "server $s: get_client_list -> $(ctl "get_client_list $s" | tr '\n' ' ')"
  done
}
finish() {
  answers "at the end" >>"$out/answers.txt"
  ctl quit >/dev/null
  sleep 2
  cp "$CUDA_MPS_LOG_DIRECTORY"/*.log "$out/" 2>/dev/null
  rm -rf "$w"
}
trap finish EXIT
nvidia-cuda-mps-control -d || { echo "daemon did not start" | tee "$out/summary.txt"; exit 1; }
sleep 1

cat >"$w/victim.py" <<'EOF'
import sys, time, torch
x = torch.randn(512, 512, device="cuda")
print("victim: running", flush=True)
t0 = time.time()
try:
    while time.time() - t0 < float(sys.argv[1]):
        y = x @ x
        torch.cuda.synchronize()
    print("victim: finished without error", flush=True)
except Exception as e:
    print("victim: error:", repr(e)[:300], flush=True)
    sys.exit(1)
EOF
cat >"$w/faulty.py" <<'EOF'
import torch
x = torch.zeros(4, device="cuda")
torch.cuda.synchronize()
print("faulty: connected", flush=True)
try:
    import triton, triton.language as tl
    @triton.jit
    def bad(p):
        v = tl.load(p + (1 << 40))   # far outside any allocation: illegal address
        tl.store(p, v)
    bad[(1,)](x)
    how = "triton load at +2^40"
except Exception as e:
    print("faulty: no triton (%r); jiterator instead" % (e,), flush=True)
    code = "template <typename T> T bad(T a) { return a + *reinterpret_cast<volatile T*>(0x10); }"
    f = torch.cuda.jiterator._create_jit_fn(code)
    f(x)
    how = "jiterator read of address 0x10"
try:
    torch.cuda.synchronize()
    print("faulty: no error after", how, flush=True)
except Exception as e:
    print("faulty: error after", how, ":", repr(e)[:300], flush=True)
EOF

answers "before" >"$out/answers.txt"
python3 "$w/victim.py" 25 >"$out/victim.out" 2>&1 &
vpid=$!
sleep 8
answers "victim running" >>"$out/answers.txt"
timeout 60 python3 "$w/faulty.py" >"$out/faulty.out" 2>&1
echo "faulty exit $?" >>"$out/faulty.out"
sleep 1
answers "after the fault" >>"$out/answers.txt"
wait "$vpid"
echo "victim exit $?" >>"$out/victim.out"
answers "victim gone" >>"$out/answers.txt"
timeout 60 python3 "$w/victim.py" 3 >"$out/after.out" 2>&1
echo "after exit $?" >>"$out/after.out"
{
  echo "daemon binary: $BIN/nvidia-cuda-mps-control; GPU $uuid"
  nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv,noheader
  cat "$out/faulty.out" "$out/victim.out" "$out/after.out"
} >"$out/summary.txt"
cat "$out/summary.txt" "$out/answers.txt"
