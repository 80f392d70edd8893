#!/usr/bin/env bash
# End-to-end: operating it (#26) on a real local Slurm cluster, one node
# with four fake GPUs, the plugin's history= on a small tmpfs of its own.
#
# Parts:
#   faults   a job's MPS control daemon dies mid-job; its MPS server dies
#            mid-job: killed from outside, a
#            pre-Volta fatal exception, a Volta fatal GPU error (the fake
#            daemon's mps_server_* knobs write the lines a real one writes,
#            tests/unit/fixtures/mps-fault-h200); the fault names the client
#            process that hit it;
#            each is said once in the task's stderr and once in the slurmd
#            log with job, node, GPU and the log line, and status --job
#            shows it while the job runs; the history keeps it
#   history  the journal after a normal end, a cancel, four jobs cancelled
#            at once (concurrent epilogs), a full disk (a line lost with a
#            warning, never half a line, never a failed epilog) and a node
#            failure (slurmd and the job's slurmstepd killed, slurmd back):
#            one whole line per daemon; `unilab-mps history` as a user
#   metrics  `unilab-mps metrics` while jobs run, parsed by
#            prometheus_client's strict OpenMetrics parser and its classic
#            text parser (node_exporter's textfile format)
# Usage: tests/e2e/ops_e2e.sh BUILD_DIR [faults|history|metrics ...] (root)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/e2e_lib.sh"  # with tests/lib.sh and cluster.sh
build=$(cd "${1:?usage: $0 BUILD_DIR [parts...]}" && pwd)
shift
parts=("$@")
((${#parts[@]})) || parts=(faults history metrics)
export CLUSTER_PORT_BASE=${CLUSTER_PORT_BASE:-21400}
T0=$SECONDS
require_root
make_stage uops "$build"
ensure_test_users
CLI=$BIN/unilab-mps
# Debian's python3 (prometheus_client), whatever python3 comes first in PATH.
PY=/usr/bin/python3
HIST_DIR=$STAGE/h
HIST=$HIST_DIR/history.jsonl
stage_teardown() { umount "$HIST_DIR" 2>/dev/null; }

up() {
  cluster_down >/dev/null 2>&1
  rm -rf "$STAGE/c"
  mkdir -p "$HIST_DIR" && chmod 755 "$HIST_DIR"
  mountpoint -q "$HIST_DIR" || mount -t tmpfs -o size=256k,mode=0755 unilab-hist "$HIST_DIR" || { fail "tmpfs for the history"; return 1; }
  rm -f "$HIST_DIR"/* "$HIST_DIR"/.history*  # job ids start again at 1 with each cluster
  STATE_DIR=$STAGE/c/st RUN_DIR=$STAGE/c/r
  CLUSTER_DIR=$STAGE/c CLUSTER_MODE=plain CLUSTER_NODES=1 PLUGIN_SO=$STAGE/unilab_mps.so \
    PLUGIN_ARGS="state_dir=$STATE_DIR run_dir=$RUN_DIR nvidia_smi=$FAKES/nvidia-smi driver_proc=$FAKES/driver-proc mps_control=$FAKES/nvidia-cuda-mps-control start_timeout=10 stop_timeout=5 history=$HIST history_max=64K" \
    cluster_up || { fail "cluster up"; return 1; }
}

# history_of JOB: the journal's entries of JOB, one JSON object per line.
history_of() {
  $PY - "$HIST" "$1" <<'EOF'
import json, sys
for f in (sys.argv[1] + ".1", sys.argv[1]):
    try:
        lines = open(f).read().splitlines()
    except OSError:
        continue
    for line in lines:
        e = json.loads(line)  # a half line fails here
        if e.get("job") == sys.argv[2]:  # the full-disk case's padding line has none
            print(json.dumps(e, sort_keys=True))
EOF
}
# jq-less field of a JSON line: hfield LINE PYTHON-EXPR (e as the entry)
hfield() { $PY -c 'import json, sys; e = json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2" 2>/dev/null; }
# Every line of the journal is whole JSON.
journal_whole() { $PY -c 'import json, sys
for f in sys.argv[1:]:
    try:
        text = open(f).read()
    except OSError:
        continue
    assert text == "" or text.endswith("\n"), f + ": ends in half a line"
    for line in text.splitlines():
        json.loads(line)' "$HIST" "$HIST.1"; }

wait_running() {  # wait_running JOB: a daemon record of JOB says running
  wait_for 30 bash -c 'grep -qs "\"state\": \"running\"" "$0"/job"$1".n1.*.json' "$STATE_DIR" "$1"
}
submit() {  # submit SBATCH-ARGS...: as unimps1; prints the job id
  as_user unimps1 sbatch --parsable "$@" 2>&1 | tail -n1
}

# ---------------------------------------------------------------- faults
# fault_case TAG KNOBS EXPECTED-WORDS: a batch job whose first step's client
# loses its server to the fault, whose second step asks status --job.
fault_case() {
  local tag=$1 knobs=$2 words=$3 job out log said st
  case_begin "fault-$tag" "the job's MPS server fault ($words) is said once to the task and once in the slurmd log; status --job shows it; the history keeps it"
  # shellcheck disable=SC2086
  fake_conf $knobs
  job=$(submit --unilab-mps --gres=gpu:1 -o "$OUT/fault-$tag.out" -e "$OUT/fault-$tag.out" --wrap "
srun --unilab-mps $FAKES/fake-cuda-client --hold 8; echo client-rc=\$?
srun --unilab-mps $CLI status --job \$SLURM_JOB_ID --json > $OUT/fault-$tag.status.json
srun --unilab-mps $CLI status --job \$SLURM_JOB_ID > $OUT/fault-$tag.status.txt
echo done")
  check "fault-$tag: sbatch accepted ($job)" test -n "$job"
  wait_job_gone "$job" 90 >/dev/null 2>&1
  out=$(cat "$OUT/fault-$tag.out" 2>/dev/null)
  log=$(cat "$(slurmd_log)")
  expect_contains "fault-$tag: the client lost its server" "$out" "client-rc=1"
  said=$(printf '%s\n' "$out" | grep -c "unilab-mps: job $job node n1: MPS daemon job$job.n1.gpu0 (GPU GPU-")
  expect_eq "fault-$tag: the job's output says it once" 1 "$said"
  expect_contains "fault-$tag: ... what happened" "$out" "$words"
  expect_eq "fault-$tag: the slurmd log says it once" 1 "$(printf '%s\n' "$log" | grep -c "unilab-mps: job $job node n1: MPS daemon job$job.n1.gpu0")"
  expect_contains "fault-$tag: ... with the log line" "$(printf '%s\n' "$log" | grep "job $job node n1: MPS daemon")" "$4"
  st=$(cat "$OUT/fault-$tag.status.txt" 2>/dev/null)
  expect_contains "fault-$tag: status --job (as the job's user, in the job) lists it" "$st" "faults (1):"
  expect_eq "fault-$tag: status --job --json: one fault of the expected kind" "$5" \
    "$($PY -c 'import json,sys; j=json.load(open(sys.argv[1])); print(",".join(f["fault"]["kind"] for f in j["faults"]))' "$OUT/fault-$tag.status.json" 2>&1)"
  if [ -n "${6:-}" ]; then
    expect_contains "fault-$tag: status --job shows the server's state" "$st" "$6"
    expect_contains "fault-$tag: the message names the client process that hit it" "$out" "; the client process that hit it: "
  fi
  local h
  h=$(history_of "$job")
  expect_eq "fault-$tag: the history line keeps the fault" "$5" "$(hfield "$h" '",".join(f["kind"] for f in e["faults"])')"
  expect_eq "fault-$tag: nothing of the fault is left in the state dir" "" "$(ls -A "$STATE_DIR/faults" 2>/dev/null)"
  expect_eq "fault-$tag: the node is not drained" idle "$(sinfo -h -n n1 -o %T)"
  case_end "job $job: $(printf '%s\n' "$out" | grep -m1 -o 'MPS daemon .*' | cut -c1-200)"
  assert_clean "fault-$tag" "$job"
  fake_conf
}

# The control daemon itself dies mid-job (mps_die_after_ms): the batch
# script's task exit finds it gone, says so once; the epilog's stop is stale.
daemon_gone_case() {
  local job out log h
  case_begin fault-daemon-gone "the job's MPS control daemon dies mid-job: said once to the job and once in the slurmd log; the history line keeps it and says the stop found it stale"
  fake_conf mps_die_after_ms=2000
  job=$(submit --unilab-mps --gres=gpu:1 -o "$OUT/gone.out" -e "$OUT/gone.out" --wrap "sleep 5; echo done")
  check "fault-daemon-gone: sbatch accepted ($job)" test -n "$job"
  wait_job_gone "$job" 90 >/dev/null 2>&1
  out=$(cat "$OUT/gone.out" 2>/dev/null)
  log=$(cat "$(slurmd_log)")
  local said="job $job node n1: MPS daemon job$job.n1.gpu0 (GPU GPU-"
  expect_eq "fault-daemon-gone: the job's output says it once" 1 "$(printf '%s\n' "$out" | grep -cF "$said")"
  expect_contains "fault-daemon-gone: ... what happened" "$out" "its MPS control daemon is gone"
  expect_eq "fault-daemon-gone: the slurmd log says it once" 1 "$(printf '%s\n' "$log" | grep -cF "$said")"
  h=$(history_of "$job")
  expect_eq "fault-daemon-gone: the history line: a stale stop, the fault kept" "stale daemon-gone" \
    "$(hfield "$h" 'e["stop"]["outcome"] + " " + ",".join(f["kind"] for f in e["faults"])')"
  expect_eq "fault-daemon-gone: the node is not drained" idle "$(sinfo -h -n n1 -o %T)"
  case_end "job $job: $(printf '%s\n' "$out" | grep -m1 -o 'MPS daemon .*' | cut -c1-200)"
  assert_clean fault-daemon-gone "$job"
  fake_conf
}

faults_part() {
  up || return
  daemon_gone_case
  fault_case kill "mps_server_die_after_ms=2000" "its MPS server ended while the job ran" "exited with status 0" server-exited
  fault_case legacy "mps_server_fault_after_ms=2000" "its MPS server met a fatal exception" "Server encountered a fatal exception" fatal-exception
  fault_case volta "mps_server_fault_after_ms=2000 mps_server_fault=volta mps_server_fault_sticky=1" \
    "its MPS server met a fatal GPU error" "] Server is handling a fatal GPU error." fatal-gpu-error ": FAULT"
}

# ---------------------------------------------------------------- history
history_part() {
  up || return
  local job h jobs=() j out
  case_begin history-end "a job that ends: one whole journal line per daemon: job, user, node, GPU UUIDs, mode, limits, times, how it stopped, servers"
  out=$(as_user unimps1 srun --unilab-mps --unilab-mps-threads=50 -n2 --gpus-per-task=1 "$FAKES/fake-cuda-client" --hold 0 2>&1)
  job=$(last_job)
  expect_eq "history-end: both tasks' clients connected" 2 "$(printf '%s\n' "$out" | grep -c '^client [0-9]* connected')"
  wait_job_gone "$job" 60 >/dev/null 2>&1
  h=$(history_of "$job")
  expect_eq "history-end: two lines, one per daemon" 2 "$(printf '%s\n' "$h" | grep -c .)"
  j=$(printf '%s\n' "$h" | head -n1)
  expect_eq "history-end: user and node" "unimps1 n1" "$(hfield "$j" 'e["user"] + " " + e["node"]')"
  expect_eq "history-end: a GPU UUID" GPU- "$(hfield "$j" 'e["gpus"][0][:4]')"
  expect_eq "history-end: mode and the share" "auto 50" "$(hfield "$j" 'e["mode"] + " " + str(int(e["limits"]["active_thread_percentage"]))')"
  expect_eq "history-end: stopped by the epilog with quit" "epilog quit" "$(hfield "$j" 'e["stop"]["by"] + " " + e["stop"]["outcome"]')"
  expect_eq "history-end: stop and start times in order, the stop timed" True \
    "$(hfield "$j" 'e["started_at"] < e["stopped_at"] and e["stop"]["took_ms"] >= 0')"
  expect_eq "history-end: the servers it started (the client's)" 1 \
    "$(printf '%s\n' "$h" | while read -r l; do hfield "$l" 'e["servers_started"]'; done | sort -n | tail -n1)"
  expect_eq "history-end: the journal is root's 0644" "root 644" "$(stat -c '%U %a' "$HIST")"
  expect_contains "history-end: the slurmd log counts the lines" "$(cat "$(slurmd_log)")" "2 history line(s) in $HIST"
  local shown
  shown=$(as_user unimps1 "$CLI" history --job "$job" 2>&1)
  expect_eq "history-end: unimps1 reads it with unilab-mps history --job" 2 "$(printf '%s\n' "$shown" | grep -c "^$job ")"
  expect_eq "history-end: --json --since 1h has them" 2 \
    "$(as_user unimps1 "$CLI" history --json --job "$job" --since 1h | $PY -c 'import json,sys; print(len(json.load(sys.stdin)["entries"]))')"
  expect_eq "history-end: --since tomorrow has none" 0 \
    "$(as_user unimps1 "$CLI" history --json --job "$job" --since "$(date -u -d tomorrow +%F)" | $PY -c 'import json,sys; print(len(json.load(sys.stdin)["entries"]))')"
  shown=$(as_user unimps1 "$CLI" history --since yesterday 2>&1); local rc=$?
  expect_eq "history-end: a bad --since: exit 2, one line naming the forms" "2 1" "$rc $(one_line "$shown")"
  case_end "job $job: $(printf '%s\n' "$shown" | head -n1)"

  case_begin history-cancel "a cancelled job: its line says the epilog stopped the daemon"
  job=$(submit --unilab-mps --gres=gpu:1 -o /dev/null --wrap "sleep 300")
  wait_running "$job"
  scancel "$job"
  wait_job_gone "$job" 60 >/dev/null 2>&1
  h=$(history_of "$job")
  expect_eq "history-cancel: one line" 1 "$(printf '%s\n' "$h" | grep -c .)"
  expect_eq "history-cancel: stopped by the epilog" epilog "$(hfield "$h" 'e["stop"]["by"]')"
  case_end "job $job: $(hfield "$h" 'e["stop"]["outcome"]')"

  case_begin history-concurrent "four jobs cancelled at once: four epilogs append together, four whole lines"
  jobs=()
  for _ in 1 2 3 4; do jobs+=("$(submit --unilab-mps --gres=gpu:1 -o /dev/null --wrap "sleep 300")"); done
  for j in "${jobs[@]}"; do wait_running "$j"; done
  scancel "${jobs[@]}"
  for j in "${jobs[@]}"; do wait_job_gone "$j" 60 >/dev/null 2>&1; done
  local n=0
  for j in "${jobs[@]}"; do n=$((n + $(history_of "$j" | grep -c .))); done
  expect_eq "history-concurrent: one line for each of the four jobs" 4 "$n"
  check "history-concurrent: every line of the journal is whole JSON" journal_whole
  case_end "jobs ${jobs[*]}: $n lines"

  case_begin history-full-disk "a full disk: the line is lost with one warning, the epilog succeeds, no half line; the next job's line is written again"
  local filler=$HIST_DIR/filler
  # The journal padded to a page boundary with one JSON line (tmpfs counts
  # pages: a line that fits the last page's slack would still be written),
  # then the tmpfs filled.
  $PY -c 'import os, sys
size = os.path.getsize(sys.argv[1]); need = (-size) % 4096
need += 4096 if need < 16 else 0
open(sys.argv[1], "a").write("{\"pad\": \"" + "x" * (need - 12) + "\"}\n")' "$HIST"
  dd if=/dev/zero of="$filler" bs=4k count=1024 2>/dev/null  # more than the 256k tmpfs holds
  job=$(submit --unilab-mps --gres=gpu:1 -o /dev/null --wrap "sleep 1")
  wait_job_gone "$job" 60 >/dev/null 2>&1
  expect_eq "history-full-disk: no line for it" "" "$(history_of "$job")"
  expect_contains "history-full-disk: the slurmd log says why" "$(cat "$(slurmd_log)")" "job $job: history not written (1 line(s) lost): cannot write $HIST"
  check "history-full-disk: the journal holds no half line" journal_whole
  expect_eq "history-full-disk: the node is not drained" idle "$(sinfo -h -n n1 -o %T)"
  assert_clean history-full-disk "$job"
  rm -f "$filler"
  job=$(submit --unilab-mps --gres=gpu:1 -o /dev/null --wrap "sleep 1")
  wait_job_gone "$job" 60 >/dev/null 2>&1
  expect_eq "history-full-disk: with room again, the next job's line" 1 "$(history_of "$job" | grep -c .)"
  case_end "$(grep -o 'history not written.*' "$(slurmd_log)" | head -n1 | cut -c1-160)"

  case_begin history-node-failure "slurmd and the job's slurmstepd killed mid-job (the node fails), slurmd back: the daemon is stopped and journalled once"
  job=$(submit --unilab-mps --gres=gpu:1 -o /dev/null --wrap "sleep 300")
  wait_running "$job"
  local dpid
  dpid=$(job_daemon_pid "$STATE_DIR" "$job")
  kill -KILL "$(cat "$CLUSTER_DIR/state/slurmd-n1.pid")" 2>/dev/null
  local stepds
  mapfile -t stepds < <(_ue2e_stepd_pids "$CLUSTER_DIR")
  check "history-node-failure: the job's slurmstepd found" test "${#stepds[@]}" -gt 0
  kill -KILL "${stepds[@]}" 2>/dev/null
  sleep 1
  check "history-node-failure: the daemon outlived slurmstepd" test -e "/proc/$dpid"
  scancel "$job" 2>/dev/null
  check "history-node-failure: slurmd comes back" cluster_restart_slurmd
  wait_job_gone "$job" 120 >/dev/null 2>&1
  check "history-node-failure: the daemon is gone" wait_for 30 test ! -e "/proc/$dpid"
  h=$(history_of "$job")
  expect_eq "history-node-failure: one line" 1 "$(printf '%s\n' "$h" | grep -c .)"
  check "history-node-failure: every line of the journal is whole JSON" journal_whole
  case_end "job $job: $(hfield "$h" 'e["stop"]["by"] + " " + e["stop"]["outcome"]')"
  assert_clean history-node-failure "$job"
  node_resume n1 >/dev/null 2>&1
}

# ---------------------------------------------------------------- metrics
metrics_part() {
  up || return
  local a b text
  case_begin metrics "unilab-mps metrics: strict OpenMetrics and node_exporter's text format, one sample set per daemon and GPU, labelled by job, user and GPU UUID"
  a=$(submit --unilab-mps --unilab-mps-threads=25 --gres=gpu:1 -o /dev/null --wrap "srun --unilab-mps $FAKES/fake-cuda-client --hold 60")
  b=$(as_user unimps2 sbatch --parsable --unilab-mps --gres=gpu:2 -o /dev/null --wrap "sleep 60" 2>&1 | tail -n1)
  wait_running "$a"
  wait_running "$b"
  local dpid
  dpid=$(job_daemon_pid "$STATE_DIR" "$a")
  check "metrics: job $a's client has its server" wait_for 30 bash -c "[ -n \"\$(ps -o pid= --ppid $dpid)\" ]"
  text=$("$CLI" metrics --node n1 2>&1)
  printf '%s\n' "$text" >"$OUT/metrics.txt"
  local parsed
  parsed=$($PY - "$OUT/metrics.txt" <<'EOF' 2>&1
import sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om
from prometheus_client.parser import text_string_to_metric_families as classic
text = open(sys.argv[1]).read()
fams = {f.name: f for f in om(text)}          # strict: raises on any error
list(classic(text))                             # node_exporter's format
up = {(s.labels["job"], s.labels["user"], s.labels["gpu_uuid"]): s.value for s in fams["unilab_mps_daemon_up"].samples}
print("families", len(fams))
print("daemons", int(fams["unilab_mps_daemons"].samples[0].value))
for (job, user, gpu), v in sorted(up.items()):
    print("up", job, user, gpu[:4], int(v))
servers = sum(s.value for s in fams["unilab_mps_servers"].samples)
bound = {s.labels["job"]: int(s.value) for s in fams["unilab_mps_bound_processes"].samples}
share = sorted({(s.labels["job"], s.value) for s in fams["unilab_mps_active_thread_percentage"].samples})
print("servers", int(servers))
print("bound", " ".join(f"{j}={v}" for j, v in sorted(bound.items())))
print("share", " ".join(f"{j}={int(v)}" for j, v in share))
print("start-unit", fams["unilab_mps_daemon_start_time_seconds"].unit)
EOF
)
  expect_not_contains "metrics: the strict parser takes it" "$parsed" "Traceback"
  expect_contains "metrics: three daemons on the node" "$parsed" "daemons 3"
  expect_eq "metrics: job $a's GPU, labelled with unimps1, up" 1 "$(printf '%s\n' "$parsed" | grep -c "^up $a unimps1 GPU- 1")"
  expect_eq "metrics: job $b's two GPUs, labelled with unimps2, up" 2 "$(printf '%s\n' "$parsed" | grep -c "^up $b unimps2 GPU- 1")"
  expect_contains "metrics: the holding client's server" "$parsed" "servers 1"
  # The processes bound to job a's daemon, counted here from /proc: unimps1's
  # whose environment names its pipe directory, not MPS processes.
  local pipe n=0 p
  pipe=$(rec_field "$STATE_DIR/job$a.n1.gpu0.json" pipe_directory)
  for p in /proc/[0-9]*; do
    [ "$(stat -c %U "$p" 2>/dev/null)" = unimps1 ] || continue
    [[ $(cat "$p/comm" 2>/dev/null) == nvidia-cuda-mps* ]] && continue
    tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -qx "CUDA_MPS_PIPE_DIRECTORY=$pipe" && n=$((n + 1))
  done
  check "metrics: job $a has bound processes (the batch script, srun, the client)" test "$n" -ge 2
  expect_contains "metrics: job $a's bound processes, as /proc shows them" "$parsed" "bound $a=$n"
  expect_contains "metrics: job $a's share, on each of its GPUs" "$parsed" "share $a=25"
  expect_contains "metrics: start time in seconds (UNIT)" "$parsed" "start-unit seconds"
  expect_eq "metrics: ends in # EOF" "# EOF" "$(tail -n1 "$OUT/metrics.txt")"
  local user_text rc
  user_text=$(as_user unimps1 "$CLI" metrics --node n1 2>&1); rc=$?
  expect_eq "metrics: a user may run it too (records are world-readable; others' clients not counted)" 0 "$rc"
  case_end "$(printf '%s\n' "$parsed" | tr '\n' ' ')"
  scancel "$a" "$b"
  wait_job_gone "$a" 60 >/dev/null 2>&1
  wait_job_gone "$b" 60 >/dev/null 2>&1
  text=$("$CLI" metrics --node n1 2>&1)
  expect_contains "metrics: after the jobs, no daemon" "$text" 'unilab_mps_daemons{node="n1"} 0'
}

# Floors: cases, checks per part.
PART_FLOORS[faults]="4 44"
PART_FLOORS[history]="5 30"
PART_FLOORS[metrics]="1 10"
run_parts ops_e2e "${parts[@]}"
finish
