#!/usr/bin/env bash
# Job launch on a real local Slurm cluster (tests/e2e/cluster.sh, plain mode,
# one node with 32 simulated GPUs and 32 declared CPUs): `srun -n N true`
# as a non-root user with and without --unilab-mps, interleaved, in three
# settings of the fake NVIDIA tools and the plugin:
#   plugin loaded, tools instant      (the plugin's own cost)
#   plugin loaded, tools slow         (nvidia-smi 50 ms, daemon start 200 ms)
#   no plugin at all                  (what a job costs without unilab-mps installed)
# then on a second cluster with bench/shell-prolog.sh and shell-epilog.sh as
# Prolog=/Epilog= instead of the plugin (the approach a site would otherwise
# use). Per job it records srun's wall time, the time until the node is idle
# again (epilog included), and from the slurmd log (debug level) the prolog
# window (launch request -> first step line) and the epilog window
# (terminate request -> "completed epilog"). Subprocess counts come from
# sbatch jobs whose batch script marks the call log around its srun steps.
#
# Usage: bench/launch.sh BUILD_DIR   (root; env: BENCH_CSV, BENCH_REPS,
#        BENCH_QUICK=1, CLUSTER_PORT_BASE (default 18300))
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/lib.sh
. "$here/../tests/lib.sh"
# shellcheck source=tests/e2e/cluster.sh
. "$here/../tests/e2e/cluster.sh"
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
REPS=${BENCH_REPS:-5}
QUICK=${BENCH_QUICK:-0}
export CLUSTER_PORT_BASE=${CLUSTER_PORT_BASE:-18300}
[ "$(id -u)" -eq 0 ] || { echo "bench/launch.sh: run as root (it starts a local Slurm cluster)" >&2; exit 1; }

STAGE=$(mktemp -d /tmp/unilab-bench-l.XXXXXX)
chmod 755 "$STAGE"
JOBS=$STAGE/jobs.txt # "JOB SUITE CASE PARAM LATENCY VARIANT" per timed job
finish_cluster() {
  [ -n "${CLUSTER_DIR:-}" ] && [ -d "$CLUSTER_DIR/log" ] && cat "$CLUSTER_DIR"/log/slurmd-n1.log >>"$STAGE/slurmd-all.log" 2>/dev/null
  cluster_down
}
teardown() {
  finish_cluster
  local p
  for p in $(daemons_under "$STAGE/"); do kill -9 "$p" 2>/dev/null; done
  rm -rf "$STAGE"
}
trap teardown EXIT

ensure_test_users
stage_binaries "$build" "$STAGE"
install -m 755 "$here/shell-prolog.sh" "$here/shell-epilog.sh" "$STAGE/"
export BENCH_FAKES=$STAGE/fakes BENCH_GPU_TABLE=$STAGE/gpus.csv BENCH_CALL_LOG=$STAGE/calls.log
NODE_GPUS=32
write_gpu_table "$BENCH_GPU_TABLE" "$NODE_GPUS"
# The driver's view of that table (driver_proc=): the prolog reads each GPU's minor there.
UNILAB_FAKE_GPU_TABLE=$BENCH_GPU_TABLE "$BENCH_FAKES/fake-driver-proc" "$STAGE/driver-proc" >/dev/null
chmod -R a+rX "$STAGE/driver-proc"
set_fakes 0
reset_call_log
: >"$JOBS"

# ------------------------------------------------------------------ running jobs

# Job ids are sequential per cluster; the latest one is the job just run.
last_job() { squeue -h -o %i -t all 2>/dev/null | sort -n | tail -n1; }

# Wait (bounded) until the node is idle again: job done, epilog finished.
wait_idle() {
  local deadline=$((SECONDS + 120)) s
  while ((SECONDS < deadline)); do
    s=$(scontrol -o show node n1 2>/dev/null)
    [[ $s =~ State=IDLE([[:space:]]|$) ]] && return 0
    sleep 0.02
  done
  bench_log "node n1 not idle after 120 s: ${s:0:200}"
  return 1
}

