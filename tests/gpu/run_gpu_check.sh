#!/usr/bin/env bash
# Real-GPU check of unilab-mps on a machine with an NVIDIA GPU and no Slurm
# (e.g. one H200 with CUDA, PyTorch, CMake and a compiler, no Debian packages,
# no network). In a few minutes it:
#   1. records the machine (nvidia-smi queries only) and builds the project
#      (bundled headers from tests/gpu/prepare.sh; falls back to the
#      binaries prepare.sh built when the build fails);
#   2. starts a real daemon with `unilab-mps start`, checks `status`, `env`
#      and the record (pid, start time, uid) against the real
#      nvidia-cuda-mps-control process and its pipe/log directories;
#   3. runs a PyTorch client under it, sees it in get_server_list /
#      get_client_list, runs `unilab-mps probe --requested mps` from inside
#      the client;
#   4. stops it with `unilab-mps stop` and proves nothing is left;
#   5. measures what MPS is for: two processes launching many small kernels
#      at once, aggregate throughput under one daemon vs time slicing;
#   6. stops a daemon while a client is attached (bounded by --timeout) and
#      records what the real MPS does; sends `quit -t 2` itself to a daemon
#      with a live client;
#   and, along the way: where the driver keeps its tools (PATH, /usr/bin or
#   a container's /usr/local/nvidia: then --driver-dir, and the daemon's
#   PATH/LD_LIBRARY_PATH are checked), MPS limits set and read back, the
#   daemon's MPS servers in `status` and gone after `stop`, the compute and
#   MIG modes read (doctor) and unchanged at the end;
#   and writes OUT/gpu-results.json, OUT/gpu-report.md (facts compared with
#   DESIGN.md's "NVIDIA MPS facts", throughput table) and the raw outputs.
#
# It never changes the compute mode, clocks, persistence or MIG layout and
# never resets the GPU: nvidia-smi is only ever called through `smi`, which
# allows query options only. MPS works in the default compute mode.
#
# --dry-run runs the same flow against the fake nvidia-smi /
# nvidia-cuda-mps-control / CUDA client (tests/fakes) on any Linux machine:
# every step except CUDA itself.
#
# Usage: tests/gpu/run_gpu_check.sh [--dry-run] [--out DIR] [--gpu INDEX]
#          [--prebuilt] [--bench-seconds S] [--bench-reps N] [--no-busy-stop] [--keep]
# Exit: 0 all unilab-mps checks passed (differences of the real MPS from
# DESIGN.md are reported, not failures), 1 a check failed, 2 usage/setup.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

DRY=0 OUT_DIR='' GPU=0 PREBUILT=0 BENCH_S=5 BENCH_REPS=2 BUSY_STOP=1 KEEP=0
while (($#)); do
  case $1 in
  --dry-run) DRY=1 ;;
  --out) OUT_DIR=${2:?--out DIR}; shift ;;
  --gpu) GPU=${2:?--gpu INDEX}; shift ;;
  --prebuilt) PREBUILT=1 ;;
  --bench-seconds) BENCH_S=${2:?}; shift ;;
  --bench-reps) BENCH_REPS=${2:?}; shift ;;
  --no-busy-stop) BUSY_STOP=0 ;;
  --keep) KEEP=1 ;;
  -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "run_gpu_check.sh: unknown argument '$1' (--help)" >&2; exit 2 ;;
  esac
  shift
done
[[ $GPU =~ ^[0-9]+$ ]] || { echo "--gpu takes an nvidia-smi index" >&2; exit 2; }
OUT=${OUT_DIR:-${OUT:-$PWD/gpu-check-out}}
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
: >"$OUT/facts.tsv"
: >"$OUT/run.log"
# Short: <work>/r/<name>/pipe/control must fit a UNIX socket path (108 bytes).
WORK=$(mktemp -d /tmp/umg.XXXXXX) || exit 2
chmod 755 "$WORK"
T_START=$SECONDS
FAILED=0

log() { printf '[gpu-check %s] %s\n' "$(date +%T)" "$*" | tee -a "$OUT/run.log" >&2; }
# fact ID WHAT EXPECTED OBSERVED VERDICT
#   verdict: ok | fail | differs | info | not-checked (nothing was measured:
#   e.g. a property of real MPS/CUDA in a dry run, or a query the tool could
#   not answer; never counted as ok)
clean() { printf '%s' "$1" | tr '\t\n' '  ' | cut -c1-600; }
fact() {
  local v=$5
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$(clean "$2")" "$(clean "$3")" "$(clean "$4")" "$v" >>"$OUT/facts.tsv"
  [ "$v" = fail ] && FAILED=1
  log "$v: $1: $2 -> $(clean "$4" | cut -c1-160)"
  return 0
}
# check ID WHAT EXPECTED OBSERVED: ok when equal, fail otherwise
check() { if [ "$3" = "$4" ]; then fact "$1" "$2" "$3" "$4" ok; else fact "$1" "$2" "$3" "$4" fail; fi; }
# mps_fact ID WHAT DESIGN_SAYS OBSERVED MATCHES(0/1): real MPS vs DESIGN.md.
# In a dry run the fakes answer, and they were written from DESIGN.md: that
# shows nothing about real MPS, so these are "not-checked" there.
mps_fact() {
  if [ "$DRY" = 1 ]; then fact "$1" "$2" "$3" "$4 (fake)" not-checked
  elif [ "$5" = 1 ]; then fact "$1" "$2" "$3" "$4" ok
  else fact "$1" "$2" "$3" "$4" differs; fi
}
# jq-less JSON: jget FILE PYTHON_EXPR_ON_d
jget() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); v=eval(sys.argv[2]); print("" if v is None else (json.dumps(v) if isinstance(v,(dict,list,bool)) else v))' "$1" "$2" 2>/dev/null; }
canon() { printf '%s' "$1" | tr '[:upper:]' '[:lower:]' | sed 's/^gpu-//; s/-//g'; }
start_ticks() { local s; s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1; s=${s##*) }; read -r -a f <<<"$s"; printf '%s' "${f[19]}"; }
proc_alive() { local s; s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1; s=${s##*) }; [[ ${s:0:1} != Z && ${s:0:1} != X ]]; }
# Processes whose environment names a pipe directory under WORK: ours only.
# Builtins only (no grep per process), and this shell is skipped: a helper
# started while CUDA_MPS_PIPE_DIRECTORY is exported must not find itself.
our_mps_pids() {
  local p e
  for p in /proc/[0-9]*; do
    [ "${p#/proc/}" = "$BASHPID" ] && continue
    mapfile -d "" -t e 2>/dev/null <"$p/environ" || continue
    case " ${e[*]} " in *" CUDA_MPS_PIPE_DIRECTORY=$WORK/"*) printf '%s\n' "${p#/proc/}" ;; esac
  done
  return 0
}

# MPS processes (comm "nvidia-cuda-mps": control daemon and servers) of our
# uid started after this script: only looked at, never signalled by name.
our_mps_named() {
  local p c
  for p in /proc/[0-9]*; do
    c=$(cat "$p/comm" 2>/dev/null) || continue
    [[ $c == nvidia-cuda-mps* ]] || continue
    [ "$(awk '/^Uid:/{print $2}' "$p/status" 2>/dev/null)" = "$(id -u)" ] || continue
    proc_alive "${p#/proc/}" || continue
    [ "$(start_ticks "${p#/proc/}")" -ge "${T0_TICKS:-0}" ] 2>/dev/null && printf '%s\n' "${p#/proc/}"
  done
  return 0
}

# nvidia-smi, queries only: anything that could change the GPU is refused.
smi() {
  local a
  for a in "$@"; do
    case $a in
    -L | -q | -x | --list-gpus | --query | -i | --id=* | --query-gpu=* | --query-compute-apps=* | --format=* | [0-9] | [0-9][0-9] | GPU-* | MIG-*) ;;
    mig) [ "$1" = mig ] && [ $# -eq 2 ] && case $2 in -lgi | -lci | -lgip | -lcip) true ;; *) false ;; esac || { log "refusing nvidia-smi mig $*"; return 99; } ;;
    -lgi | -lci | -lgip | -lcip) [ "$1" = mig ] || { log "refusing '$a' outside 'mig'"; return 99; } ;;
    *) log "refusing nvidia-smi argument '$a' (queries only)"; return 99 ;;
    esac
  done
  timeout 60 "$NVSMI" "$@"
}

CLIENT_PIDS=()
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
  local p
  for p in "${CLIENT_PIDS[@]}"; do kill "$p" 2>/dev/null; done
  [ -n "${UM:-}" ] && [ -x "$UM" ] && timeout 60 "$UM" stop --all --timeout 5 >>"$OUT/run.log" 2>&1
  for p in $(our_mps_pids); do
    log "cleanup: killing leftover process $p ($(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null))"
    kill -KILL "$p" 2>/dev/null
  done
  if [ "$KEEP" = 1 ]; then log "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- 1. machine, tools, build
log "mode: $([ "$DRY" = 1 ] && echo dry-run with fakes || echo real GPU), out $OUT, work $WORK"
BUNDLE=$here/bundle
# Where the driver keeps its tools: PATH, /usr/bin, or a container's
# /usr/local/nvidia/bin (its libraries then in /usr/local/nvidia/lib64,
# outside the linker path). The dry run stages the fakes the container way.
SEARCH="$(printf '%s' "${PATH:-}" | tr ':' ' ') /usr/bin /usr/local/nvidia/bin"
if [ "$DRY" = 1 ]; then
  FAKES=${UNILAB_FAKES_DIR:-$BUNDLE/fakes}
  [ -x "$FAKES/nvidia-smi" ] || { log "--dry-run needs the fakes: run tests/gpu/prepare.sh (or set UNILAB_FAKES_DIR)"; exit 2; }
  mkdir -p "$WORK/drv/bin" "$WORK/drv/lib64" && cp -a "$FAKES/." "$WORK/drv/bin/" || exit 2
  SEARCH="$WORK/drv/bin"
  # The fake driver's /proc/driver (device minors, MIG capability minors).
  "$WORK/drv/bin/fake-driver-proc" "$WORK/drv/proc" || { log "fake-driver-proc failed (rerun tests/gpu/prepare.sh)"; exit 2; }
  export UNILAB_MPS_DRIVER_PROC=$WORK/drv/proc
fi
find_tool() {  # NAME: the first executable NAME in SEARCH
  local d
  for d in $SEARCH; do [ -n "$d" ] && [ -x "$d/$1" ] && { printf '%s\n' "$d/$1"; return 0; }; done
  return 1
}
NVSMI=$(find_tool nvidia-smi) || { log "no nvidia-smi in: $SEARCH (is this a GPU machine? use --dry-run elsewhere)"; exit 2; }
MPSCTL=$(find_tool nvidia-cuda-mps-control) || { log "no nvidia-cuda-mps-control in: $SEARCH"; exit 2; }
# <X>/bin/nvidia-smi outside /usr/bin and /bin: X is the driver directory.
DRIVER_DIR=
case $(dirname "$NVSMI") in /usr/bin | /bin | /usr/sbin | /sbin) ;; */bin) DRIVER_DIR=$(dirname "$(dirname "$NVSMI")") ;; esac
fact driver.location "where the NVIDIA tools are" "-" "nvidia-smi $NVSMI, nvidia-cuda-mps-control $MPSCTL, driver dir ${DRIVER_DIR:-(none: system paths)}$([ -n "$DRIVER_DIR" ] && [ ! -d "$DRIVER_DIR/lib64" ] && echo ", no lib64")" info
NVSMI=$(readlink -f "$NVSMI") MPSCTL=$(readlink -f "$MPSCTL")
T0_TICKS=$(start_ticks $$)
command -v python3 >/dev/null || { log "python3 is needed (PyTorch client, JSON)"; exit 2; }

