#!/usr/bin/env bash
# Prolog, epilog and CLI costs measured without Slurm: unilab-mps-prolog and
# unilab-mps-epilog driven directly with the environment slurmd gives them
# (SLURM_JOB_ID/UID/GID, SLURM_JOB_GPUS, SLURMD_NODENAME, SLURM_CONF, the
# SPANK option variable) against the fake NVIDIA tools, on a simulated node
# with up to 32 GPUs. Also: records present on the node, a daemon that
# ignores `quit`, `unilab-mps status` with many records, and the shell
# prolog/epilog of bench/shell-*.sh for comparison.
#
# Usage: bench/direct.sh BUILD_DIR   (root; env: BENCH_CSV, BENCH_REPS, BENCH_QUICK=1)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/lib.sh
. "$here/../tests/lib.sh"
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
REPS=${BENCH_REPS:-5}
QUICK=${BENCH_QUICK:-0}
[ "$(id -u)" -eq 0 ] || { echo "bench/direct.sh: run as root (the prolog starts daemons as another user)" >&2; exit 1; }

W=$(mktemp -d /tmp/unilab-bench-d.XXXXXX)
chmod 755 "$W"
cleanup() {
  local p
  for p in $(daemons_under "$W/"); do kill -9 "$p" 2>/dev/null; done
  mountpoint -q "$W/node" && umount -R -l "$W/node"
  rm -rf "$W"
}
trap cleanup EXIT

ensure_test_users
USER_UID=$(id -u unimps1)
USER_GID=$(id -g unimps1)
stage_binaries "$build" "$W/stage"
install -m 755 "$here/shell-prolog.sh" "$here/shell-epilog.sh" "$W/stage/"
BIN=$W/stage/bin
export BENCH_FAKES=$W/stage/fakes BENCH_GPU_TABLE=$W/gpus.csv BENCH_CALL_LOG=$W/calls.log
NODE_GPUS=32
write_gpu_table "$BENCH_GPU_TABLE" "$NODE_GPUS"
# The driver's view of that table (driver_proc=): the prolog reads each GPU's minor there.
UNILAB_FAKE_GPU_TABLE=$BENCH_GPU_TABLE "$BENCH_FAKES/fake-driver-proc" "$W/driver-proc" >/dev/null
chmod -R a+rX "$W/driver-proc"
read -r -a MINORS <<<"$(gpu_minors "$NODE_GPUS")"
make_devices "$W/dev" "${MINORS[@]}"
write_gres_conf "$W/gres.conf" bn1 "$W/dev" "${MINORS[@]}"
: >"$W/slurm.conf"
# The node's state and run directories (and the shell script's pipe
# directories) on a tmpfs, as on a real node: the defaults are under /run,
# a tmpfs. Here /tmp is on disk, where every fsync of a record write would
# wait for the disk, a cost no node pays.
mkdir -p "$W/node"
mount -t tmpfs -o mode=0755,size=256m tmpfs "$W/node" || { echo "bench/direct.sh: cannot mount a tmpfs on $W/node" >&2; exit 1; }
STATE=$W/node/state RUN=$W/node/run
STOP_TIMEOUT=10
JOB=100000