# shape_args CASE N ON -> srun arguments for that job shape
#   per-gpu: N tasks, one GPU each (N daemons with the option)
#   multi:   N tasks sharing 4 GPUs (one daemon with the option)
shape_args() {
  local case=$1 n=$2 on=$3 a=()
  case $case in
  per-gpu) a=(-n "$n" --gpus-per-task=1); [ "$on" = on ] && a+=(--unilab-mps) ;;
  multi) a=(-n "$n" --gres=gpu:4); [ "$on" = on ] && a+=(--unilab-mps=multi) ;;
  *) return 1 ;;
  esac
  printf '%s\n' "${a[@]}"
}

# timed_srun SUITE CASE N LATENCY VARIANT SRUN_ARGS...: one job, timed from
# inside the user's shell (su's own start-up is not counted).
timed_srun() {
  local suite=$1 case=$2 n=$3 lat=$4 variant=$5 out t0 job us rc
  shift 5
  t0=$(now_us)
  # shellcheck disable=SC2016 # expanded by the user's bash
  out=$(as_user unimps1 bash -c 'a=${EPOCHREALTIME/./}; srun --immediate=60 "$@" true; rc=$?; b=${EPOCHREALTIME/./}; echo "US=$((b - a)) RC=$rc"' _ "$@" 2>&1)
  wait_idle
  local turn
  turn=$(elapsed_ms "$t0")
  us=$(sed -n 's/^US=\([0-9]*\) RC=.*/\1/p' <<<"$out")
  rc=$(sed -n 's/^US=[0-9]* RC=\([0-9]*\)$/\1/p' <<<"$out")
  job=$(last_job)
  if [ "$rc" != 0 ] || [ -z "$us" ]; then
    bench_log "srun $* failed (rc=${rc:-?}): $(head -c 400 <<<"$out")"
    return 1
  fi
  row "$suite" "$case" "$n" "$lat" "srun_${variant}_ms" "$((us / 1000)).$(((us % 1000) / 100))"
  row "$suite" "$case" "$n" "$lat" "turnaround_${variant}_ms" "$turn"
  printf '%s %s %s %s %s %s\n' "$job" "$suite" "$case" "$n" "$lat" "$variant" >>"$JOBS"
}

# run_pair CASE N LATENCY: the same shape without and with the option.
run_pair() {
  local case=$1 n=$2 lat=$3 v
  for v in off on; do
    mapfile -t args < <(shape_args "$case" "$n" "$v")
    timed_srun launch "$case" "$n" "$lat" "$v" "${args[@]}"
  done
}

# ------------------------------------------------------------------ slurmd log

# prolog/epilog windows per job from a slurmd log at debug level:
#   prolog: "launch task StepId=J.0 request" -> first "[J.0]" line
#   epilog: "_rpc_terminate_job: ... JobId=J" -> "completed epilog for jobid J"
# prints "JOB prolog_ms epilog_ms" (-1 where a marker is missing).
log_windows() {
  awk '
    function ms(line,   t, h, m, s) {  # [YYYY-MM-DDTHH:MM:SS.mmm]
      t = substr(line, 13, 12); h = substr(t, 1, 2); m = substr(t, 4, 2); s = substr(t, 7)
      return ((h * 60 + m) * 60 + s) * 1000
    }
    /launch task StepId=[0-9]+\.0 request/ {
      match($0, /StepId=[0-9]+/); j = substr($0, RSTART + 7, RLENGTH - 7)
      if (!(j in ps)) ps[j] = ms($0)
    }
    /^\[[^]]*\] \[[0-9]+\.0\] / {
      match($0, /\] \[[0-9]+\./); j = substr($0, RSTART + 3, RLENGTH - 4)
      if ((j in ps) && !(j in pe)) pe[j] = ms($0)
    }
    /_rpc_terminate_job: .*JobId=[0-9]+/ {
      match($0, /JobId=[0-9]+/); j = substr($0, RSTART + 6, RLENGTH - 6)
      if (!(j in es)) es[j] = ms($0)
    }
    /completed epilog for jobid [0-9]+/ {
      match($0, /jobid [0-9]+/); j = substr($0, RSTART + 6, RLENGTH - 6)
      if (!(j in ee)) ee[j] = ms($0)
    }
    END {
      for (j in ps) {
        p = (j in pe) ? pe[j] - ps[j] : -1
        e = (j in es && j in ee) ? ee[j] - es[j] : -1
        printf "%s %.0f %.0f\n", j, p, e
      }
    }' "$1"
}

