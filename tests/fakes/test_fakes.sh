#!/usr/bin/env bash
# Exercises the fakes in the bin dir given as $1 (builds nothing):
#   bash tests/fakes/test_fakes.sh build/fakes/bin
# Run as root to include the non-root part (user unimps1 is created if
# missing); as any other user that part is skipped. Prints `N passed, M failed`
# and exits non-zero on any failure.
set -uo pipefail

if [[ $# -ne 1 || ! -x "$1/nvidia-smi" ]]; then
  echo "usage: $0 BIN_DIR   (holding nvidia-smi, nvidia-cuda-mps-control, fake-cuda-client)" >&2
  exit 2
fi
BIN=$(cd "$1" && pwd)
SMI=$BIN/nvidia-smi
MPS=$BIN/nvidia-cuda-mps-control
CLIENT=$BIN/fake-cuda-client

umask 022
WORK=$(mktemp -d /tmp/fakes-test.XXXXXX)
chmod 755 "$WORK"
CONF=$WORK/fake.conf
CALLS=$WORK/calls.log
export UNILAB_FAKE_CONF=$CONF
unset UNILAB_FAKE_GPU_TABLE CUDA_VISIBLE_DEVICES CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY

PASS=0
FAIL=0
DAEMON_PIDS=()  # every daemon a test started: killed at exit whatever happens
BG_PIDS=()

cleanup() {
  local p
  for p in "${BG_PIDS[@]}" "${DAEMON_PIDS[@]}"; do
    [[ -n "$p" ]] && kill -KILL "$p" 2>/dev/null
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

ok() { PASS=$((PASS + 1)); echo "ok   - $1"; }
FAILED_NAMES=()
nok() { FAIL=$((FAIL + 1)); FAILED_NAMES+=("$1"); echo "FAIL - $1"; }
# check DESC CMD...: passes when CMD succeeds
check() { local d=$1; shift; if "$@"; then ok "$d"; else nok "$d"; fi; }
expect_eq() {  # DESC EXPECTED ACTUAL
  if [[ "$2" == "$3" ]]; then ok "$1"; else nok "$1"; printf '    expected: %q\n    actual:   %q\n' "$2" "$3"; fi
}
expect_has() {  # DESC NEEDLE HAYSTACK
  if [[ "$3" == *"$2"* ]]; then ok "$1"; else nok "$1"; printf '    missing:  %q\n    in:       %q\n' "$2" "$3"; fi
}
expect_lacks() {  # DESC NEEDLE HAYSTACK
  if [[ "$3" != *"$2"* ]]; then ok "$1"; else nok "$1"; printf '    unexpected: %q\n' "$2"; fi
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }
# A pid is alive when it exists and is not a zombie.
alive() { [[ -n "$1" && -e /proc/$1 ]] && [[ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]]; }
dead() { ! alive "$1"; }
# wait_for CMD...: poll up to 5 s
wait_for() {
  local i
  for ((i = 0; i < 100; i++)); do "$@" && return 0; sleep 0.05; done
  return 1
}
conf() { printf '%s\n' "call_log=$CALLS" "$@" >"$CONF"; }
# Fresh pipe/log dirs for one scenario.
use_dirs() {
  export CUDA_MPS_PIPE_DIRECTORY=$WORK/$1/pipe CUDA_MPS_LOG_DIRECTORY=$WORK/$1/log
  PIPE=$CUDA_MPS_PIPE_DIRECTORY
  LOGD=$CUDA_MPS_LOG_DIRECTORY
}
# ctl CMD...: one front-end run, one command per argument; sets OUT and RC.
ctl() { OUT=$(printf '%s\n' "$@" | "$MPS" 2>&1); RC=$?; }
# start_daemon: `-d` with output captured (a daemon that kept our pipe open
# would hang this, hence the timeout); records the daemon pid.
start_daemon() {
  OUT=$(timeout 10 "$MPS" -d 2>&1); RC=$?
  DPID=$(cat "$PIPE/nvidia-cuda-mps-control.pid" 2>/dev/null || true)
  [[ -n "$DPID" ]] && DAEMON_PIDS+=("$DPID")
}
socket_up() { [[ -S "$PIPE/control" ]]; }

cat >"$WORK/gpus.csv" <<'EOF'
# test table: index, uuid, minor_number, pci.bus_id, name
1, GPU-22222222-2222-2222-2222-222222222222, 3, 00000000:2A:00.0, NVIDIA H200
0, GPU-11111111-1111-1111-1111-111111111111, 5, 00000000:18:00.0, NVIDIA H200
2, GPU-33333333-3333-3333-3333-333333333333, 1, 00000000:85:00.0, NVIDIA A100-SXM4-80GB

MIG, 2, MIG-44444444-4444-4444-4444-444444444444, 1g.10gb, 0
MIG, 2, MIG-55555555-5555-5555-5555-555555555555, 3g.40gb, 1
EOF
G0=GPU-11111111-1111-1111-1111-111111111111
G1=GPU-22222222-2222-2222-2222-222222222222
G2=GPU-33333333-3333-3333-3333-333333333333
export UNILAB_FAKE_GPU_TABLE=$WORK/gpus.csv
conf

echo "# nvidia-smi"
out=$("$SMI" --query-gpu=index,uuid,pci.bus_id,name --format=csv); rc=$?
expect_eq "query: exit 0" 0 "$rc"
expect_eq "query: header and rows in index order" "index, uuid, pci.bus_id, name
0, $G0, 00000000:18:00.0, NVIDIA H200
1, $G1, 00000000:2A:00.0, NVIDIA H200
2, $G2, 00000000:85:00.0, NVIDIA A100-SXM4-80GB" "$out"
# Driver 580's nvidia-smi has no minor_number (seen: 580.159.04 on an H200).
out=$("$SMI" --query-gpu=index,minor_number --format=csv,noheader); rc=$?
expect_eq "query: minor_number is refused as driver 580 refuses it" "2 Field \"minor_number\" is not a valid field to query." "$rc $out"
out=$("$SMI" --query-gpu=uuid,index --format=csv,noheader,nounits)
expect_eq "query: noheader, requested field order" "$G0, 0
$G1, 1
$G2, 2" "$out"
out=$("$SMI" --query-gpu gpu_uuid,gpu_name,gpu_bus_id --format csv)
expect_eq "query: aliases, header as requested, space-separated options" "gpu_uuid, gpu_name, gpu_bus_id
$G0, NVIDIA H200, 00000000:18:00.0
$G1, NVIDIA H200, 00000000:2A:00.0
$G2, NVIDIA A100-SXM4-80GB, 00000000:85:00.0" "$out"
out=$("$SMI" --query-gpu=index,bogus --format=csv); rc=$?
expect_eq "query: unknown field exits 2" 2 "$rc"
expect_has "query: unknown field message" 'Field "bogus" is not a valid field to query.' "$out"
out=$("$SMI" --query-gpu=index --format=json); rc=$?
expect_eq "query: bad --format exits 2" 2 "$rc"
out=$("$SMI" --query-gpu=index); rc=$?
expect_eq "query: missing --format exits 2" 2 "$rc"
out=$("$SMI" --bogus-option); rc=$?
expect_eq "unknown option exits 2" 2 "$rc"
check "unknown option prints a message" test -n "$out"
out=$("$SMI" -i 2,$G0 --query-gpu=index,pci.bus_id --format=csv,noheader)
expect_eq "-i by index and uuid, index order" "0, 00000000:18:00.0
2, 00000000:85:00.0" "$out"
out=$("$SMI" --id=00000000:2A:00.0 --query-gpu=index --format=csv,noheader)
expect_eq "--id by PCI bus id" "1" "$out"
out=$("$SMI" -i 7 --query-gpu=index --format=csv); rc=$?
expect_eq "-i unknown id exits 6" 6 "$rc"
expect_eq "-i unknown id message" "No devices were found" "$out"
out=$("$SMI" -L); rc=$?
expect_eq "-L exit 0" 0 "$rc"
expect_eq "-L lines with MIG under parent" "GPU 0: NVIDIA H200 (UUID: $G0)
GPU 1: NVIDIA H200 (UUID: $G1)
GPU 2: NVIDIA A100-SXM4-80GB (UUID: $G2)
  MIG 1g.10gb     Device  0: (UUID: MIG-44444444-4444-4444-4444-444444444444)
  MIG 3g.40gb     Device  1: (UUID: MIG-55555555-5555-5555-5555-555555555555)" "$out"
out=$("$SMI" -L -i 0)
expect_eq "-L with -i" "GPU 0: NVIDIA H200 (UUID: $G0)" "$out"
out=$("$SMI"); rc=$?
expect_eq "no arguments: exit 0" 0 "$rc"
expect_has "no arguments: table lists GPUs" "$G2" "$out"
# Its "MIG devices:" block: GPU, GI, CI, MIG device (default GI = device + 1, CI 0).
expect_eq "no arguments: MIG block rows" "|  2    1   0   0  |
|  2    2   0   1  |" "$(grep -E '^\| +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +\|' <<<"$out" | cut -c1-20)"
# fake-driver-proc: the driver's /proc/driver view of the same table.
if [[ -x "$BIN/fake-driver-proc" ]]; then
  "$BIN/fake-driver-proc" "$WORK/proc"; rc=$?
  expect_eq "fake-driver-proc: exit 0" 0 "$rc"
  info=$(cat "$WORK/proc/nvidia/gpus/0000:2a:00.0/information" 2>&1)
  expect_has "fake-driver-proc: GPU 1's information has its UUID" "GPU UUID: 	 $G1" "$info"
  expect_has "fake-driver-proc: ... and its minor" "Device Minor: 	 3" "$info"
  expect_has "fake-driver-proc: ... under its kernel bus name" "Bus Location: 	 0000:2a:00.0" "$info"
  minors=$(cat "$WORK/proc/nvidia-caps/mig-minors" 2>&1)
  expect_eq "fake-driver-proc: mig-minors begins as the driver's" "config 1
monitor 2
gpu0/gi0/access 3
gpu0/gi0/ci0/access 4" "$(head -n4 <<<"$minors")"
  expect_eq "fake-driver-proc: ... ends at gpu31/gi14/ci7 4322 as the driver's" "gpu31/gi14/ci7/access 4322" "$(tail -n1 <<<"$minors")"
  expect_has "fake-driver-proc: gpu1/gi1 (GPU 2's minor 1, its MIG device 0)" "gpu1/gi1/access 147" "$minors"
else
  nok "fake-driver-proc is built next to the other fakes"
fi
out=$(CUDA_VISIBLE_DEVICES=1 "$SMI" --query-gpu=index --format=csv,noheader)
expect_eq "ignores CUDA_VISIBLE_DEVICES" "0
1
2" "$out"

err=$(UNILAB_FAKE_GPU_TABLE=$WORK/nonexistent.csv "$SMI" -L 2>&1 >/dev/null); rc=$?
expect_eq "missing table exits 9" 9 "$rc"
expect_has "missing table: reason on stderr" "nonexistent.csv" "$err"
printf '# nothing here\n\n' >"$WORK/empty.csv"
out=$(UNILAB_FAKE_GPU_TABLE=$WORK/empty.csv "$SMI" -L); rc=$?
expect_eq "empty table exits 6" 6 "$rc"
expect_eq "empty table message" "No devices were found" "$out"
printf '0, GPU-x, 0\n' >"$WORK/bad.csv"
UNILAB_FAKE_GPU_TABLE=$WORK/bad.csv "$SMI" -L >/dev/null 2>&1; rc=$?
expect_eq "malformed table exits 9" 9 "$rc"

conf no_driver=1
out=$("$SMI" --query-gpu=index --format=csv); rc=$?
expect_eq "no_driver exits 9" 9 "$rc"
expect_eq "no_driver message" "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running." "$out"
conf garbage=1
out=$("$SMI" --query-gpu=index,uuid --format=csv,noheader); rc=$?
expect_eq "garbage exits 0" 0 "$rc"
check "garbage output is non-empty" test -n "$out"
expect_lacks "garbage output has no CSV separators" ", " "$out"
conf smi_latency_ms=400
t0=$(now_ms); "$SMI" -L >/dev/null; t1=$(now_ms)
check "smi_latency_ms delays the answer (took $((t1 - t0)) ms)" test $((t1 - t0)) -ge 400
Q6=index,uuid,pci.bus_id,compute_mode,mig.mode.current,name
out=$("$SMI" --query-gpu=$Q6 --format=csv,noheader); rc=$?
expect_eq "modes: Default and MIG Disabled unless a knob says otherwise" "0 0, $G0, 00000000:18:00.0, Default, Disabled, NVIDIA H200" \
  "$rc $(head -n1 <<<"$out")"
conf smi_compute_mode=Exclusive_Process smi_compute_mode.1=Prohibited smi_mig_mode.2=Enabled
out=$("$SMI" --query-gpu=index,compute_mode,mig.mode.current --format=csv,noheader)
expect_eq "smi_compute_mode[.N], smi_mig_mode.N: per GPU" "0, Exclusive_Process, Disabled
1, Prohibited, Disabled
2, Exclusive_Process, Enabled" "$out"
conf smi_na=pci.bus_id,mig.mode.current smi_not_supported=compute_mode
out=$("$SMI" --query-gpu=$Q6 --format=csv,noheader -i 0)
expect_eq "smi_na / smi_not_supported: fields printed as the real tool does" \
  "0, $G0, [N/A], [Not Supported], [N/A], NVIDIA H200" "$out"
conf smi_upper_uuid=1
printf '0, GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16, 0, 00000000:17:00.0, Hex GPU\n' >"$WORK/hex.csv"
out=$(UNILAB_FAKE_GPU_TABLE=$WORK/hex.csv "$SMI" --query-gpu=uuid,pci.bus_id --format=csv,noheader)
expect_eq "smi_upper_uuid: hex in upper case, prefix kept" "GPU-7FDAF0A5-179B-F636-D15D-DAF243E3FF16, 00000000:17:00.0" "$out"
conf smi_inforom_warning=1
out=$("$SMI" --query-gpu=index,pci.bus_id --format=csv,noheader); rc=$?
expect_eq "smi_inforom_warning: exit 14, rows intact, warning line after them" "14 0, 00000000:18:00.0
1, 00000000:2A:00.0
2, 00000000:85:00.0
WARNING: infoROM is corrupted at gpu 00000000:18:00.0" "$rc $out"
conf
printf '%s\n' "gpu_table=$WORK/empty.csv" "call_log=$CALLS" >"$CONF"
rc=$(unset UNILAB_FAKE_GPU_TABLE; "$SMI" -L >/dev/null 2>&1; echo $?)
expect_eq "gpu_table knob is used without the env override (empty table: 6)" 6 "$rc"
out=$(UNILAB_FAKE_GPU_TABLE=$WORK/gpus.csv "$SMI" -L -i 1)
expect_eq "env UNILAB_FAKE_GPU_TABLE beats the knob" "GPU 1: NVIDIA H200 (UUID: $G1)" "$out"
conf

# Defaults next to the binary, and an environment with nothing at all in it.
COPY=$WORK/copy
mkdir -p "$COPY"
cp "$SMI" "$MPS" "$CLIENT" "$COPY/"
printf '0, GPU-99999999-9999-9999-9999-999999999999, 0, 00000000:01:00.0, Copy GPU\n' >"$COPY/gpus.csv"
printf 'call_log=%s\n' "$WORK/copy-calls.log" >"$COPY/fake.conf"
out=$(env -i "$COPY/nvidia-smi" -L); rc=$?
expect_eq "empty env: exe-dir gpus.csv and fake.conf" "0 GPU 0: Copy GPU (UUID: GPU-99999999-9999-9999-9999-999999999999)" "$rc $out"
expect_has "empty env: call logged via exe-dir fake.conf" "nvidia-smi uid=$(id -u) pid=" "$(cat "$WORK/copy-calls.log" 2>/dev/null)"

echo "# call log"
rm -f "$CALLS"
"$SMI" -L >/dev/null
"$SMI" --query-gpu=index --format=csv,noheader >/dev/null
expect_eq "call_log: one line per invocation" 2 "$(grep -c '^nvidia-smi uid=' "$CALLS")"
expect_has "call_log: argv recorded" "nvidia-smi uid=$(id -u) pid=" "$(tail -n1 "$CALLS")"
expect_has "call_log: argv recorded (args)" "$SMI --query-gpu=index --format=csv,noheader" "$(tail -n1 "$CALLS")"
expect_eq "call_log: created mode 0666" 666 "$(stat -c %a "$CALLS")"

echo "# nvidia-cuda-mps-control -d"
use_dirs basic
t0=$(now_ms)
start_daemon
t1=$(now_ms)
expect_eq "-d exits 0 with no output" "0 " "$RC $OUT"
check "-d returns promptly without holding our pipes ($((t1 - t0)) ms)" test $((t1 - t0)) -lt 3000
check "-d: pid file present when -d returns" test -s "$PIPE/nvidia-cuda-mps-control.pid"
check "-d: pid file holds a live pid" alive "$DPID"
expect_eq "-d: pid file is pid + newline" "$DPID" "$(head -c 64 "$PIPE/nvidia-cuda-mps-control.pid")"
check "-d: socket appears" wait_for socket_up
check "-d: control_lock exists" test -f "$PIPE/control_lock"
check "-d: control_privileged is a socket" test -S "$PIPE/control_privileged"
check "-d: log is a FIFO" test -p "$PIPE/log"
expect_eq "-d: pipe dir created 0755" 755 "$(stat -c %a "$PIPE")"
expect_eq "-d: log dir created 0755" 755 "$(stat -c %a "$LOGD")"
check "-d: server.log exists, empty" test -f "$LOGD/server.log" -a ! -s "$LOGD/server.log"
log=$(cat "$LOGD/control.log")
expect_has "control.log: start line" "Control $DPID] Starting control daemon using socket $PIPE/control" "$log"
expect_has "control.log: CUDA_VISIBLE_DEVICES unset" "CUDA_VISIBLE_DEVICES=(unset)" "$log"
expect_has "control.log: uid/gid" "uid=$(id -u) gid=$(id -g)" "$log"
check "control.log: timestamp format" grep -Eq '^\[[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3} Control [0-9]+\] ' "$LOGD/control.log"
expect_eq "daemon: stdin/stdout/stderr are /dev/null" "/dev/null /dev/null /dev/null" \
  "$(readlink "/proc/$DPID/fd/0") $(readlink "/proc/$DPID/fd/1") $(readlink "/proc/$DPID/fd/2")"
expect_eq "daemon: cwd is /" "/" "$(readlink "/proc/$DPID/cwd")"
nfds=$(find "/proc/$DPID/fd" -mindepth 1 -maxdepth 1 | wc -l)
check "daemon: no leaked fds ($nfds open: stdio, lock, log, signalfd, two sockets)" test "$nfds" -le 8
sid=$(awk '{print $6}' "/proc/$DPID/stat")
check "daemon: in its own session, not its leader (double fork)" test "$sid" != "$$" -a "$sid" != "$DPID"
expect_has "call_log: front end line" "nvidia-cuda-mps-control uid=$(id -u) pid=" "$(cat "$CALLS")"
expect_has "call_log: daemon line with the daemon pid" "mps-daemon uid=$(id -u) pid=$DPID $MPS -d" "$(cat "$CALLS")"
OUT=$(timeout 10 "$MPS" -d 2>/dev/null); RC=$?
expect_eq "second -d on same pipe dir: exit 1 + message" "1 An instance of this daemon is already running" "$RC $OUT"

echo "# commands"
ctl get_server_list
expect_eq "get_server_list: empty when no server" "0 " "$RC $OUT"
ctl get_default_active_thread_percentage
expect_eq "get_default_active_thread_percentage default" "100.0" "$OUT"
ctl "set_default_active_thread_percentage 50" get_default_active_thread_percentage
expect_eq "set/get active thread percentage" "50.0
50.0" "$OUT"
ctl "set_default_active_thread_percentage 0" "set_default_active_thread_percentage 101" "set_default_active_thread_percentage abc" "set_default_active_thread_percentage"
expect_eq "active thread percentage validation" "Invalid input
Invalid input
Invalid input
Invalid input" "$OUT"
ctl "set_default_active_thread_percentage 12.34"
expect_eq "percentage formatted %.1f" "12.3" "$OUT"
ctl "set_default_device_pinned_mem_limit 0 2G" "get_default_device_pinned_mem_limit 0" "get_default_device_pinned_mem_limit 1" "set_default_device_pinned_mem_limit 1 lots"
expect_eq "pinned mem limit: set empty reply, get stored / 0, bad value" "2G
0
Invalid input" "$OUT"
ctl frobnicate
expect_eq "unknown command" "0 Unknown command" "$RC $OUT"
ctl "start_server -uid 4242"
SPID=$OUT
check "start_server prints a live pid" alive "$SPID"
expect_eq "server is a child of the daemon" "$DPID" "$(awk '{print $4}' "/proc/$SPID/stat")"
ctl "start_server -uid 4242" get_server_list "get_client_list $SPID"
expect_eq "start_server again reuses it; listed; no clients" "$SPID
$SPID" "$OUT"
expect_has "control.log: server start, as driver 580 words it" "Starting new server $SPID for user 4242" "$(cat "$LOGD/control.log")"
expect_has "control.log: server ready" "NEW SERVER $SPID: Ready" "$(cat "$LOGD/control.log")"
expect_has "server.log: server has started, in its own prefix" "Server $SPID] Server has started" "$(cat "$LOGD/server.log")"
ctl "get_server_status $SPID" "get_server_status" "get_server_status 999999999"
expect_eq "get_server_status: ACTIVE; pid required; unknown pid" "ACTIVE
A server PID is required
Server 999999999 not found" "$OUT"
expect_has "control.log: command with peer uid" "Cmd: start_server -uid 4242 (uid=$(id -u))" "$(cat "$LOGD/control.log")"
ctl "start_server -uid x"
expect_eq "start_server bad uid" "Invalid input" "$OUT"
ctl "shutdown_server 999999999"
expect_eq "shutdown_server unknown pid" "No server with PID 999999999" "$OUT"
ctl "shutdown_server $SPID" get_server_list
expect_eq "shutdown_server: empty reply, gone from list" "0 " "$RC $OUT"
check "shutdown_server: process gone and reaped (no zombie)" test ! -e "/proc/$SPID"
ctl "start_server -uid 1"
SPID=$OUT
ctl "shutdown_server $SPID -f"
check "shutdown_server -f kills it" test ! -e "/proc/$SPID"
ctl "start_server -uid 2"
SPID=$OUT
kill -KILL "$SPID"
check "a server killed from outside is reaped and dropped" wait_for test ! -e "/proc/$SPID"
check "control.log: a SIGKILLed server 'exited with status 0' (as driver 580 says)" \
  wait_for grep -q "Server $SPID exited with status 0" "$LOGD/control.log"
ctl get_server_list
expect_eq "dead server not listed" "" "$OUT"
check "no zombie children" test -z "$(ps --ppid "$DPID" -o stat= | grep Z)"

echo "# fake-cuda-client"
"$CLIENT" --hold 2 >"$WORK/c1.out" 2>&1 &
CPID=$!; BG_PIDS+=("$CPID")
wait_for grep -q connected "$WORK/c1.out"
SPID=$(sed -n 's/^client [0-9]* connected to MPS server \([0-9]*\)$/\1/p' "$WORK/c1.out")
expect_eq "client: first line shows CUDA_VISIBLE_DEVICES" "CUDA_VISIBLE_DEVICES=(unset)" "$(head -n1 "$WORK/c1.out")"
expect_has "client: connected line" "client $CPID connected to MPS server $SPID" "$(cat "$WORK/c1.out")"
expect_has "client: sees all GPUs of an unrestricted daemon" "devices=$G0,$G1,$G2" "$(cat "$WORK/c1.out")"
expect_has "client: names the pipe directory it used" "pipe=$PIPE" "$(cat "$WORK/c1.out")"
ctl get_server_list "get_client_list $SPID"
expect_eq "while connected: server listed, client listed" "$SPID
$CPID" "$OUT"
expect_eq "server started for the daemon's uid" "Starting new server $SPID for user $(id -u)" \
  "$(grep -o "Starting new server $SPID for user [0-9]*" "$LOGD/control.log")"
expect_has "control.log: the client's connection" "NEW CLIENT $CPID from user $(id -u): Server already exists" "$(cat "$LOGD/control.log")"
wait "$CPID"; rc=$?
expect_eq "client exits 0 after hold" 0 "$rc"
ctl "get_client_list $SPID" get_server_list
expect_eq "after client exit: deregistered, server stays" "$SPID" "$OUT"
expect_has "call_log: client line" "fake-cuda-client uid=$(id -u) pid=$CPID $CLIENT --hold 2" "$(cat "$CALLS")"
"$CLIENT" --hold 10 >"$WORK/c2.out" 2>&1 &
CPID=$!; BG_PIDS+=("$CPID")
wait_for grep -q connected "$WORK/c2.out"
ctl "shutdown_server $SPID -f"
wait "$CPID"; rc=$?
expect_eq "client whose server is shut down exits 1" 1 "$rc"
expect_has "client: lost connection message" "CUDA error: the MPS server connection was lost" "$(cat "$WORK/c2.out")"
err=$(CUDA_MPS_PIPE_DIRECTORY=$WORK/nowhere "$CLIENT" --hold 0 2>&1 >/dev/null); rc=$?
expect_eq "client without daemon: exit 1" 1 "$rc"
expect_eq "client without daemon: message (with the reason)" "CUDA error: MPS client failed to connect to the MPS control daemon or the MPS server ($WORK/nowhere/control: No such file or directory)" "$err"

echo "# quit"
ctl "start_server -uid 7"
SPID=$OUT
ctl "quit -t x"
expect_eq "quit -t bad value" "Invalid input" "$OUT"
ctl quit
expect_eq "quit: exit 0, empty reply" "0 " "$RC $OUT"
check "quit: daemon exits" wait_for dead "$DPID"
check "quit: pid file removed" test ! -e "$PIPE/nvidia-cuda-mps-control.pid"
check "quit: control socket removed" test ! -e "$PIPE/control"
check "quit: servers stopped" test ! -e "/proc/$SPID"
check "quit: control_lock left in place" test -f "$PIPE/control_lock"
expect_eq "control.log: ends with Exit" "Exit" "$(tail -n1 "$LOGD/control.log" | sed 's/^\[[^]]*\] //')"
ctl get_server_list
expect_eq "no daemon: front end exit 1 + message" "1 Cannot find MPS control daemon process" "$RC $OUT"
start_daemon
expect_eq "-d again after quit" 0 "$RC"
wait_for socket_up
"$CLIENT" --hold 1.5 >"$WORK/c3.out" 2>&1 &
CPID=$!; BG_PIDS+=("$CPID")
wait_for grep -q connected "$WORK/c3.out"
ctl quit
expect_eq "quit with a client: replies at once" "0 " "$RC $OUT"
sleep 0.5
check "quit waits for connected clients" alive "$DPID"
wait "$CPID"; rc=$?
expect_eq "waited-for client exits 0" 0 "$rc"
check "quit: daemon exits after the last client" wait_for dead "$DPID"
start_daemon
wait_for socket_up
"$CLIENT" --hold 30 >"$WORK/c4.out" 2>&1 &
CPID=$!; BG_PIDS+=("$CPID")
wait_for grep -q connected "$WORK/c4.out"
t0=$(now_ms)
ctl "quit -t 1"
check "quit -t 1: daemon exits after the timeout" wait_for dead "$DPID"
t1=$(now_ms)
check "quit -t 1: took about 1 s ($((t1 - t0)) ms)" test $((t1 - t0)) -ge 900 -a $((t1 - t0)) -lt 4000
wait "$CPID"; rc=$?
expect_eq "quit -t: remaining client fails" 1 "$rc"
check "quit -t: socket and pid file removed" test ! -e "$PIPE/control" -a ! -e "$PIPE/nvidia-cuda-mps-control.pid"

echo "# SIGTERM"
start_daemon
wait_for socket_up
ctl "start_server -uid 0"
SPID=$OUT
kill -TERM "$DPID"
check "SIGTERM: daemon exits" wait_for dead "$DPID"
check "SIGTERM: pid file and socket removed" test ! -e "$PIPE/control" -a ! -e "$PIPE/nvidia-cuda-mps-control.pid"
check "SIGTERM: servers stopped" test ! -e "/proc/$SPID"
expect_has "SIGTERM: Exit logged" "Exit" "$(tail -n1 "$LOGD/control.log")"

echo "# visibility (daemon CUDA_VISIBLE_DEVICES remaps devices)"
use_dirs vis
OUT=$(CUDA_VISIBLE_DEVICES=$G1 timeout 10 "$MPS" -d 2>&1); RC=$?
DPID=$(cat "$PIPE/nvidia-cuda-mps-control.pid"); DAEMON_PIDS+=("$DPID")
expect_eq "-d with CUDA_VISIBLE_DEVICES" 0 "$RC"
expect_has "control.log: daemon CUDA_VISIBLE_DEVICES" "CUDA_VISIBLE_DEVICES=$G1" "$(cat "$LOGD/control.log")"
wait_for socket_up
out=$(CUDA_VISIBLE_DEVICES=0 "$CLIENT" --hold 0 2>&1); rc=$?
expect_eq "client with index 0 of a one-GPU daemon works" "0" "$rc"
expect_has "client: index 0 is the daemon's GPU" "devices=$G1" "$out"
expect_has "client: first line echoes its mask" "CUDA_VISIBLE_DEVICES=0" "$(head -n1 <<<"$out")"
out=$(CUDA_VISIBLE_DEVICES=1 "$CLIENT" --hold 0 2>&1); rc=$?
expect_eq "client with global index 1 under a per-GPU daemon fails" 1 "$rc"
expect_has "... with No CUDA GPUs are available" "CUDA error: No CUDA GPUs are available" "$out"
out=$(CUDA_VISIBLE_DEVICES=22222222-2222-2222-2222-222222222222 "$CLIENT" --hold 0 2>&1); rc=$?
expect_eq "client with the daemon's UUID (no prefix, any case) works" 0 "$rc"
out=$(CUDA_VISIBLE_DEVICES=$G0 "$CLIENT" --hold 0 2>&1); rc=$?
expect_eq "client with a UUID outside the daemon fails" 1 "$rc"
ctl quit
wait_for dead "$DPID"

echo "# knobs"
use_dirs failstart
conf mps_fail_start=1
OUT=$(timeout 10 "$MPS" -d 2>&1 >/dev/null); RC=$?
expect_eq "mps_fail_start: exit 1" 1 "$RC"
check "mps_fail_start: error on stderr" test -n "$OUT"
check "mps_fail_start: nothing started" test ! -e "$PIPE/nvidia-cuda-mps-control.pid"

use_dirs delay
conf mps_start_delay_ms=1500
t0=$(now_ms)
start_daemon
t1=$(now_ms)
expect_eq "mps_start_delay_ms: -d exits 0" 0 "$RC"
check "mps_start_delay_ms: -d returns at once ($((t1 - t0)) ms)" test $((t1 - t0)) -lt 1000
check "mps_start_delay_ms: pid file already there" alive "$DPID"
check "mps_start_delay_ms: no socket yet" test ! -e "$PIPE/control"
ctl get_server_list
expect_eq "mps_start_delay_ms: not reachable yet" "1 Cannot find MPS control daemon process" "$RC $OUT"
check "mps_start_delay_ms: socket appears later" wait_for socket_up
ctl get_server_list
expect_eq "mps_start_delay_ms: then reachable" "0 " "$RC $OUT"
kill -TERM "$DPID"; wait_for dead "$DPID"

use_dirs ignorequit
conf mps_ignore_quit=1
start_daemon; wait_for socket_up
ctl quit
expect_eq "mps_ignore_quit: quit acknowledged" "0 " "$RC $OUT"
sleep 0.5
check "mps_ignore_quit: still running" alive "$DPID"
check "mps_ignore_quit: socket still there" socket_up
kill -TERM "$DPID"
check "mps_ignore_quit: SIGTERM still works" wait_for dead "$DPID"

use_dirs ignoreterm
conf mps_ignore_term=1
start_daemon; wait_for socket_up
ctl "start_server -uid 0"
SPID=$OUT
kill -TERM "$DPID"
sleep 0.5
check "mps_ignore_term: survives SIGTERM" alive "$DPID"
kill -KILL "$DPID"
check "mps_ignore_term: SIGKILL ends it" wait_for dead "$DPID"
check "killed daemon: its server dies too" wait_for dead "$SPID"
check "killed daemon: stale socket and pid file left" test -S "$PIPE/control" -a -e "$PIPE/nvidia-cuda-mps-control.pid"
ctl get_server_list
expect_eq "stale socket: front end cannot find daemon" "1 Cannot find MPS control daemon process" "$RC $OUT"
conf
OLD=$DPID
start_daemon
expect_eq "-d over a stale socket and pid file: lock was released" 0 "$RC"
check "-d over stale state: pid file rewritten" test "$DPID" != "$OLD"
wait_for socket_up
ctl get_server_list
expect_eq "-d over stale state: reachable" "0 " "$RC $OUT"
kill -TERM "$DPID"; wait_for dead "$DPID"

use_dirs die
conf mps_die_after_ms=2500  # slack for a loaded machine: "alive at first" is checked after a start and a round trip
start_daemon; wait_for socket_up
ctl "start_server -uid 0"
SPID=$OUT
check "mps_die_after_ms: alive at first" alive "$DPID"
check "mps_die_after_ms: dies by itself" wait_for dead "$DPID"
check "mps_die_after_ms: socket and pid file left behind" test -S "$PIPE/control" -a -e "$PIPE/nvidia-cuda-mps-control.pid"
check "mps_die_after_ms: its server dies too" wait_for dead "$SPID"
expect_lacks "mps_die_after_ms: no Exit logged" "] Exit" "$(cat "$LOGD/control.log")"
ctl get_server_list
expect_eq "mps_die_after_ms: front end cannot find daemon" "1 Cannot find MPS control daemon process" "$RC $OUT"

use_dirs fault
conf mps_server_fault_after_ms=1500
start_daemon; wait_for socket_up
"$CLIENT" --hold 30 >"$WORK/f1.out" 2>&1 &
CPID=$!; BG_PIDS+=("$CPID")
wait_for grep -q connected "$WORK/f1.out"
SPID=$(sed -n 's/^client [0-9]* connected to MPS server \([0-9]*\)$/\1/p' "$WORK/f1.out")
check "mps_server_fault (legacy): the server shuts down" wait_for dead "$SPID"
check "... its client loses it" wait_for dead "$CPID"
expect_has "... control.log: fatal exception" "] Server encountered a fatal exception. Shutting down" "$(cat "$LOGD/control.log")"
expect_has "... control.log: exit status 1" "] Server $SPID exited with status 1" "$(cat "$LOGD/control.log")"
check "... the daemon lives on" alive "$DPID"
ctl quit; wait_for dead "$DPID"

use_dirs voltafault
conf mps_server_fault_after_ms=1500 mps_server_fault=volta mps_server_fault_sticky=1
start_daemon; wait_for socket_up
"$CLIENT" --hold 30 >"$WORK/f2.out" 2>&1 &
CPID=$!; BG_PIDS+=("$CPID")
wait_for grep -q connected "$WORK/f2.out"
SPID=$(sed -n 's/^client [0-9]* connected to MPS server \([0-9]*\)$/\1/p' "$WORK/f2.out")
check "mps_server_fault=volta: server.log says it handles a fatal GPU error" \
  wait_for grep -q "Server $SPID\] Server is handling a fatal GPU error." "$LOGD/server.log"
expect_has "... after naming the client that hit it" "Server $SPID] Client {PID: $CPID, Context: 1} encountered a fatal GPU error." \
  "$(cat "$LOGD/server.log")"
check "... its client loses it" wait_for dead "$CPID"
check "... the server stays" alive "$SPID"
ctl "get_server_status $SPID"
expect_eq "... get_server_status: FAULT" "FAULT" "$OUT"
out=$("$CLIENT" --hold 0 2>&1); rc=$?
expect_eq "... a new client is refused" 1 "$rc"
expect_has "... with the server-not-ready error" "not ready" "$out"
ctl quit; wait_for dead "$DPID"

use_dirs serverdie
conf mps_server_die_after_ms=1000
start_daemon; wait_for socket_up
ctl "start_server -uid 0"
SPID=$OUT
check "mps_server_die_after_ms: the server is killed" wait_for dead "$SPID"
check "... control.log: exited with status 0" wait_for grep -q "] Server $SPID exited with status 0" "$LOGD/control.log"
expect_lacks "... no fatal exception logged" "fatal exception" "$(cat "$LOGD/control.log")"
check "... the daemon lives on" alive "$DPID"
ctl quit; wait_for dead "$DPID"

use_dirs latency
conf mps_latency_ms=400
start_daemon; wait_for socket_up
t0=$(now_ms); ctl get_server_list; t1=$(now_ms)
check "mps_latency_ms delays each reply ($((t1 - t0)) ms)" test $((t1 - t0)) -ge 400
conf
ctl quit; wait_for dead "$DPID"

echo "# -f, odd paths, empty environment"
use_dirs fg
"$MPS" -f 2>"$WORK/fg.err" &
FPID=$!; BG_PIDS+=("$FPID")
check "-f: socket appears" wait_for socket_up
expect_eq "-f: stays in the foreground (pid file = our child)" "$FPID" "$(cat "$PIPE/nvidia-cuda-mps-control.pid")"
expect_has "-f: messages on stderr" "Starting control daemon" "$(cat "$WORK/fg.err")"
ctl quit
wait "$FPID"; rc=$?
expect_eq "-f: exits 0 on quit" 0 "$rc"

use_dirs race
before=$(wc -l <"$CALLS")
racers=()
for i in 1 2 3 4 5; do
  (timeout 10 "$MPS" -d >/dev/null 2>&1; echo $? >"$WORK/race.$i") &
  racers+=($!)
done
wait "${racers[@]}"
DPID=$(cat "$PIPE/nvidia-cuda-mps-control.pid" 2>/dev/null); DAEMON_PIDS+=("$DPID")
expect_eq "five racing -d: exactly one starts" "1" "$(cat "$WORK"/race.* | grep -c '^0$')"
expect_eq "five racing -d: one daemon process started" "1" "$(tail -n +$((before + 1)) "$CALLS" | grep -c '^mps-daemon ')"
kill -TERM "$DPID"; wait_for dead "$DPID"

LONG=$WORK/$(printf 'l%.0s' {1..100})
export CUDA_MPS_PIPE_DIRECTORY=$LONG CUDA_MPS_LOG_DIRECTORY=$WORK/long-log
PIPE=$LONG
start_daemon
expect_eq "socket path over 107 bytes: -d still exits 0" 0 "$RC"
DPID=$(sed -n 's/^mps-daemon uid=[0-9]* pid=\([0-9]*\) .*/\1/p' "$CALLS" | tail -n1)
check "socket path over 107 bytes: daemon gives up" wait_for dead "$DPID"
ctl get_server_list
expect_eq "socket path over 107 bytes: cannot be found" "1 Cannot find MPS control daemon process" "$RC $OUT"
expect_has "socket path over 107 bytes: reason in control.log" "Failed to bind control socket" "$(cat "$WORK/long-log/control.log")"

# control fits in sun_path, control_privileged (11 bytes longer) does not.
MID=$WORK/$(printf 'm%.0s' $(seq 1 $((107 - ${#WORK} - 1 - 8 - 1))))
export CUDA_MPS_PIPE_DIRECTORY=$MID CUDA_MPS_LOG_DIRECTORY=$WORK/mid-log
PIPE=$MID
check "mid-length pipe dir: <dir>/control fits, <dir>/control_privileged does not" \
  test $((${#MID} + 8)) -le 107 -a $((${#MID} + 19)) -gt 107
start_daemon
DPID=$(sed -n 's/^mps-daemon uid=[0-9]* pid=\([0-9]*\) .*/\1/p' "$CALLS" | tail -n1)
check "control_privileged too long: daemon gives up" wait_for dead "$DPID"
ctl get_server_list
expect_eq "control_privileged too long: cannot be found" "1 Cannot find MPS control daemon process" "$RC $OUT"
expect_has "control_privileged too long: reason names it" "Failed to bind control socket $MID/control_privileged" \
  "$(cat "$WORK/mid-log/control.log")"

use_dirs server-at-start
conf mps_server_at_start=1
start_daemon; wait_for socket_up
ctl get_server_list
SPID=$OUT
check "mps_server_at_start: a server without any client" alive "$SPID"
expect_eq "mps_server_at_start: server is the daemon's child" "$DPID" "$(awk '{print $4}' "/proc/$SPID/stat" 2>/dev/null)"
expect_eq "mps_server_at_start: server comm as the real one's" "nvidia-cuda-mps" "$(cat "/proc/$SPID/comm" 2>/dev/null)"
conf
ctl quit; wait_for dead "$DPID"
check "mps_server_at_start: quit takes the server down" wait_for dead "$SPID"

mkdir -p "$WORK/target"
ln -s "$WORK/target" "$WORK/link"
OUT=$(CUDA_MPS_PIPE_DIRECTORY=$WORK/link CUDA_MPS_LOG_DIRECTORY=$WORK/link-log timeout 10 "$MPS" -d 2>&1); RC=$?
expect_eq "pipe dir that is a symlink: refused" 1 "$RC"
check "pipe dir that is a symlink: nothing written through it" test -z "$(ls -A "$WORK/target")"

use_dirs envi
OUT=$(env -i CUDA_MPS_PIPE_DIRECTORY="$PIPE" CUDA_MPS_LOG_DIRECTORY="$LOGD" UNILAB_FAKE_CONF="$CONF" \
  UNILAB_FAKE_GPU_TABLE="$WORK/gpus.csv" timeout 10 "$MPS" -d 2>&1); RC=$?
DPID=$(cat "$PIPE/nvidia-cuda-mps-control.pid" 2>/dev/null); DAEMON_PIDS+=("$DPID")
expect_eq "-d from an empty environment (no PATH/HOME)" 0 "$RC"
wait_for socket_up
out=$(env -i CUDA_MPS_PIPE_DIRECTORY="$PIPE" "$CLIENT" --hold 0 2>&1); rc=$?
expect_eq "client from an empty environment" 0 "$rc"
OUT=$(echo quit | env -i CUDA_MPS_PIPE_DIRECTORY="$PIPE" "$MPS" 2>&1); RC=$?
expect_eq "front end from an empty environment" "0 " "$RC $OUT"
wait_for dead "$DPID"

echo "# non-root user"
if [[ $(id -u) -ne 0 ]]; then
  echo "skip - non-root checks need root (to create and become unimps1)"
else
  id unimps1 >/dev/null 2>&1 || useradd -m unimps1
  U=$(id -u unimps1)
  UBIN=$BIN
  if ! su unimps1 -s /bin/bash -c "test -x '$MPS' && test -x '$CLIENT'"; then
    UBIN=$(mktemp -d /tmp/fakes-bin.XXXXXX)
    cp "$SMI" "$MPS" "$CLIENT" "$UBIN/"
    chmod 755 "$UBIN" "$UBIN"/*
  fi
  install -d -o unimps1 -m 700 "$WORK/u1"
  UP=$WORK/u1/pipe
  UL=$WORK/u1/log
  as_u1() {  # CMD: run as unimps1 with the test environment spelled out
    su unimps1 -s /bin/bash -c "export CUDA_MPS_PIPE_DIRECTORY='$UP' CUDA_MPS_LOG_DIRECTORY='$UL' UNILAB_FAKE_CONF='$CONF' UNILAB_FAKE_GPU_TABLE='$WORK/gpus.csv'; $1"
  }
  conf
  OUT=$(as_u1 "timeout 10 '$UBIN/nvidia-cuda-mps-control' -d 2>&1"); RC=$?
  expect_eq "unimps1: -d exits 0" "0 " "$RC $OUT"
  UPID=$(cat "$UP/nvidia-cuda-mps-control.pid" 2>/dev/null); DAEMON_PIDS+=("$UPID")
  check "unimps1: daemon alive" alive "$UPID"
  expect_eq "unimps1: daemon runs as the user" "$U" "$(stat -c %u "/proc/$UPID")"
  expect_eq "unimps1: pipe dir, pid file, control.log owned by the user" "$U $U $U" \
    "$(stat -c %u "$UP") $(stat -c %u "$UP/nvidia-cuda-mps-control.pid") $(stat -c %u "$UL/control.log")"
  expect_has "unimps1: control.log uid line" "uid=$U gid=$(id -g unimps1)" "$(cat "$UL/control.log")"
  check "unimps1: socket appears" wait_for test -S "$UP/control"
  out=$(as_u1 "'$UBIN/fake-cuda-client' --hold 0" 2>&1); rc=$?
  expect_eq "unimps1: client connects" 0 "$rc"
  expect_has "unimps1: client output" "connected to MPS server" "$out"
  OUT=$(as_u1 "echo get_server_list | '$UBIN/nvidia-cuda-mps-control'"); RC=$?
  SPID=$OUT
  expect_eq "unimps1: server runs as the user" "$U" "$(stat -c %u "/proc/$SPID" 2>/dev/null)"
  expect_has "unimps1: commands logged with peer uid" "Cmd: get_server_list (uid=$U)" "$(cat "$UL/control.log")"
  expect_has "unimps1: appends to root's 0666 call log" "mps-daemon uid=$U pid=$UPID" "$(cat "$CALLS")"
  OUT=$(as_u1 "timeout 10 '$UBIN/nvidia-cuda-mps-control' -d"); RC=$?
  expect_eq "unimps1: second -d refused" "1 An instance of this daemon is already running" "$RC $OUT"
  OUT=$(as_u1 "echo quit | '$UBIN/nvidia-cuda-mps-control'"); RC=$?
  expect_eq "unimps1: quit" "0 " "$RC $OUT"
  check "unimps1: daemon gone" wait_for dead "$UPID"
  check "unimps1: pid file and socket removed" test ! -e "$UP/control" -a ! -e "$UP/nvidia-cuda-mps-control.pid"
  [[ "$UBIN" != "$BIN" ]] && rm -rf "$UBIN"
fi

# Repeated at the end, where a truncated log (CI keeps its tail) still shows them.
((FAIL > 0)) && printf 'failed: %s\n' "${FAILED_NAMES[@]}"
echo "$PASS passed, $FAIL failed ($((PASS + FAIL)) checks ran; this suite declares at least 120)"
# Floor: the root-only part adds checks; as root or not, at least 120 run.
if ((PASS + FAIL < 120)); then echo "FAIL: only $((PASS + FAIL)) checks ran, fewer than 120: a part did not run"; exit 1; fi
[[ $FAIL -eq 0 ]]