# Slurm's prolog environment; MODE is the SPANK option value ((null) = auto).
job_env() { # job_env JOB GPUS MODE
  local e=(env -i "SLURM_JOB_ID=$1" "SLURM_JOB_UID=$USER_UID" "SLURM_JOB_GID=$USER_GID" "SLURM_JOB_GPUS=$2"
    SLURMD_NODENAME=bn1 "SLURM_CONF=$W/slurm.conf")
  [ -n "$3" ] && e+=("SPANK__SLURM_SPANK_OPTION_unilab_mps_unilab_mps=$3")
  printf '%s\0' "${e[@]}"
}
plugin_args() {
  printf '%s\0' "state_dir=$STATE" "run_dir=$RUN" "nvidia_smi=$BENCH_FAKES/nvidia-smi" "driver_proc=$W/driver-proc" "history=$W/log/history.jsonl" \
    "mps_control=$BENCH_FAKES/nvidia-cuda-mps-control" "gres_conf=$W/gres.conf" "stop_timeout=$STOP_TIMEOUT" "start_timeout=30"
}
# helper_cmd prolog|epilog JOB GPUS MODE: the helper's command line in
# HELPER_CMD, built before any clock starts (the process substitutions fork).
helper_cmd() {
  local -a e a
  mapfile -d '' -t e < <(job_env "$2" "$3" "$4")
  mapfile -d '' -t a < <(plugin_args)
  HELPER_CMD=("${e[@]}" "$BIN/unilab-mps-$1" "${a[@]}")
}
run_helper() { # run_helper prolog|epilog JOB GPUS MODE
  helper_cmd "$@"
  "${HELPER_CMD[@]}" >>"$W/helper.log" 2>&1
}
# timed_helper prolog|epilog JOB GPUS MODE: runs it; its wall time in CLOCK_MS
# (the helper's process alone, as shell_job times the shell scripts).
timed_helper() {
  local rc
  helper_cmd "$@"
  clock_start
  "${HELPER_CMD[@]}" >>"$W/helper.log" 2>&1
  rc=$?
  clock_stop
  return "$rc"
}

# One job through prolog and epilog; rows for times and subprocess counts.
# measure_job SUITE CASE PARAM LATENCY GPUS MODE
measure_job() {
  local suite=$1 case=$2 param=$3 lat=$4 gpus=$5 mode=$6 rc ms
  JOB=$((JOB + 1))
  reset_call_log
  timed_helper prolog "$JOB" "$gpus" "$mode"; rc=$?
  ms=$CLOCK_MS
  # A failed run's time is not a measurement: checked before it is recorded.
  [ "$rc" -eq 0 ] || { bench_log "prolog of job $JOB failed ($suite $case $param): $(tail -3 "$W/helper.log")"; return 1; }
  row "$suite" "$case" "$param" "$lat" prolog_ms "$ms"
  row "$suite" "$case" "$param" "$lat" prolog_smi_calls "$(count_calls "$BENCH_CALL_LOG" nvidia-smi)"
  row "$suite" "$case" "$param" "$lat" prolog_ctl_calls "$(count_calls "$BENCH_CALL_LOG" nvidia-cuda-mps-control)"
  row "$suite" "$case" "$param" "$lat" prolog_daemons "$(count_calls "$BENCH_CALL_LOG" mps-daemon)"
  reset_call_log
  timed_helper epilog "$JOB" "$gpus" "$mode"; rc=$?
  ms=$CLOCK_MS
  [ "$rc" -eq 0 ] || { bench_log "epilog of job $JOB failed: $(tail -3 "$W/helper.log")"; return 1; }
  row "$suite" "$case" "$param" "$lat" epilog_ms "$ms"
  row "$suite" "$case" "$param" "$lat" epilog_smi_calls "$(count_calls "$BENCH_CALL_LOG" nvidia-smi)"
  row "$suite" "$case" "$param" "$lat" epilog_ctl_calls "$(count_calls "$BENCH_CALL_LOG" nvidia-cuda-mps-control)"
  if compgen -G "$RUN/$JOB.*" >/dev/null || [ -n "$(daemons_under "$RUN/$JOB.")" ]; then
    bench_log "job $JOB left something behind"; return 1
  fi
}