# Adds prolog/epilog rows for the jobs of this cluster (JOBS lines tagged C).
harvest_log() {
  local log=$1 tag=$2 job suite case n lat variant p e
  local -A pw=() ew=()
  while read -r job p e; do pw[$job]=$p ew[$job]=$e; done < <(log_windows "$log")
  while read -r job suite case n lat variant; do
    [ "${job%%:*}" = "$tag" ] || continue
    job=${job#*:}
    [ -n "${pw[$job]:-}" ] && [ "${pw[$job]}" != -1 ] && row "$suite" "$case" "$n" "$lat" "prolog_${variant}_ms" "${pw[$job]}"
    [ -n "${ew[$job]:-}" ] && [ "${ew[$job]}" != -1 ] && row "$suite" "$case" "$n" "$lat" "epilog_${variant}_ms" "${ew[$job]}"
  done <"$JOBS"
}

# Tag this cluster's job ids (they restart at 1 on a new cluster).
tag_jobs() { sed -i "s/^\([0-9][0-9]*\) /$1:\1 /" "$JOBS"; }

# ------------------------------------------------------------------ call counts

# count_job_calls CASE N ON: an sbatch job of that shape whose script marks
# the call log before and after two srun steps; rows for the calls the
# prolog (+ batch script's task_init), the steps' tasks and the epilog made.
count_job_calls() {
  local case=$1 n=$2 on=$3 job script
  script=$STAGE/batch-$1-$2-$3.sh
  local -a a
  mapfile -t a < <(shape_args "$case" "$n" "$on")
  local step
  step=$(printf '%q ' "${a[@]}" | sed 's/--unilab-mps[^ ]*//')
  {
    printf '#!/bin/bash\n'
    printf 'echo "MARK steps-begin" >>%q\n' "$BENCH_CALL_LOG"
    printf 'srun %s true\nsrun %s true\n' "$step" "$step"
    printf 'echo "MARK steps-end" >>%q\n' "$BENCH_CALL_LOG"
  } >"$script"
  chmod 755 "$script"
  reset_call_log
  job=$(as_user unimps1 sbatch --parsable -o /dev/null "${a[@]}" "$script" 2>&1)
  [[ $job =~ ^[0-9]+$ ]] || { bench_log "sbatch failed: $job"; return 1; }
  local deadline=$((SECONDS + 120))
  while [ -n "$(squeue -h -j "$job" 2>/dev/null)" ] && ((SECONDS < deadline)); do sleep 0.1; done
  wait_idle
  local tool phase
  for phase in prolog steps epilog; do
    for tool in nvidia-smi nvidia-cuda-mps-control mps-daemon; do
      row calls "$case-$on" "$n" 0 "${phase}_${tool}_calls" "$(awk -v p="$phase" -v t="$tool" '
        /^MARK steps-begin/ { ph = "steps"; next }
        /^MARK steps-end/ { ph = "epilog"; next }
        { if (ph == "") ph = "prolog"; if (ph == p && $1 == t) n++ }
        END { print n + 0 }' "$BENCH_CALL_LOG")"
    done
  done
  grep -q '^MARK steps-end' "$BENCH_CALL_LOG" || bench_log "batch job $job did not reach its end marker"
}

# ------------------------------------------------------------------ clusters

read -r -a MINORS <<<"$(gpu_minors "$NODE_GPUS")"
CLUSTER_DIR=
up() { # up TAG [extra slurm.conf lines]
  CLUSTER_DIR=$(mktemp -d /tmp/unilab-bench-c.XXXXXX)
  chmod 755 "$CLUSTER_DIR"
  MPS_STATE=$CLUSTER_DIR/st MPS_RUN=$CLUSTER_DIR/run
  CLUSTER_MODE=plain CLUSTER_NODES=1 CLUSTER_CPUS=$NODE_GPUS GPU_MINORS="${MINORS[*]}" CLUSTER_DEBUG=debug \
    CLUSTER_EXTRA_CONF=${2:-} cluster_up >"$STAGE/up.log" 2>&1 || { cat "$STAGE/up.log" >&2; return 1; }
  CLUSTER_TAG=$1
}
# shellcheck disable=SC2119 # restart every node
plugin_on() {
  PLUGIN_SO=$STAGE/unilab_mps.so PLUGIN_ARGS="state_dir=$MPS_STATE run_dir=$MPS_RUN nvidia_smi=$BENCH_FAKES/nvidia-smi driver_proc=$STAGE/driver-proc mps_control=$BENCH_FAKES/nvidia-cuda-mps-control start_timeout=30 stop_timeout=10" \
    write_plugstack_conf && cluster_restart_slurmd >/dev/null 2>&1
}
# shellcheck disable=SC2119
plugin_off() { PLUGIN_SO='' write_plugstack_conf && cluster_restart_slurmd >/dev/null 2>&1; }
down() { # harvest this cluster's log, then stop it
  tag_jobs "$CLUSTER_TAG"
  harvest_log "$CLUSTER_DIR/log/slurmd-n1.log" "$CLUSTER_TAG"
  finish_cluster
  CLUSTER_DIR=
}

per_gpu_n=(1 4 16)
multi_n=(1 4 16)
[ "$QUICK" = 1 ] && per_gpu_n=(1 4 16) multi_n=(16)

bench_log "launch: cluster A (32 simulated GPUs, 32 CPUs, plugin loaded), $REPS reps"
up A || exit 1
plugin_on || { bench_log "slurmd restart with the plugin failed"; exit 1; }
set_fakes 0
for ((r = 0; r < REPS; r++)); do
  for n in "${per_gpu_n[@]}"; do run_pair per-gpu "$n" 0; done
  for n in "${multi_n[@]}"; do run_pair multi "$n" 0; done
  [ "$QUICK" = 1 ] || run_pair per-gpu 32 0
done

bench_log "launch: slow NVIDIA tools (nvidia-smi ${BENCH_LAT_SMI_MS} ms, daemon start ${BENCH_LAT_START_MS} ms)"
set_fakes tools
slow_reps=$(((REPS + 1) / 2))
for ((r = 0; r < slow_reps; r++)); do
  for n in "${per_gpu_n[@]}"; do run_pair per-gpu "$n" tools; done
  for n in "${multi_n[@]}"; do run_pair multi "$n" tools; done
done
set_fakes 0

bench_log "launch: subprocesses per job (sbatch with marked srun steps)"
call_shapes=("per-gpu 1" "per-gpu 4" "per-gpu 16" "multi 1" "multi 4" "multi 16")
[ "$QUICK" = 1 ] && call_shapes=("per-gpu 4" "multi 16")
for s in "${call_shapes[@]}"; do
  read -r c n <<<"$s"
  count_job_calls "$c" "$n" on
done
count_job_calls per-gpu 4 off

bench_log "launch: the same cluster without the plugin"
plugin_off || { bench_log "slurmd restart without the plugin failed"; exit 1; }
for ((r = 0; r < REPS; r++)); do
  for n in "${per_gpu_n[@]}"; do
    mapfile -t args < <(shape_args per-gpu "$n" off)
    timed_srun launch per-gpu "$n" 0 noplugin "${args[@]}"
  done
done
down

bench_log "launch: cluster B with the shell Prolog=/Epilog= (bench/shell-*.sh) instead of the plugin"
up B "Prolog=$STAGE/shell-prolog.sh
Epilog=$STAGE/shell-epilog.sh
PartitionName=mps Nodes=ALL State=UP" || exit 1
shell_reps=$(((REPS + 1) / 2))
for wait in sleep poll; do
  printf 'MPS_CMD_DIR=%s/\nMPS_DIR_BASE=%s\nMPS_WAIT=%s\nMPS_PARTITION=mps\n' "$BENCH_FAKES" "$STAGE/shell" "$wait" >"$STAGE/shell-mps.conf"
  mkdir -p "$STAGE/shell"
  for ((r = 0; r < shell_reps; r++)); do
    for n in 1 4; do
      # the example starts one daemon for all of a job's GPUs: the multi shape
      mapfile -t args < <(shape_args multi "$n" off)
      timed_srun shell "$wait" "$n" 0 off "${args[@]}"
      timed_srun shell "$wait" "$n" 0 on -p mps "${args[@]}"
    done
  done
done
down
bench_log "launch: done"
