#!/usr/bin/env bash
# End-to-end: MIG slices as GPUs on a real local Slurm cluster, on a node
# whose GPUs are partly MIG: two whole GPUs (fake minors 2 and 3) and two
# MIG-enabled ones (minors 0 and 1), each cut into a 3g.71gb and a 1g.18gb
# slice (GPU instances 1 and 5, compute instance 0). The fake nvidia-smi
# lists the slices (-L and the table's "MIG devices" block), the fake
# driver's mig-minors numbers their capability files as the driver does.
#
# Parts (each a fresh cluster):
#   handwritten  gres.conf lists the slices with MultipleFiles= (the parent's
#                device file and the two capability files): a slice per job,
#                a slice per task, a whole GPU beside them, =multi over
#                slices refused with the reason in the task's words
#   cgroup       the same on cgroup v1 with ConstrainDevices: each task may
#                open only its own slice's capability files, and its daemon
#                is that slice's (Slurm gives a hand-written MIG GRES the
#                local index 0 there)
#   autodetect   slurmd believes it detected the GPUs (fake_gpus.conf, the
#                stand-in for gpu/nvml that Slurm's gres_gpu.so reads
#                without NVML): the prolog gets CUDA_VISIBLE_DEVICES=MIG-<uuid>
#                and orders the slices otherwise than the driver's GI order,
#                as Slurm 22.05 can: the plugin believes Slurm's pairing
# Usage: tests/e2e/mig_e2e.sh BUILD_DIR [handwritten|cgroup|autodetect ...] (root)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/e2e_lib.sh"  # with tests/lib.sh and cluster.sh
build=$(cd "${1:?usage: $0 BUILD_DIR [parts...]}" && pwd)
shift
parts=("$@")
((${#parts[@]})) || parts=(handwritten cgroup autodetect)
export CLUSTER_PORT_BASE=${CLUSTER_PORT_BASE:-21300}
T0=$SECONDS
require_root
make_stage umig "$build"
ensure_test_users
install -m 755 "$here/task_report.sh" "$BIN/"
REPORT=$BIN/task_report.sh
CLI=$BIN/unilab-mps

# The fakes' GPUs (tests/fakes/gpus.csv) and the slices cut from two of them.
G_WHOLE2=GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16  # index 0, minor 2
G_WHOLE3=GPU-a1b2c3d4-e5f6-4718-9a0b-1c2d3e4f5a6b  # index 2, minor 3
G_P0=GPU-3c8a1d5e-94b2-4f7e-8a61-0b2c9d4e5f60      # index 1, minor 0: MIG
G_P1=GPU-0f1e2d3c-4b5a-4697-8877-66554433aa10      # index 3, minor 1: MIG
A0=MIG-a0a0a0a0-0000-5000-8000-000000000a00 A1=MIG-a1a1a1a1-0000-5000-8000-000000000a01
B0=MIG-b0b0b0b0-0000-5000-8000-000000000b00 B1=MIG-b1b1b1b1-0000-5000-8000-000000000b01
{
  cat "$FAKES/gpus.csv"
  printf 'MIG, 1, %s, 3g.71gb, 0, 1, 0\nMIG, 1, %s, 1g.18gb, 1, 5, 0\n' "$A0" "$A1"
  printf 'MIG, 3, %s, 3g.71gb, 0, 1, 0\nMIG, 3, %s, 1g.18gb, 1, 5, 0\n' "$B0" "$B1"
} >"$FAKES/gpus-mig.csv"
chmod 644 "$FAKES/gpus-mig.csv"
fake_conf "gpu_table=$FAKES/gpus-mig.csv" smi_mig_mode.1=Enabled smi_mig_mode.3=Enabled
# Capability minors, as the driver numbers them: 3 + 135*gpu + 9*gi (+1+ci).
export GPU_MINORS="2 3"
export CLUSTER_MIG="0:12:13:3g.71gb:$A0 0:48:49:1g.18gb:$A1 1:147:148:3g.71gb:$B0 1:183:184:1g.18gb:$B1"
parent_of() { case $1 in "$A0" | "$A1") echo "$G_P0" ;; "$B0" | "$B1") echo "$G_P1" ;; esac; }

field() { printf '%s\n' "$1" | sed -n "s/^$2 $3=//p" | head -n1; }
# srun as unimps1, the task's facts printed by task_report.sh.
run_task() {
  as_user unimps1 env FAKE_CLIENT="$FAKES/fake-cuda-client" GPU_DEVS="${GPU_DEVS:-}" \
    srun --immediate=30 --unilab-mps"${MODE:+=$MODE}" "$@" "$REPORT" 2>&1
}

up() {  # up MODE: a fresh cluster with the plugin (CLUSTER_MIG_FAKE_GPUS as the caller set it)
  cluster_down >/dev/null 2>&1
  rm -rf "$STAGE/c"
  STATE_DIR=$STAGE/c/st RUN_DIR=$STAGE/c/r
  CLUSTER_DIR=$STAGE/c CLUSTER_MODE=$1 CLUSTER_NODES=1 PLUGIN_SO=$STAGE/unilab_mps.so \
    PLUGIN_ARGS="state_dir=$STATE_DIR run_dir=$RUN_DIR nvidia_smi=$FAKES/nvidia-smi driver_proc=$FAKES/driver-proc mps_control=$FAKES/nvidia-cuda-mps-control start_timeout=10 stop_timeout=5" \
    cluster_up || { fail "cluster up ($1)"; return 1; }
}

# One task on one slice: its MIG UUID, its daemon on exactly that slice,
# the record naming the parent, status --job and doctor --node saying so.
slice_case() {
  local tag=$1 out job cvd pid rec
  case_begin "$tag-slice" "a job given a 3g.71gb slice gets its MIG UUID and a daemon on that slice alone; the record names the parent"
  out=$(run_task --gres=gpu:3g.71gb:1)
  job=$(field "$out" T0@n1 JOB)
  cvd=$(field "$out" T0@n1 CVD)
  check "$tag: the task's GPU is a 3g.71gb slice ($cvd)" test "$cvd" = "$A0" -o "$cvd" = "$B0"
  expect_eq "$tag: its daemon serves exactly that slice" "$cvd" "$(field "$out" T0@n1 DAEMON_CVD)"
  expect_contains "$tag: a client joined the daemon" "$(field "$out" T0@n1 CLIENT)" "connected to MPS server"
  case_end "job $job: CVD=$cvd daemon=$(field "$out" T0@n1 DAEMON_CVD)"
  if [ -n "$job" ]; then assert_clean "$tag-slice" "$job"; else fail "$tag-slice: srun printed no job id"; fi
}

per_task_case() {
  local tag=$1 out job c0 c1
  case_begin "$tag-per-task" "two tasks with a 1g.18gb slice each: each task its own slice and daemon"
  out=$(run_task -n2 --gpus-per-task=1g.18gb:1)
  job=$(field "$out" T0@n1 JOB)
  c0=$(field "$out" T0@n1 CVD) c1=$(field "$out" T1@n1 CVD)
  expect_eq "$tag: the two tasks have the two 1g.18gb slices" "$A1 $B1" "$(printf '%s\n' "$c0" "$c1" | sort | tr '\n' ' ' | sed 's/ $//')"
  expect_eq "$tag: task 0's daemon is its slice's" "$c0" "$(field "$out" T0@n1 DAEMON_CVD)"
  expect_eq "$tag: task 1's daemon is its slice's" "$c1" "$(field "$out" T1@n1 DAEMON_CVD)"
  if [ -n "${GPU_DEVS:-}" ]; then
    # Device constraint: each task may open its own slice's capability files only.
    expect_eq "$tag: task 0 may open one slice's capability file" 1 "$(field "$out" T0@n1 ALLOWED | tr ',' '\n' | grep -c .)"
    check "$tag: the two tasks may open different slices" test "$(field "$out" T0@n1 ALLOWED)" != "$(field "$out" T1@n1 ALLOWED)"
  fi
  case_end "job $job: T0 $c0, T1 $c1, allowed $(field "$out" T0@n1 ALLOWED)/$(field "$out" T1@n1 ALLOWED)$([ -n "$job" ] || printf " (srun: %s)" "$(printf "%s" "$out" | head -c 200)")"
  if [ -n "$job" ]; then assert_clean "$tag-per-task" "$job"; else fail "$tag-per-task: srun printed no job id"; fi
}

whole_case() {
  local tag=$1 out job cvd
  case_begin "$tag-whole" "a whole GPU beside the slices: its GPU UUID, as before"
  out=$(run_task --gres=gpu:h200:1)
  job=$(field "$out" T0@n1 JOB)
  cvd=$(field "$out" T0@n1 CVD)
  check "$tag: a whole GPU ($cvd)" test "$cvd" = "$G_WHOLE2" -o "$cvd" = "$G_WHOLE3"
  expect_eq "$tag: its daemon serves it" "$cvd" "$(field "$out" T0@n1 DAEMON_CVD)"
  case_end "job $job: CVD=$cvd"
  if [ -n "$job" ]; then assert_clean "$tag-whole" "$job"; else fail "$tag-whole: srun printed no job id"; fi
}

# A job held with sbatch: status --job and doctor --node while it runs.
status_case() {
  local tag=$1 out job st doc
  case_begin "$tag-status" "status --job names the slice and its parent; doctor --node maps every GRES, slices with their parent"
  out=$(as_user unimps1 sbatch --unilab-mps --gres=gpu:1g.18gb:1 -o /dev/null --wrap "sleep 60" 2>&1)
  job=$(job_of "$out")
  wait_for 30 bash -c "grep -qs '\"state\": \"running\"' $STATE_DIR/job$job.n1.gpu*.json"
  st=$(as_user unimps1 "$CLI" status --job "$job" 2>&1)
  local slice
  slice=$(printf '%s\n' "$st" | grep -oE 'MIG-[0-9a-f-]{36}' | head -n1)
  check "$tag: status --job names a 1g.18gb slice ($slice)" test "$slice" = "$A1" -o "$slice" = "$B1"
  expect_contains "$tag: ... and its parent GPU" "$st" "MIG 1g.18gb of $(parent_of "$slice")"
  doc=$("$CLI" doctor --node 2>&1)
  expect_contains "$tag: doctor --node maps the six GRES" "$doc" "6 GPUs mapped GRES index -> device -> minor -> UUID"
  expect_contains "$tag: doctor --node names a slice's parent and instances" "$doc" "$A1 (MIG 1g.18gb of $G_P0, GPU instance 5, compute instance 0)"
  scancel "$job"
  case_end "job $job: $(printf '%s\n' "$st" | grep -m1 MIG-)"
  if [ -n "$job" ]; then assert_clean "$tag-status" "$job"; else fail "$tag-status: srun printed no job id"; fi
}

handwritten_part() {
  up plain || return
  slice_case handwritten
  per_task_case handwritten
  whole_case handwritten
  status_case handwritten
  local out job
  case_begin handwritten-multi "=multi over two slices: refused (one daemon per MIG device), the task says why, nothing started"
  out=$(MODE=multi run_task --gres=gpu:1g.18gb:2)
  job=$(last_job)
  expect_contains "handwritten: the task names the reason" "$out" "NVIDIA runs MPS on MIG as one daemon per MIG device"
  expect_eq "handwritten: no daemon started" "" "$(mps_daemons_under "$RUN_DIR/")"
  scancel "$job" 2>/dev/null
  wait_job_gone "$job" 60 >/dev/null 2>&1
  node_resume n1 >/dev/null 2>&1
  case_end "$(printf '%s\n' "$out" | grep -m1 -o 'NVIDIA runs MPS on MIG[^;]*')"
}

cgroup_part() {
  up cgroup || return
  # The files Slurm's device cgroup allows or denies, in GRES order: the
  # whole GPUs, then each slice's compute-instance capability file.
  GPU_DEVS="$CLUSTER_DIR/dev/nvidia2 $CLUSTER_DIR/dev/nvidia3"
  for c in 13 49 148 184; do GPU_DEVS+=" $CLUSTER_DIR/dev/nvidia-caps/nvidia-cap$c"; done
  per_task_case cgroup
  slice_case cgroup
  GPU_DEVS=
}

autodetect_part() {
  CLUSTER_MIG_FAKE_GPUS=1 up plain || return
  local out job
  case_begin autodetect-prolog-env "Slurm's prolog names the slices by MIG UUID (CUDA_VISIBLE_DEVICES) in its own order: the daemons follow Slurm"
  out=$(run_task -n2 --gpus-per-task=1g.18gb:1)
  job=$(field "$out" T0@n1 JOB)
  local c0 c1
  c0=$(field "$out" T0@n1 CVD) c1=$(field "$out" T1@n1 CVD)
  expect_eq "autodetect: the two tasks have the two 1g.18gb slices" "$A1 $B1" "$(printf '%s\n' "$c0" "$c1" | sort | tr '\n' ' ' | sed 's/ $//')"
  expect_eq "autodetect: task 0's daemon is its slice's" "$c0" "$(field "$out" T0@n1 DAEMON_CVD)"
  expect_eq "autodetect: task 1's daemon is its slice's" "$c1" "$(field "$out" T1@n1 DAEMON_CVD)"
  # Slurm 22.05 sorts the fake files: minor 1's slices (dev/fake/b) before minor 0's (c).
  expect_contains "autodetect: the slurmd log shows the prolog believed Slurm's pairing" \
    "$(cat "$CLUSTER_DIR"/log/slurmd-n1.log 2>/dev/null)" "as Slurm says"
  case_end "job $job: T0 $c0, T1 $c1"
  assert_clean autodetect-prolog-env "$job"
  whole_case autodetect
}

# Floors: cases, checks per part.
PART_FLOORS[handwritten]="5 25"
PART_FLOORS[cgroup]="2 12"
PART_FLOORS[autodetect]="2 10"
run_parts mig_e2e "${parts[@]}"
finish