# The fake tools' own cost, without unilab-mps around them: one nvidia-smi
# query; `-d` until a front end gets an answer; `quit` until the daemon is gone.
bench_log "direct: the fake NVIDIA tools alone"
floor() { # floor LATENCY
  local pid pd=$W/node/floor/pipe
  mkdir -p "$pd" "$W/node/floor/log"
  clock_start
  "$BENCH_FAKES/nvidia-smi" --query-gpu=index,uuid,pci.bus_id,compute_mode,mig.mode.current,name --format=csv,noheader >/dev/null ||
    { bench_log "floor: the fake nvidia-smi failed"; return 1; }
  clock_stop
  row floor tools 1 "$1" smi_ms "$CLOCK_MS"
  clock_start
  CUDA_MPS_PIPE_DIRECTORY=$pd CUDA_MPS_LOG_DIRECTORY=$W/node/floor/log CUDA_VISIBLE_DEVICES=GPU-5eed0000-b000-4000-8000-000c0ffee000 \
    "$BENCH_FAKES/nvidia-cuda-mps-control" -d >/dev/null
  until echo get_server_list | CUDA_MPS_PIPE_DIRECTORY=$pd "$BENCH_FAKES/nvidia-cuda-mps-control" >/dev/null 2>&1; do :; done
  clock_stop
  row floor tools 1 "$1" start_ms "$CLOCK_MS"
  pid=$(cat "$pd/nvidia-cuda-mps-control.pid")
  clock_start
  echo quit | CUDA_MPS_PIPE_DIRECTORY=$pd "$BENCH_FAKES/nvidia-cuda-mps-control" >/dev/null
  while proc_running "$pid"; do :; done
  clock_stop
  row floor tools 1 "$1" quit_ms "$CLOCK_MS"
  rm -rf "$W/node/floor"
}
for lat in 0 tools; do
  set_fakes "$lat"
  for ((r = 0; r < REPS; r++)); do floor "$lat"; done
done

gpu_counts=(1 8 32)
[ "$QUICK" = 1 ] && gpu_counts=(1 8)

bench_log "direct: per-GPU daemons and one multi-GPU daemon, ${gpu_counts[*]} GPUs, $REPS reps"
for lat in 0 tools; do
  set_fakes "$lat"
  reps=$REPS
  [ "$lat" = tools ] && reps=$(((REPS + 1) / 2))
  for ((r = 0; r < reps; r++)); do
    for g in "${gpu_counts[@]}"; do
      measure_job prolog per-gpu "$g" "$lat" "$(seq_csv "$g")" '(null)'
      measure_job prolog multi "$g" "$lat" "$(seq_csv "$g")" multi
    done
    # A job that did not ask for MPS: the helpers must return at once.
    measure_job prolog no-option 1 "$lat" 0 ''
  done
done

# A node's daemons start (and stop) at once: a per-GPU job of 1, 4 and 8 GPUs
# whose daemons each take 300 ms to answer; "added" is the prolog time minus
# that of a job without the option (the helper's own start-up), in the same
# rounds. Few rounds: the machine is shared.
CONC_REPS=${BENCH_CONC_REPS:-3}
[ "$QUICK" = 1 ] && CONC_REPS=2
bench_log "direct: a node's daemons at once: per-GPU jobs of 1, 4, 8 GPUs, daemon start 300 ms, $CONC_REPS reps"
set_fakes 0 mps_start_delay_ms=300
for ((r = 0; r < CONC_REPS; r++)); do
  measure_job concurrent no-option 1 start300 0 ''
  for g in 1 4 8; do measure_job concurrent per-gpu "$g" start300 "$(seq_csv "$g")" '(null)'; done
done
set_fakes 0