{
  echo "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "uname=$(uname -srm)"
  echo "user=$(id -un) uid=$(id -u)"
  echo "glibc=$(ldd --version 2>/dev/null | head -n1)"
  echo "cxx=$(c++ --version 2>/dev/null | head -n1)"
  echo "cmake=$(cmake --version 2>/dev/null | head -n1)"
  echo "python=$(python3 --version 2>&1)"
  echo "nvidia_smi=$NVSMI"
  echo "mps_control=$MPSCTL"
  echo "driver_dir=${DRIVER_DIR:-(none)}"
  echo "ls_usr_local_nvidia=$(ls /usr/local/nvidia /usr/local/nvidia/bin 2>&1 | tr '\n' ' ')"
  echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-(unset)}"
  echo "CUDA_MPS_PIPE_DIRECTORY=${CUDA_MPS_PIPE_DIRECTORY-(unset)}"
} >"$OUT/machine.txt"
smi >"$OUT/nvidia-smi.txt" 2>&1
smi -L >"$OUT/nvidia-smi-L.txt" 2>&1
smi -q >"$OUT/nvidia-smi-q.txt" 2>&1
smi --query-gpu=index,uuid,pci.bus_id,name --format=csv,noheader >"$OUT/gpus.csv" 2>&1
smi --query-gpu=index,compute_mode,mig.mode.current,driver_version,persistence_mode --format=csv,noheader >"$OUT/modes-before.csv" 2>&1
# The one query the prolog and the CLI send (common/mps/gpu.hpp kNvidiaSmiQueryFields).
Q6=index,uuid,pci.bus_id,compute_mode,mig.mode.current,name
smi --query-gpu=$Q6 --format=csv,noheader >"$OUT/gpus6.csv" 2>"$OUT/gpus6.err"
rc6=$?
fact smi.rc "exit code of the prolog's query (14 = infoROM warning, rows still valid)" "0" "$rc6$( [ -s "$OUT/gpus6.err" ] && echo ": $(head -n1 "$OUT/gpus6.err")")" info
line6=$(grep -m1 "^$GPU, " "$OUT/gpus6.csv")
mps_fact smi.query "the prolog's query row: compute_mode and mig.mode.current before the name" \
  "0, GPU-<uuid>, 00000000:BB:DD.F, Default|Exclusive_Process|Prohibited, Enabled|Disabled|[N/A], <name>" "$line6" \
  "$([[ $line6 =~ ^[0-9]+,\ GPU-[0-9a-fA-F-]{36},\ [0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9],\ (Default|Exclusive_Process|Prohibited|\[N/A\]|\[Not\ Supported\]),\ (Enabled|Disabled|\[N/A\]|\[Not\ Supported\]),\ .+ ]] && echo 1 || echo 0)"
MODE6=$(printf '%s' "$line6" | cut -d, -f4 | tr -d ' ') MIG6=$(printf '%s' "$line6" | cut -d, -f5 | tr -d ' ')
# nvidia-smi 580 has no minor_number field (seen on this machine's first run):
# the minor comes from the driver's own information file.
out=$(smi --query-gpu=index,minor_number --format=csv,noheader 2>&1); rc=$?
fact smi.minor_number "the minor_number query field (older drivers have it)" "-" "exit $rc: $(printf '%s' "$out" | head -n1)" info
line=$(sed -n "$((GPU + 1))p" "$OUT/gpus.csv")
mps_fact smi.csv "nvidia-smi CSV row: 'index, uuid, bus, name' separated by ', '" \
  "0, GPU-<uuid>, 00000000:BB:DD.F, <name>" "$line" \
  "$([[ $line =~ ^[0-9]+,\ GPU-[0-9a-f-]{36},\ [0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9],\ .+ ]] && echo 1 || echo 0)"
UUID=$(printf '%s' "$line" | cut -d, -f2 | tr -d ' ')
[[ $UUID == GPU-* ]] || { log "cannot read GPU $GPU's UUID from nvidia-smi: $line"; exit 2; }
BUS=$(printf '%s' "$line" | cut -d, -f3 | tr -d ' ')
# The driver's information file of this GPU (kernel bus name: 4-digit domain, lower case).
KBUS=$(printf '%s' "$BUS" | sed -E 's/^0000([0-9A-Fa-f]{4}:)/\1/' | tr '[:upper:]' '[:lower:]')
DRIVER_PROC=${UNILAB_MPS_DRIVER_PROC:-/proc/driver}
[ "$DRY" = 1 ] && DRIVER_PROC=$WORK/drv/proc
INFO=$DRIVER_PROC/nvidia/gpus/$KBUS/information
cp "$INFO" "$OUT/driver-information.txt" 2>/dev/null
MINOR=$(sed -n 's/^Device Minor:[[:space:]]*//p' "$INFO" 2>/dev/null | tr -d ' ')
mps_fact driver.minor "the driver's information file names the GPU and its device minor" "GPU UUID: $UUID, Device Minor: N" \
  "$(grep -E '^(GPU UUID|Device Minor)' "$INFO" 2>&1 | tr '\t\n' '  ')" \
  "$(grep -q "GPU UUID:[[:space:]]*$UUID" "$INFO" 2>/dev/null && [[ $MINOR =~ ^[0-9]+$ ]] && echo 1 || echo 0)"
L=$(head -n1 "$OUT/nvidia-smi-L.txt")
mps_fact smi.L "nvidia-smi -L line" "GPU 0: <name> (UUID: GPU-...)" "$L" "$([[ $L =~ ^GPU\ [0-9]+:\ .+\ \(UUID:\ GPU-[0-9a-f-]+\)$ ]] && echo 1 || echo 0)"
fact smi.modes "compute mode, MIG mode, driver, persistence (read only)" "-" "$(sed -n "$((GPU + 1))p" "$OUT/modes-before.csv")" info
if [ -S /tmp/nvidia-mps/control ]; then
  fact ambient "a system-wide MPS daemon on /tmp/nvidia-mps" "none" "present: clients without CUDA_MPS_PIPE_DIRECTORY join it; the baseline below points them elsewhere" info
