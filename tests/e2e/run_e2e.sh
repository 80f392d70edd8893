#!/usr/bin/env bash
# End-to-end: the built plugin in a real local Slurm cluster (munged,
# slurmctld, slurmd on loopback) with simulated GPUs, driven by real srun and
# sbatch as non-root users. Runs every scenario in two configurations
# (without and with cgroup device constraint), then a two-node cluster.
# Usage: tests/e2e/run_e2e.sh BUILD_DIR [plain|cgroup|multinode|cgroup2 ...]
# cgroup2 (not a default: Slurm 24.05+, run through `SLURM_ROOT_CGROUP2=1
# scripts/slurm-root run`): the same scenarios on cgroup v2 with
# PrologFlags=RunInJob and the Prolog=/Epilog= helpers, under the test-only
# /proc shim of tests/e2e/cgroup2 (README there).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/e2e_lib.sh"  # with tests/lib.sh and cluster.sh
build=$(cd "${1:?usage: $0 BUILD_DIR [configs...]}" && pwd)
shift
configs=("$@")
((${#configs[@]})) || configs=(plain cgroup multinode)
# Floor: each single-node configuration runs ~90 checks, multinode ~15.
MIN_CHECKS=0
for c in "${configs[@]}"; do case $c in plain|cgroup|cgroup2) MIN_CHECKS=$((MIN_CHECKS + 70)) ;; multinode) MIN_CHECKS=$((MIN_CHECKS + 8)) ;; esac; done

require_root
make_stage unilab-e2e-stage "$build"
install -m 755 "$here/task_report.sh" "$BIN/"
export FAKE_CLIENT=$FAKES/fake-cuda-client
REPORT=$BIN/task_report.sh

# GRES index -> minor (GPU_MINORS "3 1 0 2") -> nvidia-smi GPU (tests/fakes/gpus.csv):
# every mapping differs, so a wrong one cannot pass.
UUID_BY_GRES=(GPU-a1b2c3d4-e5f6-4718-9a0b-1c2d3e4f5a6b GPU-0f1e2d3c-4b5a-4697-8877-66554433aa10
              GPU-3c8a1d5e-94b2-4f7e-8a61-0b2c9d4e5f60 GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16)

u() { # u USER CMD... : run as USER with the variables tasks need
  as_user "$1" env FAKE_CLIENT="$FAKE_CLIENT" GPU_DEVS="$GPU_DEVS" "${@:2}"
}
field() { # field OUTPUT TASK KEY -> value of "TASK KEY=value"
  printf '%s\n' "$1" | sed -n "s/^$2 $3=//p" | head -n1
}

# After the job: no daemon process, no pipe/log dir, no record of it.
# Checks one task's report: CVD, daemon user and CVD, pipe dir owner/mode, a client joined.
assert_task() {
  local tag=$1 out=$2 task=$3 user=$4 want_cvd=$5
  expect_eq "$tag: $task CUDA_VISIBLE_DEVICES" "$want_cvd" "$(field "$out" "$task" CVD)"
  expect_eq "$tag: $task daemon runs as $user" "$user" "$(field "$out" "$task" DAEMON_USER)"
  expect_eq "$tag: $task daemon CUDA_VISIBLE_DEVICES" "$want_cvd" "$(field "$out" "$task" DAEMON_CVD)"
  expect_eq "$tag: $task pipe dir owner:mode" "$user:700" "$(field "$out" "$task" PIPE_STAT)"
  expect_contains "$tag: $task client joined the daemon" "$(field "$out" "$task" CLIENT)" "connected to MPS server"
}

gres_uuids() { # gres_uuids "0,2" -> the UUIDs of those GRES indices, comma-joined
  local out=() i
  for i in ${1//,/ }; do out+=("${UUID_BY_GRES[$i]}"); done
  (IFS=,; echo "${out[*]}")
}

# The UUIDs a task must see, derived from what Slurm gave it, independently
# of the plugin: with device constraint the device files it may open, else
# the job's GPUs (single-task jobs).
want_uuids() { # want_uuids OUTPUT TASK
  if [ "$MODE" = cgroup ] || [ "$MODE" = cgroup2 ]; then
    gres_uuids "$(field "$1" "$2" ALLOWED)"
  else
    local g; g=$(field "$1" "$2" STEP_GPUS)
    [ "$g" = unset ] && g=$(field "$1" "$2" JOB_GPUS)
    gres_uuids "$g"
  fi
}

# Which GRES indices a job got on a node, from scontrol (e.g. "gpu:2(IDX:0-1)").
job_gres_idx() {
  scontrol show job -d "$1" | sed -n 's/.*GRES=gpu[^(]*(IDX:\([^)]*\)).*/\1/p' | head -n1
}

scenario_single() {
  local tag="$MODE single"
  local out; out=$(u unimps1 srun --unilab-mps --gres=gpu:1 -n1 "$REPORT" 2>&1)
  local job; job=$(last_job)
  local t=T0@n1
  expect_eq "$tag: task runs as unimps1" "unimps1" "$(field "$out" $t USER)"
  local cvd; cvd=$(field "$out" $t CVD)
  expect_contains "$tag: CUDA_VISIBLE_DEVICES is a UUID" "$cvd" "GPU-"
  # The job got GRES index 0 (first free): its UUID is minor 3's, nvidia-smi index 2.
  assert_task "$tag" "$out" $t unimps1 "$(want_uuids "$out" $t)"
  expect_contains "$tag: pipe dir is the job's" "$(field "$out" $t PIPE)" "$RUN_DIR/$job."
  assert_clean "$tag" "$job"
}

scenario_per_task() {
  local tag="$MODE per-task"
  local out; out=$(u unimps1 srun --unilab-mps -n2 --gpus-per-task=1 -l "$REPORT" 2>&1 | sed 's/^[0-9]*: //')
  local job; job=$(last_job)
  local p0 p1
  p0=$(field "$out" T0@n1 PIPE); p1=$(field "$out" T1@n1 PIPE)
  check "$tag: distinct daemons per task" test -n "$p0" -a "$p0" != "$p1"
  per_task_checks "$tag" "$out" unimps1
  assert_clean "$tag" "$job"
}

# Two tasks with one GPU each: distinct UUIDs that together are the job's
# GPUs, each task on the daemon of its own GPU (exact per task under cgroup).
per_task_checks() {
  local tag=$1 out=$2 user=$3 t
  local c0 c1; c0=$(field "$out" T0@n1 CVD); c1=$(field "$out" T1@n1 CVD)
  check "$tag: the two tasks see different single GPUs" test -n "$c0" -a -n "$c1" -a "$c0" != "$c1" -a "${c0//,/}" = "$c0"
  for t in T0@n1 T1@n1; do assert_task "$tag" "$out" $t "$user" "$(want_uuids "$out" $t)"; done
}

scenario_multi() {
  local tag="$MODE multi"
  local out; out=$(u unimps2 srun --unilab-mps=multi --gres=gpu:2 -n1 "$REPORT" 2>&1)
  local job; job=$(last_job)
  assert_task "$tag" "$out" T0@n1 unimps2 "$(want_uuids "$out" T0@n1)"
  expect_contains "$tag: two UUIDs in one task" "$(field "$out" T0@n1 CVD)" ","
  expect_contains "$tag: one daemon for both GPUs" "$(field "$out" T0@n1 PIPE)" "$RUN_DIR/$(run_entry "$job" n1 m)/pipe"
  assert_clean "$tag" "$job"
}

scenario_auto_two_gpus_fails() {
  local tag="$MODE auto+2gpu"
  local out rc; out=$(u unimps1 srun --unilab-mps --gres=gpu:2 -n1 "$REPORT" 2>&1); rc=$?
  local job; job=$(last_job)
  check "$tag: srun fails" test "$rc" -ne 0
  expect_contains "$tag: message names --unilab-mps=multi" "$out" "--unilab-mps=multi"
  expect_contains "$tag: message names --gpus-per-task=1" "$out" "--gpus-per-task=1"
  expect_not_contains "$tag: the task never ran" "$out" "T0@n1 USER"
  assert_clean "$tag" "$job"
}

scenario_sbatch() {
  local tag="$MODE sbatch"
  local script=$STAGE/batch-$MODE.sh outf=$OUT/batch-$MODE.out  # the run's own: /tmp is shared with the roots
  rm -f "$outf"
  cat >"$script" <<EOS
#!/bin/bash
#SBATCH --unilab-mps
#SBATCH --gres=gpu:2
#SBATCH -n2
#SBATCH -o $outf
echo "BATCH CVD=\$CUDA_VISIBLE_DEVICES"
srun -n2 --gpus-per-task=1 -l $REPORT | sed 's/^[0-9]*: //'
EOS
  chmod 755 "$script"
  local out; out=$(u unimps1 sbatch --wait "$script" 2>&1)
  local job; job=$(job_of "$out")
  local res; res=$(cat "$outf" 2>/dev/null)
  expect_contains "$tag: batch script sees UUIDs" "$(printf '%s' "$res" | sed -n 's/^BATCH CVD=//p')" "GPU-"
  per_task_checks "$tag" "$res" unimps1
  assert_clean "$tag" "$job"
  rm -f "$outf"
}

scenario_no_option() {
  local tag="$MODE no-option"
  : >"$CALL_LOG"
  local before; before=$(ls -A "$STATE_DIR" "$RUN_DIR" 2>/dev/null | wc -l)
  local out; out=$(u unimps1 srun --gres=gpu:1 -n1 "$REPORT" 2>&1)
  local job; job=$(last_job)
  local cvd; cvd=$(field "$out" T0@n1 CVD)
  expect_not_contains "$tag: CUDA_VISIBLE_DEVICES untouched (no UUID)" "$cvd" "GPU-"
  expect_eq "$tag: no MPS pipe variable" "unset" "$(field "$out" T0@n1 PIPE)"
  wait_job_gone "$job" 60 >/dev/null 2>&1
  expect_eq "$tag: no NVIDIA tool was run" "" "$(cat "$CALL_LOG")"
  expect_eq "$tag: no file was created" "$before" "$(ls -A "$STATE_DIR" "$RUN_DIR" 2>/dev/null | wc -l)"
}

scenario_bad_value() {
  local tag="$MODE bad-value"
  local before; before=$(last_job)
  local out rc; out=$(u unimps1 srun --unilab-mps='multi;rm -rf /' --gres=gpu:1 true 2>&1); rc=$?
  check "$tag: srun refuses" test "$rc" -ne 0
  expect_contains "$tag: message names the option and the fix" "$out" "invalid --unilab-mps value"
  expect_eq "$tag: nothing was allocated" "$before" "$(last_job)"
  out=$(u unimps1 sbatch --unilab-mps=bogus --wrap true 2>&1); rc=$?
  check "$tag: sbatch refuses" test "$rc" -ne 0
  # The plugin's own refusal, not srun/sbatch failing on an unknown option.
  expect_contains "$tag: sbatch message is the plugin's" "$out" "error: unilab-mps: "
  expect_eq "$tag: sbatch allocated nothing" "$before" "$(last_job)"
}

scenario_two_users() {
  local tag="$MODE two-users"
  local f2=$STAGE/u2-$MODE.out
  local before; before=$(last_job)
  (u unimps2 env HOLD=6 srun --unilab-mps --gres=gpu:1 -n1 "$REPORT" >"$f2" 2>&1) &
  local bg=$!
  # unimps2's job is the first one after $before (the time-limit job of
  # start_timelimit_job also has a record, and must not be taken for it).
  local rec="" i
  for i in $(seq 1 100); do
    rec=$(ls "$STATE_DIR" 2>/dev/null | grep '^job.*\.json$' | sed 's/^job//' | sort -n | awk -F. -v b="${before:-0}" '$1 > b {print "job" $0; exit}')
    [ -n "$rec" ] && break
    sleep 0.1
  done
  local other; other=$(sed -n 's/.*"pipe_directory": "\(.*\)".*/\1/p' "$STATE_DIR/$rec" 2>/dev/null)
  check "$tag: unimps2's daemon is recorded" test -n "$other"
  local out; out=$(u unimps1 env OTHER_PIPE="$other" srun --unilab-mps --gres=gpu:1 -n1 "$REPORT" 2>&1)
  local job1; job1=$(last_job)
  local job2; job2=$(field "$(cat "$f2" 2>/dev/null)" T0@n1 JOB)
  # Refused by the pipe dir's permissions, not by any other failure of the client.
  expect_contains "$tag: unimps1 cannot reach unimps2's daemon" "$(field "$out" T0@n1 OTHER)" "unreachable"
  expect_contains "$tag: unimps1 is refused by permissions" "$(field "$out" T0@n1 OTHER)" "Permission denied"
  # Expected GPUs come from what Slurm gave each job, not from the task itself.
  assert_task "$tag" "$out" T0@n1 unimps1 "$(want_uuids "$out" T0@n1)"
  expect_contains "$tag: unimps1's client joined its own job's daemon" "$(field "$out" T0@n1 CLIENT)" "pipe=$RUN_DIR/$job1."
  wait "$bg"
  local out2; out2=$(cat "$f2")
  job2=$(field "$out2" T0@n1 JOB)
  check "$tag: unimps2's job is the one whose pipe unimps1 tried" test -n "$job2" -a "$rec" != "${rec#job$job2.}"
  local c1 c2; c1=$(field "$out" T0@n1 CVD); c2=$(field "$out2" T0@n1 CVD)
  check "$tag: the users got different GPUs" test -n "$c1" -a -n "$c2" -a "$c1" != "$c2"
  assert_task "$tag" "$out2" T0@n1 unimps2 "$(want_uuids "$out2" T0@n1)"
  expect_contains "$tag: unimps2's client joined its own job's daemon" "$(field "$out2" T0@n1 CLIENT)" "pipe=$RUN_DIR/$job2."
  assert_clean "$tag" "$job1"
  assert_clean "$tag" "$(( job1 - 1 ))"
}

scenario_scancel() {
  local tag="$MODE scancel"
  local out; out=$(u unimps1 sbatch --unilab-mps --gres=gpu:1 -o /dev/null --wrap "sleep 300" 2>&1)
  local job; job=$(job_of "$out")
  local i
  for i in $(seq 1 100); do  # the record says "starting" until the daemon answers
    grep -qs '"state": "running"' "$STATE_DIR"/job"$job".*.json && break
    sleep 0.1
  done
  check "$tag: the job's daemon is recorded while it runs" bash -c "ls '$STATE_DIR' | grep -q '^job$job\.'"
  local dpid; dpid=$(job_daemon_pid "$STATE_DIR" "$job")
  check "$tag: the daemon runs" proc_running "$dpid"
  scancel "$job"
  assert_clean "$tag" "$job"
  check_not "$tag: the daemon process is gone" proc_running "$dpid"
}

start_timelimit_job() {
  local out; out=$(u unimps2 sbatch --unilab-mps --gres=gpu:1 --time=1 -o /dev/null --wrap "sleep 600" 2>&1)
  TL_JOB=$(job_of "$out")
  TL_T0=$SECONDS
}

check_timelimit_job() {
  local tag="$MODE time-limit"
  local i
  for i in $(seq 1 150); do
    squeue -h -j "$TL_JOB" 2>/dev/null | grep -q . || break
    sleep 1
  done
  local state; state=$(scontrol show job "$TL_JOB" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
  expect_eq "$tag: the job ended by its time limit" "TIMEOUT" "${state:-gone}"
  assert_clean "$tag" "$TL_JOB"
}

scenario_multinode() {
  local tag="multinode"
  local out; out=$(u unimps1 srun --unilab-mps -N2 -n2 --ntasks-per-node=1 --gres=gpu:1 -l "$REPORT" 2>&1 | sed 's/^[0-9]*: //')
  local job; job=$(last_job)
  expect_eq "$tag: task on n1" "unimps1" "$(field "$out" T0@n1 USER)"
  expect_eq "$tag: task on n2" "unimps1" "$(field "$out" T1@n2 USER)"
  assert_task "$tag" "$out" T0@n1 unimps1 "$(want_uuids "$out" T0@n1)"
  assert_task "$tag" "$out" T1@n2 unimps1 "$(want_uuids "$out" T1@n2)"
  expect_contains "$tag: n1's daemon is n1's" "$(field "$out" T0@n1 PIPE)" "$RUN_DIR/$(run_entry "$job" n1 0)/pipe"
  expect_contains "$tag: n2's daemon is n2's" "$(field "$out" T1@n2 PIPE)" "$RUN_DIR/$(run_entry "$job" n2 0)/pipe"
  assert_clean "$tag" "$job"
}

bring_up() { # bring_up MODE NODES
  MODE=$1
  CLUSTER_DIR=$(mktemp -d /tmp/unilab-e2e.XXXXXX)
  chmod 755 "$CLUSTER_DIR"
  GPU_DEVS="$CLUSTER_DIR/dev/nvidia3 $CLUSTER_DIR/dev/nvidia1 $CLUSTER_DIR/dev/nvidia0 $CLUSTER_DIR/dev/nvidia2"
  STATE_DIR=$CLUSTER_DIR/mps-state
  RUN_DIR=$CLUSTER_DIR/mps-run
  # cgroup v2 needs RunInJob, where Slurm calls no SPANK job_prolog: the
  # node runs the Prolog=/Epilog= helpers (docs/ADMIN.md section 6).
  local shim= helpers=
  if [ "$1" = cgroup2 ]; then
    shim=$(bash "$here/cgroup2/build.sh" "$STAGE") || return 1
    helpers=$STAGE/bin
  fi
  CLUSTER_CGROUP2_SHIM=$shim CLUSTER_PROLOG_HELPERS=$helpers \
  CLUSTER_MODE=$1 CLUSTER_NODES=$2 PLUGIN_SO=$STAGE/unilab_mps.so \
    PLUGIN_ARGS="state_dir=$STATE_DIR run_dir=$RUN_DIR nvidia_smi=$FAKES/nvidia-smi driver_proc=$FAKES/driver-proc mps_control=$FAKES/nvidia-cuda-mps-control start_timeout=10 stop_timeout=5" \
    cluster_up
}

ensure_test_users
for cfg in "${configs[@]}"; do
  echo "== configuration: $cfg"
  case $cfg in
    plain|cgroup|cgroup2)
      bring_up "$cfg" 1 || { fail "$cfg: cluster up"; cluster_down; continue; }
      start_timelimit_job
      scenario_single
      scenario_per_task
      scenario_multi
      scenario_auto_two_gpus_fails
      scenario_sbatch
      scenario_no_option
      scenario_bad_value
      scenario_two_users
      scenario_scancel
      check_timelimit_job
      ;;
    multinode)
      bring_up plain 2 || { fail "multinode: cluster up"; cluster_down; continue; }
      scenario_multinode
      ;;
    *) fail "unknown configuration $cfg" ;;
  esac
  # Epilogs Slurm started as the job's user fail closed by design; the
  # cluster harness finished each as root and listed it (cluster.sh).
  finished=$(cluster_user_epilogs | sed -n 's/^job \([0-9]*\) on .*/unilab-mps-epilog: job \1 epilog failed: runs as uid/p')
  if grep -h "unilab-mps" "$CLUSTER_DIR"/log/slurmd*.log 2>/dev/null | grep -i "error" | grep -v "invalid --unilab-mps value\|this task uses 2 GPUs" |
    grep -vF -e "${finished:-no finished user epilog}" >"$STAGE/errors.txt"; then
    fail "$cfg: unexpected unilab-mps errors in the slurmd log" "$(head -5 "$STAGE/errors.txt")"
  else
    pass "$cfg: slurmd log free of unexpected unilab-mps errors"
  fi
  KEEP_CLUSTER_LOGS=${KEEP_CLUSTER_LOGS:-0} cluster_down
done
finish