bench_log "direct: records of other jobs on the node (1, 10, 100, 1000 records)"
set_fakes 0
run_helper prolog 99999 0 '(null)' || bench_log "template prolog failed"
template=$(cat "$STATE/job99999.bn1.gpu0.json")
row records size 1 0 record_bytes "$(wc -c <"$STATE/job99999.bn1.gpu0.json")"
run_helper epilog 99999 0 '(null)'
rec_counts=(1 10 100 1000)
[ "$QUICK" = 1 ] && rec_counts=(1 10 100)
have=0
for total in "${rec_counts[@]}"; do
  # Other jobs' records (their daemons are gone: only parsing and scoping
  # them costs the measured job anything).
  while ((have < total - 1)); do
    have=$((have + 1))
    j=$((900000 + have))
    # bash substitutions, no sed per file: 1,000 forks would take minutes here
    rec=${template//job99999./job$j.}
    printf '%s\n' "${rec//\"job_id\": \"99999\"/\"job_id\": \"$j\"}" >"$STATE/job$j.bn1.gpu0.json"
  done
  for ((r = 0; r < REPS; r++)); do measure_job records per-gpu "$total" 0 0 '(null)'; done
done
rm -f "$STATE"/job9*.json

# The task_exit hook: what slurmstepd does for each ended task of an MPS job
# (tests/tools/task_exit_cost times task_exit_faults, the function the hook
# calls: the job's records, both logs of each daemon read and scanned, each
# daemon's identity in /proc) for jobs of 1 and 8 per-GPU daemons whose logs
# hold what the daemon wrote at start, then 64 KiB and 4 MiB more client
# lines each (the scan reads at most the last 1 MiB of a log).
TASK_EXIT=$build/tests/tools/task_exit_cost
if [ -x "$TASK_EXIT" ]; then
  bench_log "direct: the task_exit hook per ended task: 1 and 8 daemons, logs as started, +64 KiB, +4 MiB"
  set_fakes 0
  awk 'BEGIN { for (i = 0; i < 48000; i++) printf "[2026-12-04 18:34:02.%03d Control  9036] NEW CLIENT %d from user 1000: Server already exists\n", i % 1000, 10000 + i }' >"$W/filler.log"
  mapfile -d '' -t te_args < <(plugin_args)
  for g in 1 8; do
    JOB=$((JOB + 1))
    run_helper prolog "$JOB" "$(seq_csv "$g")" '(null)' || { bench_log "task_exit: prolog of job $JOB failed: $(tail -3 "$W/helper.log")"; continue; }
    for grow in 0 64 4096; do
      for f in "$RUN/$JOB".*/log/control.log "$RUN/$JOB".*/log/server.log; do
        [ "$grow" = 0 ] || head -c "$((grow * 1024))" "$W/filler.log" >>"$f"
      done
      "$TASK_EXIT" "$((REPS * 4))" "$JOB" "$USER_UID" "${te_args[@]}" 2>>"$W/helper.log" |
        awk -v g="$g" -v k="$grow" -v csv="$BENCH_CSV" '
          $2 != 0 { bad = 1 }
          { printf "task_exit,log-plus-%sKiB,%s,0,call_ms,%.3f\n", k, g, $1 / 1000 >> csv }
          END { if (bad) print "task_exit: a call noted faults on logs without fault lines" > "/dev/stderr" }'
    done
    row task_exit size "$g" 0 log_kib "$(du -ck "$RUN/$JOB".*/log/*.log | tail -n1 | cut -f1)"
    run_helper epilog "$JOB" "$(seq_csv "$g")" '(null)' || bench_log "task_exit: epilog of job $JOB failed"
  done
else
  bench_log "direct: no $TASK_EXIT (built with the tests): the task_exit hook not measured"
fi

bench_log "direct: epilog of daemons that ignore quit (bounded by stop_timeout=2)"
STOP_TIMEOUT=2
stuck_reps=2
[ "$QUICK" = 1 ] && stuck_reps=1
for knob in mps_ignore_quit=1 "mps_ignore_quit=1 mps_ignore_term=1"; do
  # shellcheck disable=SC2086 # one knob per word
  set_fakes 0 $knob
  case_name=ignore-quit
  [[ $knob == *term* ]] && case_name=ignore-quit-term
  for g in 1 4; do
    [ "$QUICK" = 1 ] && [ "$g" = 4 ] && continue
    for ((r = 0; r < stuck_reps; r++)); do measure_job stuck "$case_name" "$g" 0 "$(seq_csv "$g")" '(null)'; done
  done
done
STOP_TIMEOUT=10
set_fakes 0

bench_log "direct: the shell prolog/epilog after Slurm's etc/prolog.example"
shell_job() { # shell_job CASE PARAM LAT GPUS WAIT [PER_GPU]
  printf 'MPS_CMD_DIR=%s/\nMPS_DIR_BASE=%s\nMPS_WAIT=%s\nMPS_PER_GPU=%s\n' "$BENCH_FAKES" "$W/node/shell" "$5" "${6:-0}" >"$W/stage/shell-mps.conf"
  mkdir -p "$W/node/shell"
  JOB=$((JOB + 1))
  local -a e
  mapfile -d '' -t e < <(job_env "$JOB" "$4" '')
  e+=("CUDA_VISIBLE_DEVICES=$4")
  reset_call_log
  clock_start
  "${e[@]}" "$W/stage/shell-prolog.sh" >>"$W/helper.log" 2>&1 || { bench_log "shell prolog of job $JOB failed"; return 1; }
  clock_stop
  row shell "$1" "$2" "$3" prolog_ms "$CLOCK_MS"
  row shell "$1" "$2" "$3" prolog_smi_calls "$(count_calls "$BENCH_CALL_LOG" nvidia-smi)"
  row shell "$1" "$2" "$3" prolog_ctl_calls "$(count_calls "$BENCH_CALL_LOG" nvidia-cuda-mps-control)"
  reset_call_log
  clock_start
  "${e[@]}" "$W/stage/shell-epilog.sh" >>"$W/helper.log" 2>&1 || { bench_log "shell epilog of job $JOB failed"; return 1; }
  clock_stop
  row shell "$1" "$2" "$3" epilog_ms "$CLOCK_MS"
  row shell "$1" "$2" "$3" epilog_smi_calls "$(count_calls "$BENCH_CALL_LOG" nvidia-smi)"
  row shell "$1" "$2" "$3" epilog_ctl_calls "$(count_calls "$BENCH_CALL_LOG" nvidia-cuda-mps-control)"
  # quit is asynchronous: let the daemon go before the next job reuses the dir
  local p
  for _ in $(seq 1 200); do
    p=$(daemons_under "$W/node/shell/")
    [ -z "$p" ] && break
    sleep 0.02
  done
  rm -rf "$W/node/shell"
}
for lat in 0 tools; do
  set_fakes "$lat"
  reps=$(((REPS + 1) / 2))
  for ((r = 0; r < reps; r++)); do
    for wait in sleep poll; do
      shell_job "$wait" 1 "$lat" 0 "$wait"
      shell_job "$wait" 4 "$lat" 0,1,2,3 "$wait"
      shell_job "$wait" 8 "$lat" "$(seq_csv 8)" "$wait"
      # What a site does for per-GPU daemons: one per GPU, one after another.
      [ "$lat" = 0 ] && shell_job "$wait-per-gpu" 8 "$lat" "$(seq_csv 8)" "$wait" 1
    done
  done
done
set_fakes 0

# status always up to 1,000 records (the headline's figure); quick mode
# stops the records suite above at 100.
st_counts=(1 10 100 1000)
bench_log "direct: unilab-mps status with ${st_counts[*]} records"
CS=$W/cli-state CR=$W/cr
"$BIN/unilab-mps" start 0 --state-dir "$CS" --run-dir "$CR" --nvidia-smi "$BENCH_FAKES/nvidia-smi" \
  --mps-control "$BENCH_FAKES/nvidia-cuda-mps-control" >>"$W/helper.log" 2>&1 || bench_log "CLI start failed"
tfile=$(compgen -G "$CS/*.json" | head -n1)
tname=$(basename "$tfile" .json)
template=$(cat "$CS/$tname.json")
have=1
for total in "${st_counts[@]}"; do
  # Each copy has its own name and pipe directory and points at the live
  # daemon, so every liveness check does its full work.
  while ((have < total)); do
    have=$((have + 1))
    printf -v n 'bench-%04d' "$have"
    printf '%s\n' "${template//$tname/$n}" >"$CS/$n.json"
  done
  chmod 600 "$CS"/*.json
  for ((r = 0; r < REPS; r++)); do
    clock_start
    "$BIN/unilab-mps" status --json --state-dir "$CS" --run-dir "$CR" --nvidia-smi "$BENCH_FAKES/nvidia-smi" \
      --mps-control "$BENCH_FAKES/nvidia-cuda-mps-control" >"$W/status.json" 2>>"$W/helper.log" ||
      { bench_log "status of $total records failed"; exit 1; }
    clock_stop
    row status json "$total" 0 status_ms "$CLOCK_MS"
  done
  n=$(grep -c '"live": true' "$W/status.json")
  [ "$n" -eq "$total" ] || bench_log "status saw $n live daemons of $total records"
done
rm -f "$CS"/bench-*.json
"$BIN/unilab-mps" stop "$tname" --state-dir "$CS" --run-dir "$CR" --nvidia-smi "$BENCH_FAKES/nvidia-smi" \
  --mps-control "$BENCH_FAKES/nvidia-cuda-mps-control" >>"$W/helper.log" 2>&1
bench_log "direct: done"