fi

log "build"
BUILD=$WORK/build
UM=
if [ "$PREBUILT" = 0 ] && command -v cmake >/dev/null && command -v c++ >/dev/null; then
  inc=
  [ -f /usr/include/nlohmann/json.hpp ] && [ -f /usr/include/fmt/format.h ] || inc=$BUNDLE/include
  if [ -n "$inc" ] && [ ! -f "$inc/nlohmann/json.hpp" ]; then
    fact build "build from source" "headers available" "no nlohmann/fmt headers and no tests/gpu/bundle/include: run tests/gpu/prepare.sh" fail
  else
    gen=()
    command -v ninja >/dev/null && gen=(-G Ninja)
    t=$SECONDS
    if cmake -S "$root" -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUNILAB_MPS_BUILD_PLUGIN=OFF \
      -DUNILAB_MPS_BUILD_TESTS=OFF -DUNILAB_MPS_UNIT_TESTS=OFF ${inc:+-DUNILAB_MPS_THIRD_PARTY_INCLUDE=$inc} >"$OUT/build.log" 2>&1 &&
      cmake --build "$BUILD" -j "$(nproc)" --target unilab-mps >>"$OUT/build.log" 2>&1; then
      UM=$BUILD/cli/unilab-mps
      fact build "build from source (${inc:+bundled headers, }$(c++ --version | head -n1))" "builds" "built in $((SECONDS - t)) s" ok
    else
      fact build "build from source" "builds" "failed: $(grep -m3 -E 'error|Error' "$OUT/build.log" | tr '\n' ' ')" fail
    fi
  fi
fi
if [ -z "$UM" ]; then
  UM=$BUNDLE/bin/unilab-mps
  [ -x "$UM" ] || { log "no unilab-mps: the build failed and tests/gpu/bundle/bin is missing (run tests/gpu/prepare.sh)"; exit 1; }
  "$UM" --help >/dev/null 2>&1 || { fact prebuilt "prebuilt unilab-mps runs here" "runs" "$("$UM" --help 2>&1 | head -n2)" fail; exit 1; }
  fact prebuilt "using the binaries built by prepare.sh ($(sed -n 's/^glibc_needed=//p' "$BUNDLE/MANIFEST") glibc needed)" "-" "tests/gpu/bundle/bin/unilab-mps" info
fi
export UNILAB_MPS_NVIDIA_SMI=$NVSMI UNILAB_MPS_CONTROL=$MPSCTL
# The CLI's --driver-dir: the tools then run with DIR/bin in PATH and DIR/lib64 in LD_LIBRARY_PATH.
if [ -n "$DRIVER_DIR" ]; then export UNILAB_MPS_DRIVER_DIR=$DRIVER_DIR; else unset UNILAB_MPS_DRIVER_DIR; fi
export UNILAB_MPS_STATE_DIR=$WORK/s UNILAB_MPS_RUN_DIR=$WORK/r
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY

# ---------------------------------------------------------------- 2. start + record vs reality
log "start a daemon on GPU $GPU ($UUID)"
"$UM" doctor "$UUID" --json >"$OUT/doctor.json" 2>>"$OUT/run.log"
case "$MODE6/$MIG6" in
Prohibited/*) want_mode=fail ;;
Exclusive_Process/*) want_mode=ok ;;
*) want_mode=warn ;;
esac
check doctor.mode "doctor reads the GPU's compute/MIG mode ($MODE6, MIG $MIG6; never changes it)" "$want_mode" \
  "$(jget "$OUT/doctor.json" '[c["status"] for c in d["checks"] if c["name"] == "compute-mode"][0]')"
"$UM" start "$UUID" --json >"$OUT/start.json" 2>"$OUT/start.err"
rc=$?
check start.rc "unilab-mps start exits 0" 0 "$rc"
if [ "$rc" -ne 0 ]; then
  log "start failed: $(cat "$OUT/start.err")"
else
  PID=$(jget "$OUT/start.json" 'd["daemons"][0]["pid"]')
  TICKS=$(jget "$OUT/start.json" 'd["daemons"][0]["process_start_ticks"]')
  PIPE=$(jget "$OUT/start.json" 'd["daemons"][0]["pipe_directory"]')
  LOGD=$(jget "$OUT/start.json" 'd["daemons"][0]["log_directory"]')
  "$UM" status --json >"$OUT/status.json" 2>>"$OUT/run.log"
  "$UM" status >"$OUT/status.txt" 2>&1
  check status.live "status --json: the daemon is live" "true" "$(jget "$OUT/status.json" 'd["managed_daemons"][0]["live"]')"
  check record.pidfile "record pid = the pid file in the pipe directory" "$PID" "$(tr -d ' \n' <"$PIPE/nvidia-cuda-mps-control.pid" 2>/dev/null)"
  check record.ticks "record start time = field 22 of /proc/PID/stat" "$TICKS" "$(start_ticks "$PID")"
  check record.uid "daemon runs as the caller" "$(id -u)" "$(awk '/^Uid:/{print $2}' "/proc/$PID/status" 2>/dev/null)"
  exe=$(readlink "/proc/$PID/exe" 2>/dev/null)
  check record.exe "the recorded pid is nvidia-cuda-mps-control" "$MPSCTL" "$exe"
  check daemon.cvd "daemon's CUDA_VISIBLE_DEVICES is the UUID" "$UUID" \
    "$(tr '\0' '\n' <"/proc/$PID/environ" 2>/dev/null | sed -n 's/^CUDA_VISIBLE_DEVICES=//p')"
  check daemon.pipe "daemon's CUDA_MPS_PIPE_DIRECTORY is the recorded one" "$PIPE" \
    "$(tr '\0' '\n' <"/proc/$PID/environ" 2>/dev/null | sed -n 's/^CUDA_MPS_PIPE_DIRECTORY=//p')"
  if [ -n "$DRIVER_DIR" ]; then
    denv=$(tr '\0' '\n' <"/proc/$PID/environ" 2>/dev/null)
    check driver.path "daemon's PATH starts with the driver's bin (--driver-dir)" "$DRIVER_DIR/bin" "$(printf '%s\n' "$denv" | sed -n 's/^PATH=//p' | cut -d: -f1)"
    check driver.ld "daemon's LD_LIBRARY_PATH is the driver's lib64" "$DRIVER_DIR/lib64" "$(printf '%s\n' "$denv" | sed -n 's/^LD_LIBRARY_PATH=//p')"
  fi
  check pipe.mode "pipe directory owner:mode" "$(id -un):700" "$(stat -c %U:%a "$PIPE")"
  listing=$(cd "$PIPE" && for f in *; do printf '%s(%s) ' "$f" "$(stat -c %F "$f" | sed 's/regular empty file/file/; s/regular file/file/')"; done)
  ls -la "$PIPE" "$LOGD" >"$OUT/pipe-and-log-dirs.txt" 2>&1
  mps_fact mps.pipedir "pipe directory contents" "control, control_lock, control_privileged, log, nvidia-cuda-mps-control.pid" "$listing" \
    "$(for f in control control_lock control_privileged log nvidia-cuda-mps-control.pid; do [ -e "$PIPE/$f" ] || { echo 0; exit; }; done; echo 1)"
  mps_fact mps.socket "control is a UNIX socket" "socket" "$(stat -c %F "$PIPE/control" 2>/dev/null)" "$([ -S "$PIPE/control" ] && echo 1 || echo 0)"
  mps_fact mps.logdir "log directory holds control.log" "control.log" "$(cd "$LOGD" 2>/dev/null && printf '%s ' *)" "$([ -f "$LOGD/control.log" ] && echo 1 || echo 0)"
  "$UM" env >"$OUT/env.txt" 2>>"$OUT/run.log"
  check env.rc "unilab-mps env exits 0" 0 "$?"
  ENVLINES=$(cat "$OUT/env.txt")
  eval "$ENVLINES"
  export CUDA_VISIBLE_DEVICES CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  check env.cvd "env: CUDA_VISIBLE_DEVICES" "$UUID" "${CUDA_VISIBLE_DEVICES:-}"
  check env.pipe "env: CUDA_MPS_PIPE_DIRECTORY" "$PIPE" "${CUDA_MPS_PIPE_DIRECTORY:-}"
  out=$(echo get_server_list | timeout 20 "$MPSCTL" 2>&1)
  mps_fact mps.servers0 "get_server_list before any client" "(empty)" "${out:-(empty)}" "$([ -z "$out" ] && echo 1 || echo 0)"
  out=$(echo get_default_active_thread_percentage | timeout 20 "$MPSCTL" 2>&1)
  mps_fact mps.threads "get_default_active_thread_percentage" "100.0" "$out" "$([ "$out" = 100.0 ] && echo 1 || echo 0)"
  out=$(timeout 20 "$MPSCTL" -d 2>&1); rc=$?
  mps_fact mps.second "second -d on the same pipe directory" "'An instance of this daemon is already running', exit 1" "'$out', exit $rc" \
    "$([[ $out == *"already running"* && $rc == 1 ]] && echo 1 || echo 0)"
  sleep 0.5
  for p in $(our_mps_pids); do  # a second daemon on our pipe directory, if the real tool started one anyway
    if [ "$p" = "$PID" ] || [[ $(readlink "/proc/$p/exe" 2>/dev/null) != "$MPSCTL" ]]; then continue; fi
    fact mps.second.extra "second -d started another daemon" "none" "pid $p ($(tr '\0' ' ' <"/proc/$p/cmdline"))" differs
    kill "$p"
  done
  mkdir -p "$WORK/empty"
  out=$(echo get_server_list | CUDA_MPS_PIPE_DIRECTORY=$WORK/empty timeout 20 "$MPSCTL" 2>&1); rc=$?
  mps_fact mps.nodaemon "front end without a daemon" "'Cannot find MPS control daemon process', exit 1" "'$out', exit $rc" \
    "$([[ $out == *"Cannot find MPS control daemon"* && $rc == 1 ]] && echo 1 || echo 0)"

  # ------------------------------------------------------------ 3. a CUDA client under the daemon
  log "client under the daemon"
  client=(python3 "$here/mps_client.py" --hold 6 --ready "$WORK/client.json")
  [ "$DRY" = 1 ] && client+=(--fake "$FAKES/fake-cuda-client")
  client+=(--probe "$UM" probe --requested mps --learner-device cuda:0 --collector-device cuda:0 --backend torch --json --manifest "$OUT/manifest.json")
  "${client[@]}" >"$OUT/client.out" 2>&1 &
  cpid=$!
  CLIENT_PIDS+=("$cpid")
  for _ in $(seq 1 300); do [ -s "$WORK/client.json" ] && break; kill -0 "$cpid" 2>/dev/null || break; sleep 0.1; done
  if [ ! -s "$WORK/client.json" ] || [ -n "$(jget "$WORK/client.json" 'd.get("error")')" ]; then
    fact client "a CUDA client runs under the daemon" "runs" "$(cat "$WORK/client.json" "$OUT/client.out" 2>/dev/null | head -c 500)" fail
  else
    cp "$WORK/client.json" "$OUT/client.json"
    cuda_pid=$(jget "$WORK/client.json" 'd["cuda_pid"]')
    fact client "a CUDA client runs under the daemon" "runs" "pid $cuda_pid$(jget "$WORK/client.json" '", %s, torch %s, CUDA init %s s" % (d["device_name"], d["torch_version"], d["cuda_init_s"]) if "torch_version" in d else " (fake client)"')" ok
    check client.count "the client sees one device ($(jget "$WORK/client.json" 'd.get("device_count_source")'))" 1 "$(jget "$WORK/client.json" 'd.get("device_count")')"
    du=$(jget "$WORK/client.json" 'd.get("device_uuid")')
    check client.uuid "the client's device is the daemon's GPU (any spelling)" "$(canon "$UUID")" "$(canon "$du")"
    servers=$(echo get_server_list | timeout 20 "$MPSCTL" 2>&1)
    SERVER=$(printf '%s\n' "$servers" | grep -m1 -E '^[0-9]+$')
    check mps.server "get_server_list lists one server while the client runs" 1 "$(printf '%s\n' "$servers" | grep -cE '^[0-9]+$')"
    clients=$(echo "get_client_list ${SERVER:-0}" | timeout 20 "$MPSCTL" 2>&1)
    check mps.client "get_client_list SERVER lists the client" yes "$(printf '%s\n' "$clients" | grep -qx "$cuda_pid" && echo yes || echo "no (got: $clients)")"
    if [ -n "$SERVER" ]; then
      sexe=$(readlink "/proc/$SERVER/exe" 2>/dev/null)
      fact mps.server.proc "the server process" "nvidia-cuda-mps-server as the client's user" "${sexe:-?} uid $(awk '/^Uid:/{print $2}' "/proc/$SERVER/status" 2>/dev/null)" info
      SERVER_TICKS=$(start_ticks "$SERVER")
      sstat=$(cat "/proc/$SERVER/stat" 2>/dev/null); sstat=${sstat##*) }; read -r -a sf <<<"$sstat"
      mps_fact mps.server.parent "the server is a child of the control daemon" "parent $PID" "parent ${sf[1]:-?}" "$([ "${sf[1]:-}" = "$PID" ] && echo 1 || echo 0)"
      "$UM" status --json >"$OUT/status-client.json" 2>>"$OUT/run.log"
      "$UM" status >"$OUT/status-client.txt" 2>&1
      check status.servers "status lists the daemon's MPS server" "[$SERVER]" "$(jget "$OUT/status-client.json" 'd["managed_daemons"][0].get("mps_servers")')"
    fi
    shm=$(find /dev/shm -maxdepth 1 -iname '*mps*' -printf '%f ' 2>/dev/null | cut -c1-200)
    mps_fact mps.shm "server files in /dev/shm" "mps.shm.*" "${shm:-(none)}" "$([ -n "$shm" ] && echo 1 || echo 0)"
    smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader >"$OUT/compute-apps.txt" 2>&1
    fact smi.apps "nvidia-smi --query-compute-apps while the client runs" "-" "$(tr '\n' ';' <"$OUT/compute-apps.txt")" info
    prc=$(jget "$WORK/client.json" 'd["probe"]["rc"]')
    check probe.rc "unilab-mps probe --requested mps from inside the client exits 0" 0 "$prc"
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); open(sys.argv[2],"w").write(d["probe"]["stdout"])' "$WORK/client.json" "$OUT/probe.json" 2>/dev/null
    check probe.validated "probe: validated" true "$(jget "$OUT/probe.json" 'd["validated"]')"
    check probe.daemon "probe: server_pid is the recorded control daemon (its pid file)" "$PID" "$(jget "$OUT/probe.json" 'd["server_pid"]')"
    check probe.uuid "probe: learner GPU = the daemon's GPU" "$(canon "$UUID")" "$(canon "$(jget "$OUT/probe.json" 'd["learner_gpu_uuid"]')")"
  fi
  wait "$cpid"
  check client.exit "the client exits 0" 0 "$?"

  # ------------------------------------------------------------ 4. stop, nothing left
  log "stop"
  # From here on this shell's children must not carry the daemon's variables
  # (left.procs below looks for them in every process).
  unset CUDA_VISIBLE_DEVICES CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  t=$SECONDS
  "$UM" stop --json >"$OUT/stop.json" 2>>"$OUT/run.log"
  check stop.rc "unilab-mps stop exits 0" 0 "$?"
  check stop.outcome "stop outcome (no client attached)" quit "$(jget "$OUT/stop.json" 'd["outcome"]')"
  fact stop.time "stop took" "-" "$((SECONDS - t)) s" info
  sleep 0.5
  check left.daemon "the daemon process is gone" gone "$(proc_alive "$PID" && [ "$(start_ticks "$PID")" = "$TICKS" ] && echo alive || echo gone)"
  if [ -n "${SERVER:-}" ]; then
    check left.server "the MPS server process is gone" gone "$(proc_alive "$SERVER" && [ "$(start_ticks "$SERVER")" = "${SERVER_TICKS:-}" ] && echo alive || echo gone)"
  fi
  left=$(our_mps_pids)
  check left.procs "no process with our pipe directory in its environment" "" "$(printf '%s' "$left" | tr '\n' ' ')"
  check left.servers "no MPS process of ours started during the check (comm nvidia-cuda-mps, our uid)" "" "$(our_mps_named | tr '\n' ' ')"
  check left.dirs "pipe/log directories removed" "" "$(find "$WORK/r" -mindepth 1 -maxdepth 1 -printf '%f ' 2>/dev/null)"
  check left.record "record removed" "" "$(find "$WORK/s" -mindepth 1 -maxdepth 1 -printf '%f ' 2>/dev/null)"
  "$UM" status --json >"$OUT/status-after.json" 2>>"$OUT/run.log"
  check left.status "status lists no daemon" 0 "$(jget "$OUT/status-after.json" 'len(d["managed_daemons"])')"
  unset CUDA_VISIBLE_DEVICES CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
fi

# ---------------------------------------------------------------- 4b. limits set and read back
log "limits: start --threads 37.5 --mem 1024M, read them back through the daemon"
if "$UM" start "$UUID" --name lim --threads 37.5 --mem 1024M --json >"$OUT/start-lim.json" 2>"$OUT/start-lim.err"; then
  fact limits.start "the daemon accepts the limits as the code sends them (set_default_*, DEV = ordinal 0)" "-" "accepted" ok
  LPIPE=$(jget "$OUT/start-lim.json" 'd["daemons"][0]["pipe_directory"]')
  t=$(echo get_default_active_thread_percentage | CUDA_MPS_PIPE_DIRECTORY=$LPIPE timeout 20 "$MPSCTL" 2>&1)
  check limits.threads "get_default_active_thread_percentage reads back 37.5" 37.5 \
    "$(python3 -c 'import sys; print(float(sys.argv[1]))' "$t" 2>/dev/null || printf '%s' "$t")"
  m=$(echo "get_default_device_pinned_mem_limit 0" | CUDA_MPS_PIPE_DIRECTORY=$LPIPE timeout 20 "$MPSCTL" 2>&1)
  # Any spelling of 1024 MiB (1024M, 1G, bytes) is the same limit.
  mb=$(python3 -c '
import re, sys
m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", sys.argv[1], re.I)
print(int(float(m.group(1)) * 1024 ** "BKMGT".index((m.group(2) or "B").upper()) // 2**20) if m else "")' "$m")
  if [ -n "$mb" ]; then
    check limits.mem "get_default_device_pinned_mem_limit 0 reads back 1024 MiB ('$m')" 1024 "$mb"
  else
    mps_fact limits.mem "get_default_device_pinned_mem_limit 0 output" "1024M" "$m" 0
  fi
  "$UM" stop lim --json >"$OUT/stop-lim.json" 2>>"$OUT/run.log"
  check limits.stop "stop the limits daemon" quit "$(jget "$OUT/stop-lim.json" 'd["outcome"]')"
else
  fact limits.start "the daemon accepts the limits as the code sends them" "accepted" "$(head -n2 "$OUT/start-lim.err")" fail
fi

# ---------------------------------------------------------------- 5. throughput: MPS vs time slicing
# run_workers TAG NPROC PIPE_DIR: NPROC kernels.py workers at once; prints the aggregate rate
run_workers() {
  local tag=$1 n=$2 pipe=$3 i start pids=() fake=()
  [ "$DRY" = 1 ] && fake=(--fake)
  start=$(python3 -c 'import time; print(time.time() + float(__import__("sys").argv[1]))' "$([ "$DRY" = 1 ] && echo 1 || echo 12)")
  for ((i = 0; i < n; i++)); do
    CUDA_MPS_PIPE_DIRECTORY=$pipe CUDA_VISIBLE_DEVICES=$UUID python3 "$here/kernels.py" --seconds "$BENCH_S" --start-at "$start" \
      --out "$WORK/k-$tag-$i.json" "${fake[@]}" >>"$OUT/kernels.log" 2>&1 &
    pids+=($!)
  done
  local rc=0
  for i in "${pids[@]}"; do wait "$i" || rc=1; done
  python3 - "$tag" "$n" "$WORK" "$OUT/bench.jsonl" <<'EOF' || rc=1
import json, sys
tag, n, work, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
ws = [json.load(open("%s/k-%s-%d.json" % (work, tag, i))) for i in range(n)]
row = {"tag": tag, "procs": n, "kernels": sum(w["kernels"] for w in ws),
       "window_s": max(w["elapsed_s"] for w in ws), "late_s": max(w["late_s"] for w in ws),
       # None (not checked) unless every worker verified its kernels' result.
       "value_check": (all(w["value_check"] for w in ws) if all("value_check" in w for w in ws) else None), "workers": ws}
row["kernels_per_s"] = round(row["kernels"] / row["window_s"], 1)
open(out, "a").write(json.dumps(row, sort_keys=True) + "\n")
print(row["kernels_per_s"])
EOF
  return $rc
}
log "throughput: ${BENCH_REPS} x (1 and 2 processes, with and without MPS), ${BENCH_S} s each"
: >"$OUT/bench.jsonl"
mkdir -p "$WORK/nomps"  # no daemon here: clients run without MPS (time slicing)
if ! "$UM" start "$UUID" --name bench --json >"$OUT/start-bench.json" 2>>"$OUT/run.log"; then
  fact bench "start a daemon for the throughput runs" "starts" "$(tail -n2 "$OUT/run.log")" fail
else
  BPIPE=$(jget "$OUT/start-bench.json" 'd["daemons"][0]["pipe_directory"]')
  for ((r = 0; r < BENCH_REPS; r++)); do
    for cfg in "nomps 1" "nomps 2" "mps 2" "mps 1"; do
      read -r kind n <<<"$cfg"
      pipe=$WORK/nomps
      [ "$kind" = mps ] && pipe=$BPIPE
      rate=$(run_workers "$kind-$n-$r" "$n" "$pipe") || fact "bench.$kind.$n.$r" "throughput run" "completes" "failed: $(tail -n3 "$OUT/kernels.log" | tr '\n' ' ')" fail
      log "  $kind x$n: ${rate:-?} kernels/s"
    done
  done
  "$UM" stop bench --json >"$OUT/stop-bench.json" 2>>"$OUT/run.log"
  check bench.stop "stop the throughput daemon" quit "$(jget "$OUT/stop-bench.json" 'd["outcome"]')"
fi

# ---------------------------------------------------------------- 6. stop with a client attached
if [ "$BUSY_STOP" = 1 ]; then
  log "stop while a client is attached (--timeout 6)"
  if "$UM" start "$UUID" --name busy --json >"$OUT/start-busy.json" 2>>"$OUT/run.log"; then
    bpid=$(jget "$OUT/start-busy.json" 'd["daemons"][0]["pid"]')
    eval "$("$UM" env busy)"
    export CUDA_VISIBLE_DEVICES CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    rm -f "$WORK/busy.json"
    client=(python3 "$here/mps_client.py" --hold 40 --ready "$WORK/busy.json")
    [ "$DRY" = 1 ] && client+=(--fake "$FAKES/fake-cuda-client")
    "${client[@]}" >"$OUT/busy-client.out" 2>&1 &
    cpid=$!
    CLIENT_PIDS+=("$cpid")
    for _ in $(seq 1 300); do [ -s "$WORK/busy.json" ] && break; sleep 0.1; done
    bserver=$(echo get_server_list | timeout 20 "$MPSCTL" 2>&1 | grep -m1 -E '^[0-9]+$')
    bticks=$(start_ticks "${bserver:-0}")
    t=$(date +%s.%N)
    "$UM" stop busy --timeout 6 --json >"$OUT/stop-busy.json" 2>>"$OUT/run.log"
    rc=$?
    took=$(python3 -c 'import sys,time; print(round(time.time()-float(sys.argv[1]),2))' "$t")
    check busy.rc "stop with a client attached exits 0 within the timeout" 0 "$rc"
    fact busy.outcome "outcome of stop --timeout 6 with a client attached" "quit waits for clients, then SIGTERM (terminated)" \
      "$(jget "$OUT/stop-busy.json" 'd["outcome"]') ($(jget "$OUT/stop-busy.json" 'd["detail"]')) after $took s" info
    sleep 1
    check busy.daemon "the control daemon is gone" gone "$(proc_alive "$bpid" && echo alive || echo gone)"
    if [ -n "$bserver" ]; then
      if proc_alive "$bserver" && [ "$(start_ticks "$bserver")" = "$bticks" ]; then
        fact busy.server "the MPS server after its control daemon was stopped" "ends with its control daemon" "still running (pid $bserver) while its client holds it" differs
      else
        fact busy.server "the MPS server after its control daemon was stopped" "ends with its control daemon" "gone" "$([ "$DRY" = 1 ] && echo not-checked || echo ok)"
      fi
    fi
    if kill -0 "$cpid" 2>/dev/null; then
      fact busy.client "the attached client after the stop" "-" "still running" info
      kill "$cpid" 2>/dev/null
    fi
    wait "$cpid"
    fact busy.client.rc "the attached client's exit" "-" "exit $?: $(tail -n2 "$OUT/busy-client.out" | tr '\n' ' ')" info
    # An orphaned server of ours (same start time as seen, our uid) is ended here, never by name.
    if [ -n "$bserver" ] && proc_alive "$bserver" && [ "$(start_ticks "$bserver")" = "$bticks" ] &&
      [ "$(awk '/^Uid:/{print $2}' "/proc/$bserver/status")" = "$(id -u)" ]; then
      for _ in $(seq 1 50); do proc_alive "$bserver" || break; sleep 0.2; done
      if proc_alive "$bserver"; then
        fact busy.orphan "an orphaned MPS server survived 10 s after its client ended" "-" "pid $bserver: SIGTERM" differs
        kill "$bserver"
      fi
    fi
    unset CUDA_VISIBLE_DEVICES CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    sleep 1
    left=$(our_mps_pids)
    check busy.left "nothing of ours left after the busy stop" "" "$(printf '%s' "$left" | tr '\n' ' ')"
  else
    fact busy "start a daemon for the busy stop" "starts" "$(tail -n2 "$OUT/run.log")" fail
  fi
fi

# ---------------------------------------------------------------- 6b. quit -t with a live client
# What stop sends first: `quit -t S` ends the daemon after S seconds even
# while a client holds it (a plain quit would wait for the client).
log "quit -t 2 with a live client"
if "$UM" start "$UUID" --name qt --json >"$OUT/start-qt.json" 2>>"$OUT/run.log"; then
  qpid=$(jget "$OUT/start-qt.json" 'd["daemons"][0]["pid"]')
  qticks=$(jget "$OUT/start-qt.json" 'd["daemons"][0]["process_start_ticks"]')
  eval "$("$UM" env qt)"
  export CUDA_VISIBLE_DEVICES CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  rm -f "$WORK/qt.json"
  client=(python3 "$here/mps_client.py" --hold 40 --ready "$WORK/qt.json")
  [ "$DRY" = 1 ] && client+=(--fake "$FAKES/fake-cuda-client")
  "${client[@]}" >"$OUT/qt-client.out" 2>&1 &
  cpid=$!
  CLIENT_PIDS+=("$cpid")
  for _ in $(seq 1 300); do [ -s "$WORK/qt.json" ] && break; sleep 0.1; done
  qserver=$(echo get_server_list | timeout 20 "$MPSCTL" 2>&1 | grep -m1 -E '^[0-9]+$')
  qsticks=$(start_ticks "${qserver:-0}")
  t=$(date +%s.%N)
  echo "quit -t 2" | timeout 20 "$MPSCTL" >"$OUT/quit-t.out" 2>&1
  for _ in $(seq 1 150); do proc_alive "$qpid" && [ "$(start_ticks "$qpid")" = "$qticks" ] || break; sleep 0.1; done
  took=$(python3 -c 'import sys,time; print(round(time.time()-float(sys.argv[1]),2))' "$t")
  gone=$(proc_alive "$qpid" && [ "$(start_ticks "$qpid")" = "$qticks" ] && echo alive || echo gone)
  mps_fact quit.t "quit -t 2 with a live client ends the daemon in about 2 s" "gone within 6 s" "$gone after $took s" \
    "$([ "$gone" = gone ] && python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) <= 6 else 1)' "$took" && echo 1 || echo 0)"
  if [ -n "$qserver" ]; then
    sleep 1
    mps_fact quit.t.server "its MPS server after quit -t" "gone" \
      "$(proc_alive "$qserver" && [ "$(start_ticks "$qserver")" = "$qsticks" ] && echo "alive (pid $qserver)" || echo gone)" \
      "$(proc_alive "$qserver" && [ "$(start_ticks "$qserver")" = "$qsticks" ] && echo 0 || echo 1)"
  fi
  kill "$cpid" 2>/dev/null
  wait "$cpid"
  fact quit.t.client "the client after quit -t" "-" "exit $?: $(tail -n1 "$OUT/qt-client.out")" info
  unset CUDA_VISIBLE_DEVICES CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  # The record of a daemon that quit: stop cleans it (stale: exit 3) and
  # kills any server of it still alive, identity-verified.
  "$UM" stop qt --json >"$OUT/stop-qt.json" 2>>"$OUT/run.log"
  sleep 1
  check quit.t.left "nothing of ours left after quit -t and stop" "" "$(our_mps_pids | tr '\n' ' ')"
else
  fact quit.t "start a daemon for quit -t" "starts" "$(tail -n2 "$OUT/run.log")" fail
fi
check left.servers.end "no MPS process of ours left at the end (comm nvidia-cuda-mps, our uid)" "" "$(our_mps_named | tr '\n' ' ')"

# ---------------------------------------------------------------- 7. per-client settings: thread share, priority
# What a client's own environment does under a daemon (README's "per
# daemon / per client" table): the SMs a client sees under
# CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, whether a client may ask for more than
# the daemon's default, and which CUDA_MPS_CLIENT_PRIORITY values CUDA takes.
# one_client TAG ENV...: runs a short client with ENV under the exported
# daemon; prints "rc sm_count error"
one_client() {
  local tag=$1; shift
  rm -f "$WORK/$tag.json"
  local c=(python3 "$here/mps_client.py" --hold 0 --ready "$WORK/$tag.json")
  [ "$DRY" = 1 ] && c+=(--fake "$FAKES/fake-cuda-client")
  env "$@" timeout 120 "${c[@]}" >"$OUT/$tag.out" 2>&1
  local rc=$?
  cp "$WORK/$tag.json" "$OUT/$tag.json" 2>/dev/null
  printf '%s|%s|%s' "$rc" "$(jget "$WORK/$tag.json" 'd.get("sm_count")')" "$(jget "$WORK/$tag.json" 'd.get("error")' | tr '|\n' '/ ' | cut -c1-200)"
}
# save_logs NAME LOG_DIR: the daemon's logs, kept before its stop removes them
save_logs() { mkdir -p "$OUT/logs/$1" && cp -a "$2/." "$OUT/logs/$1/" 2>/dev/null; }
log "per-client settings: thread share and priority"
if "$UM" start "$UUID" --name pc --json >"$OUT/start-pc.json" 2>>"$OUT/run.log"; then
  eval "$("$UM" env pc)"
  export CUDA_VISIBLE_DEVICES CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  PCLOG=$CUDA_MPS_LOG_DIRECTORY
  IFS="|" read -r rc sm0 err <<<"$(one_client pc-default)"
  fact share.default "a client with no share of its own" "-" "rc $rc, $sm0 SMs ${err}" info
  for pct in 50 25; do
    IFS="|" read -r rc sm err <<<"$(one_client "pc-share$pct" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$pct)"
    fact "share.client$pct" "a client with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$pct" "fewer SMs than $sm0" "rc $rc, $sm SMs ${err}" \
      "$([ "$DRY" = 1 ] && echo not-checked || { [ "$rc" = 0 ] && [ -n "$sm" ] && [ -n "$sm0" ] && [ "$sm" -lt "$sm0" ] 2>/dev/null && echo ok || echo differs; })"
  done
  echo "set_default_active_thread_percentage 25" | timeout 20 "$MPSCTL" >"$OUT/pc-set25.out" 2>&1
  IFS="|" read -r rc sm25 err <<<"$(one_client pc-daemon25)"
  fact share.daemon25 "a client under a daemon default of 25 %" "-" "rc $rc, $sm25 SMs ${err}" info
  IFS="|" read -r rc sm err <<<"$(one_client pc-daemon25-client80 CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=80)"
  fact share.raise "a client asking for 80 % under a daemon default of 25 %: may it raise its own share?" "-" \
    "rc $rc, $sm SMs (daemon default gives $sm25) ${err}" info
  for prio in 0 1 2 -1 high; do
    IFS="|" read -r rc sm err <<<"$(one_client "pc-prio$prio" CUDA_MPS_CLIENT_PRIORITY=$prio)"
    fact "prio.$prio" "a client with CUDA_MPS_CLIENT_PRIORITY=$prio" "0 and 1 documented" "rc $rc, $sm SMs ${err}" info
  done
  # Two clients on the server at once, one each priority: both run.
  save_logs pc "$PCLOG"
  unset CUDA_VISIBLE_DEVICES CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  "$UM" stop pc --json >"$OUT/stop-pc.json" 2>>"$OUT/run.log"
  check pc.stop "stop the per-client daemon" quit "$(jget "$OUT/stop-pc.json" 'd["outcome"]')"
else
  fact pc "start a daemon for the per-client settings" "starts" "$(tail -n2 "$OUT/run.log")" fail
fi

# ---------------------------------------------------------------- 8. faults: what the real MPS says
# A fatal fault in one client (a device-side assert), and a server killed
# from outside: what the other client sees, what control.log and
# server.log say, what get_server_list / get_server_status answer, and
# whether the daemon takes new clients afterwards. These are the lines the
# plugin's fault reporting reads (tests/fakes model them).
if [ "$DRY" = 0 ]; then
  log "faults: a client's fatal fault, a killed server"
  if "$UM" start "$UUID" --name flt --json >"$OUT/start-flt.json" 2>>"$OUT/run.log"; then
    fpid=$(jget "$OUT/start-flt.json" 'd["daemons"][0]["pid"]')
    eval "$("$UM" env flt)"
    export CUDA_VISIBLE_DEVICES CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    FLOG=$CUDA_MPS_LOG_DIRECTORY
    rm -f "$WORK/fa.json"
    python3 "$here/mps_client.py" --hold 20 --ready "$WORK/fa.json" >"$OUT/fault-holder.out" 2>&1 &
    hpid=$!
    CLIENT_PIDS+=("$hpid")
    for _ in $(seq 1 300); do [ -s "$WORK/fa.json" ] && break; sleep 0.1; done
    fserver=$(echo get_server_list | timeout 20 "$MPSCTL" 2>&1 | grep -m1 -E '^[0-9]+$')
    fsticks=$(start_ticks "${fserver:-0}")
    cp "$FLOG/control.log" "$OUT/fault-control-before.log" 2>/dev/null
    rm -f "$WORK/fb.json"
    timeout 120 python3 "$here/mps_client.py" --hold 0 --fault --ready "$WORK/fb.json" >"$OUT/fault-client.out" 2>&1
    frc=$?
    cp "$WORK/fb.json" "$OUT/fault-client.json" 2>/dev/null
    fact fault.client "a client's fatal fault (device-side assert): its own error" "-" "exit $frc: $(jget "$WORK/fb.json" 'd.get("fault_error")')" info
    sleep 2
    echo get_server_list | timeout 20 "$MPSCTL" >"$OUT/fault-servers.out" 2>&1
    fact fault.servers "get_server_list after the fault" "-" "$(tr '\n' ' ' <"$OUT/fault-servers.out")" info
    for cmd in "get_server_status ${fserver:-0}" "get_server_status" "get_client_list ${fserver:-0}" "help"; do
      out=$(echo "$cmd" | timeout 20 "$MPSCTL" 2>&1); rc=$?
      printf '### %s (exit %s)\n%s\n' "$cmd" "$rc" "$out" >>"$OUT/fault-commands.out"
      fact "fault.cmd.${cmd%% *}$([ "$cmd" = "${cmd%% *}" ] && echo .bare)" "'$cmd' after the fault" "-" "exit $rc: $(printf '%s' "$out" | head -c 300)" info
    done
    fact fault.server.alive "the server process after the fault" "-" \
      "$(proc_alive "${fserver:-0}" && [ "$(start_ticks "$fserver")" = "$fsticks" ] && echo "alive (pid $fserver)" || echo gone)" info
    wait "$hpid"
    hrc=$?
    cp "$WORK/fa.json" "$OUT/fault-holder.json" 2>/dev/null
    fact fault.holder "the other client of the same server" "-" "exit $hrc: $(jget "$WORK/fa.json" 'd.get("hold_error")') after $(jget "$WORK/fa.json" 'd.get("hold_error_after_s")') s" info
    IFS="|" read -r rc sm err <<<"$(one_client fault-after)"
    fact fault.newclient "a new client once the faulting and the holding client are gone" "-" "rc $rc ${err}" info
    echo get_server_list | timeout 20 "$MPSCTL" >"$OUT/fault-servers-after.out" 2>&1
    # A server killed from outside (SIGKILL, ours: child of our daemon, same start time)
    rm -f "$WORK/fk.json"
    python3 "$here/mps_client.py" --hold 20 --ready "$WORK/fk.json" >"$OUT/kill-holder.out" 2>&1 &
    kpid=$!
    CLIENT_PIDS+=("$kpid")
    for _ in $(seq 1 300); do [ -s "$WORK/fk.json" ] && break; sleep 0.1; done
    kserver=$(echo get_server_list | timeout 20 "$MPSCTL" 2>&1 | grep -m1 -E '^[0-9]+$')
    if [ -n "$kserver" ] && proc_alive "$kserver"; then
      kst=$(cat "/proc/$kserver/stat"); kst=${kst##*) }; read -r -a kf <<<"$kst"
      if [ "${kf[1]}" = "$fpid" ]; then kill -KILL "$kserver"; fi
    fi
    wait "$kpid"
    krc=$?
    cp "$WORK/fk.json" "$OUT/kill-holder.json" 2>/dev/null
    fact fault.killed.client "a client whose server was SIGKILLed" "-" "exit $krc: $(jget "$WORK/fk.json" 'd.get("hold_error")')" info
    sleep 1
    echo get_server_list | timeout 20 "$MPSCTL" >"$OUT/kill-servers.out" 2>&1
    IFS="|" read -r rc sm err <<<"$(one_client kill-after)"
    fact fault.killed.newclient "a new client after its server was killed" "-" "rc $rc ${err}" info
    fact fault.daemon.alive "the control daemon after both" "-" "$(proc_alive "$fpid" && echo alive || echo gone)" info
    save_logs flt "$FLOG"
    unset CUDA_VISIBLE_DEVICES CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    "$UM" stop flt --json >"$OUT/stop-flt.json" 2>>"$OUT/run.log"
    fact fault.stop "stop after the faults" "-" "$(jget "$OUT/stop-flt.json" 'd["outcome"]')" info
    save_logs flt-after "$FLOG"
  else
    fact fault "start a daemon for the faults" "starts" "$(tail -n2 "$OUT/run.log")" fail
  fi
  # A daemon SIGKILLed: what is left (pipe dir files) and what the front end says.
fi

# ---------------------------------------------------------------- 9. MIG (read only; never changes the layout)
log "MIG: what the node shows (read only)"
{
  echo "### nvidia-smi --query-gpu=index,uuid,mig.mode.current,mig.mode.pending"
  smi --query-gpu=index,uuid,mig.mode.current,mig.mode.pending --format=csv,noheader 2>&1
  echo "### nvidia-smi mig -lgi"; smi mig -lgi 2>&1; echo "(exit $?)"
  echo "### nvidia-smi mig -lci"; smi mig -lci 2>&1; echo "(exit $?)"
  echo "### nvidia-smi mig -lgip"; smi mig -lgip 2>&1 | head -n 60; echo "(exit $?)"
  echo "### ls -l /dev/nvidia-caps"; ls -l /dev/nvidia-caps 2>&1 | head -n 40
  echo "### /proc/driver/nvidia-caps/mig-minors (head)"; head -n 24 /proc/driver/nvidia-caps/mig-minors 2>&1
  echo "### /proc/driver/nvidia/capabilities"; find /proc/driver/nvidia/capabilities -maxdepth 5 2>&1 | head -n 40
  for f in /proc/driver/nvidia/capabilities/mig/config /proc/driver/nvidia/capabilities/mig/monitor; do echo "### $f"; cat "$f" 2>&1; done
  echo "### ls -l /dev/nvidia*"; ls -l /dev/nvidia* 2>&1 | head -n 30
} >"$OUT/mig.txt" 2>&1
smi -q -x >"$OUT/nvidia-smi-q.xml" 2>&1
fact mig.mode "MIG mode of GPU $GPU (current, pending)" "-" "$(smi --query-gpu=mig.mode.current,mig.mode.pending --format=csv,noheader -i "$GPU" 2>&1)" info
if grep -q "MIG " "$OUT/nvidia-smi-L.txt"; then
  mps_fact mig.L "nvidia-smi -L MIG line" "  MIG <profile>  Device  N: (UUID: MIG-...)" "$(grep -m1 'MIG ' "$OUT/nvidia-smi-L.txt")" \
    "$(grep -qE '^  MIG [0-9a-z.]+ +Device +[0-9]+: \(UUID: MIG-[0-9a-f-]{36}\)$' "$OUT/nvidia-smi-L.txt" && echo 1 || echo 0)"
  smi >"$OUT/nvidia-smi-table.txt" 2>&1
  mps_fact mig.table "the table's 'MIG devices' block has a 'GPU GI CI MIG-Dev' row per MIG device" \
    "$(grep -c 'MIG ' "$OUT/nvidia-smi-L.txt") rows" "$(grep -cE '^\| +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +\|' "$OUT/nvidia-smi-table.txt") rows" \
    "$([ "$(grep -c 'MIG ' "$OUT/nvidia-smi-L.txt")" = "$(grep -cE '^\| +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +\|' "$OUT/nvidia-smi-table.txt")" ] && echo 1 || echo 0)"
  # A daemon on the first MIG device (never on the MIG-enabled GPU itself).
  MIGU=$(grep -m1 -oE 'MIG-[0-9a-f-]{36}' "$OUT/nvidia-smi-L.txt")
  if "$UM" start "$MIGU" --name mig --json >"$OUT/start-mig.json" 2>"$OUT/start-mig.err"; then
    check mig.daemon.cvd "the MIG daemon's CUDA_VISIBLE_DEVICES is the MIG UUID" "$MIGU" \
      "$(tr '\0' '\n' <"/proc/$(jget "$OUT/start-mig.json" 'd["daemons"][0]["pid"]')/environ" 2>/dev/null | sed -n 's/^CUDA_VISIBLE_DEVICES=//p')"
    eval "$("$UM" env mig)"
    export CUDA_VISIBLE_DEVICES CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    rm -f "$WORK/mig.json"
    timeout 120 python3 "$here/mps_client.py" --hold 0 --ready "$WORK/mig.json" \
      --probe "$UM" probe --requested mps --learner-device cuda:0 --collector-device cuda:0 --backend torch --json >"$OUT/mig-client.out" 2>&1
    check mig.client "a CUDA client on the MIG device under its daemon" 0 "$?"
    cp "$WORK/mig.json" "$OUT/mig-client.json" 2>/dev/null
    fact mig.probe "probe: the MIG learner's parent GPU" "-" "$(jget "$WORK/mig.json" 'json.loads(d["probe"]["stdout"]).get("learner_gpu_parent_uuid")' 2>/dev/null)" info
    unset CUDA_VISIBLE_DEVICES CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    "$UM" stop mig --json >"$OUT/stop-mig.json" 2>>"$OUT/run.log"
    check mig.stop "stop the MIG daemon" quit "$(jget "$OUT/stop-mig.json" 'd["outcome"]')"
  else
    fact mig.start "a daemon on MIG device $MIGU" "starts" "$(head -n2 "$OUT/start-mig.err")" fail
  fi
else
  fact mig.L "MIG devices on this machine" "-" "none (MIG is off here, and this check never changes the MIG layout: the MIG daemon is checked by the fakes and the Slurm e2e only)" not-checked
fi

# ---------------------------------------------------------------- 10. the MPS binaries' own words
# Commands and log lines the tools know, from their strings (for the fakes).
for b in "$MPSCTL" "$(dirname "$MPSCTL")/nvidia-cuda-mps-server"; do
  [ -f "$b" ] || continue
  python3 - "$b" >"$OUT/strings-$(basename "$b").txt" 2>&1 <<'EOF'
import re, sys
data = open(sys.argv[1], "rb").read()
seen = set()
for m in re.finditer(rb"[\x20-\x7e]{6,}", data):
    s = m.group().decode()
    if s in seen: continue
    seen.add(s)
    if re.search(r"(?i)server|client|fault|exit|quit|shutdown|status|priority|percentage|pinned|mig|error|fatal|terminat|log|control", s):
        print(s[:200])
EOF
done
for m in /usr/share/man/man1/nvidia-cuda-mps-control.1.gz /usr/local/share/man/man1/nvidia-cuda-mps-control.1.gz; do
  [ -f "$m" ] && zcat "$m" >"$OUT/man-nvidia-cuda-mps-control.txt" 2>&1
done
timeout 10 "$MPSCTL" -h >"$OUT/mps-control-help.txt" 2>&1

# ---------------------------------------------------------------- 11. the job prolog and epilog helpers
# What a Slurm node runs, without Slurm: unilab-mps-prolog with the
# environment slurmd gives a job (SLURM_JOB_GPUS, the option variable) and a
# gres.conf naming this GPU's device file. The GRES index goes through the
# device file's minor and the driver's information file to the UUID: the
# path nvidia-smi 580 (no minor_number) would have broken.
PH=$(dirname "$UM")/unilab-mps-prolog EH=$(dirname "$UM")/unilab-mps-epilog
[ -x "$PH" ] || PH=$BUNDLE/bin/unilab-mps-prolog EH=$BUNDLE/bin/unilab-mps-epilog
DEVFILE=/dev/nvidia${MINOR:-0}
if [ "$DRY" = 1 ]; then
  # The fakes' GPU $GPU has the fake driver's minor; a device node of that minor stands for it.
  DEVFILE=$WORK/slurm/nvidia${MINOR:-0}
fi
if [ "$(id -u)" != 0 ]; then
  fact prolog "the job prolog helper" "runs as root" "skipped: the check runs as uid $(id -u)" not-checked
elif [ ! -x "$PH" ]; then
  fact prolog "the job prolog helper" "built" "no unilab-mps-prolog next to $UM or in the bundle" fail
else
  log "the job prolog and epilog helpers on GPU $GPU ($DEVFILE)"
  mkdir -p "$WORK/slurm" && chmod 755 "$WORK/slurm"
  [ "$DRY" = 1 ] && mknod "$DEVFILE" c 195 "${MINOR:-0}" 2>/dev/null
  printf 'NodeName=gpucheck Name=gpu File=%s\n' "$DEVFILE" >"$WORK/slurm/gres.conf"
  {
    echo "state_dir=$WORK/ps run_dir=$WORK/pr gres_conf=$WORK/slurm/gres.conf"
    echo "nvidia_smi=$NVSMI mps_control=$MPSCTL contain=off dir_size=off start_timeout=30 stop_timeout=10"
    [ -n "$DRIVER_DIR" ] && echo "driver_dir=$DRIVER_DIR"
    [ "$DRY" = 1 ] && echo "driver_proc=$DRIVER_PROC"
  } >"$WORK/slurm/args.conf"
  hook_env=(env -i SLURM_JOB_ID=4242 SLURM_JOB_UID="$(id -u)" SLURM_JOB_GID="$(id -g)" SLURM_JOB_GPUS=0
    SLURMD_NODENAME=gpucheck "SPANK__SLURM_SPANK_OPTION_unilab_mps_unilab_mps=(null)")
  t=$(date +%s.%N)
  "${hook_env[@]}" "$PH" --config "$WORK/slurm/args.conf" >"$OUT/prolog.out" 2>&1
  rc=$?
  took=$(python3 -c 'import sys,time; print(round(time.time()-float(sys.argv[1]),2))' "$t")
  check prolog.rc "the prolog helper exits 0 (took $took s)" 0 "$rc"
  rec=$(ls "$WORK/ps"/job4242.gpucheck.gpu0.json 2>/dev/null)
  check prolog.uuid "GRES 0 -> $DEVFILE -> minor ${MINOR:-?} -> the driver's information -> the GPU's UUID" "$UUID" \
    "$(jget "$rec" 'd["gpu_uuids"][0]')"
  PPID_=$(jget "$rec" 'd["pid"]')
  check prolog.daemon "the recorded daemon runs nvidia-cuda-mps-control" "$MPSCTL" "$(readlink "/proc/${PPID_:-0}/exe" 2>/dev/null)"
  PPIPE=$(jget "$rec" 'd["pipe_directory"]')
  if [ -n "$PPIPE" ] && [ "$DRY" = 0 ]; then
    rm -f "$WORK/pj.json"
    CUDA_VISIBLE_DEVICES=$UUID CUDA_MPS_PIPE_DIRECTORY=$PPIPE CUDA_MPS_LOG_DIRECTORY=$(jget "$rec" 'd["log_directory"]') \
      timeout 120 python3 "$here/mps_client.py" --hold 0 --ready "$WORK/pj.json" >"$OUT/prolog-client.out" 2>&1
    check prolog.client "a CUDA client under the prolog's daemon" 0 "$?"
    save_logs prolog "$(jget "$rec" 'd["log_directory"]')"
  fi
  "${hook_env[@]}" "$EH" --config "$WORK/slurm/args.conf" >"$OUT/epilog.out" 2>&1
  check epilog.rc "the epilog helper exits 0" 0 "$?"
  sleep 0.5
  check epilog.gone "the daemon is gone after the epilog" gone "$(proc_alive "${PPID_:-0}" && echo alive || echo gone)"
  check epilog.clean "no record or directory left" "" "$(ls "$WORK/ps" "$WORK/pr" 2>/dev/null | grep -v '^$' | grep -v ':$' | tr '\n' ' ')"
fi

# ---------------------------------------------------------------- report
smi --query-gpu=index,compute_mode,mig.mode.current,driver_version,persistence_mode --format=csv,noheader >"$OUT/modes-after.csv" 2>&1
# Only rows that hold the values can show they are unchanged (an error
# message twice is not a measurement; the fake knows no compute_mode).
modes_ok() { [ -s "$1" ] && ! grep -qvE '^[0-9]+, [^,]+, [^,]+, [^,]+, [^,]+$' "$1" && ! grep -qiE 'not supported|invalid|error|unknown' "$1"; }
# The prolog's own query read the compute and MIG modes; they must be as at the start.
smi --query-gpu=$Q6 --format=csv,noheader >"$OUT/gpus6-after.csv" 2>/dev/null
if [ "$DRY" = 1 ]; then
  fact gpu.modes6 "compute/MIG modes of the prolog's query unchanged" "unchanged" "(fake)" not-checked
else
  check gpu.modes6 "compute/MIG modes of the prolog's query unchanged" "$(cut -d, -f1,4,5 "$OUT/gpus6.csv")" "$(cut -d, -f1,4,5 "$OUT/gpus6-after.csv")"
fi
if modes_ok "$OUT/modes-before.csv" && modes_ok "$OUT/modes-after.csv"; then
  check gpu.untouched "compute mode / MIG / persistence unchanged by the check" "$(cat "$OUT/modes-before.csv")" "$(cat "$OUT/modes-after.csv")"
else
  fact gpu.untouched "compute mode / MIG / persistence unchanged by the check" "unchanged" \
    "nvidia-smi did not report them: $(head -n1 "$OUT/modes-after.csv")" not-checked
fi
fact runtime "whole check" "-" "$((SECONDS - T_START)) s" info
python3 "$here/summarize.py" "$OUT" "$([ "$DRY" = 1 ] && echo dry-run || echo real)" || FAILED=1
log "done in $((SECONDS - T_START)) s: $OUT/gpu-report.md$([ "$FAILED" = 1 ] && echo ' (some checks FAILED)')"
exit "$FAILED"
