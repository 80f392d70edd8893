#!/usr/bin/env bash
# Containment and reaping on a real local Slurm cluster (docs/RELIABILITY.md,
# section "containment"): the job's MPS daemon lives and dies inside the job,
# and root trusts nothing a user can write. Parts:
#   cgroup   cgroup v1 with ConstrainDevices=yes and PrologFlags=Contain:
#            daemon and MPS server in the job's cgroup, only the job's GPU
#            device files open to them, nothing left after the job (also with
#            a daemon that ignores quit and leaves its servers on SIGTERM),
#            the daemon's process state; the same node without Contain
#            refuses --unilab-mps jobs
#   cgroup2  cgroup v2 (Slurm 23.11+, PrologFlags=RunInJob, IgnoreSystemd):
#            daemon and server in the job's extern step, only the job's GPU
#            open to them, nothing left after the job. Not in the default
#            parts: it needs cgroup2 at /sys/fs/cgroup and, on a hybrid
#            machine, the test-only shim of tests/e2e/cgroup2 (README there)
#   cgroup2-job-id-paths  the same with cgroup.conf CgroupJobIdPaths=yes
#            (Slurm 26.05.2+): the job's cgroup is job_<id> again, not the
#            SLUID; the prolog finds it, doctor --node says which, nothing is
#            left after a normal end, the node stays idle
#   cgroup-runinjob  cgroup v1 with PrologFlags=RunInJob (Slurm 24.05+) and
#            the Prolog=/Epilog= helpers: daemon and server in step_extern,
#            nothing left after the job. Not in the default parts (22.05
#            has no RunInJob)
#   plain    no cgroups, so the epilog does the reaping: `quit -t` ends a
#            daemon whose client outlives the job, servers left behind by a
#            SIGTERMed daemon are found and killed, hostile directory trees
#            are removed
#   helpers  the prolog/epilog helpers with records planted where the state
#            dir is world-writable, or naming directories that are not theirs
# Every case prints `CASE <id> PASS|FAIL <observed>` and the suite ends with
# `N passed, M failed`; it fails when fewer cases ran than its parts declare
# (PART_FLOORS, tests/e2e/e2e_lib.sh).
# Usage: tests/e2e/containment_e2e.sh BUILD_DIR [cgroup|plain|helpers|cgroup-runinjob|cgroup2|cgroup2-job-id-paths ...]
# Env: CLUSTER_PORT_BASE (default 18700), KEEP_CLUSTER_LOGS=1.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/e2e_lib.sh"  # with tests/lib.sh and cluster.sh
require_root
build=$(cd "${1:?usage: $0 BUILD_DIR [cgroup|plain|helpers|cgroup-runinjob|cgroup2|cgroup2-job-id-paths ...]}" && pwd)
shift
parts=("$@")
((${#parts[@]})) || parts=(helpers plain cgroup)
export CLUSTER_PORT_BASE=${CLUSTER_PORT_BASE:-18700}

# (A fixed /tmp name for the jobs' output collided across runs: Slurm fails
# a batch job whose output file it may not open. make_stage's $OUT is the
# run's own.)
make_stage unilab-contain "$build"
MPS_OPT=SPANK__SLURM_SPANK_OPTION_unilab_mps_unilab_mps
BG=()
stage_teardown() {
  local p
  for p in "${BG[@]}"; do kill -9 "$p" 2>/dev/null; done
}

cgroup_of() { sed -n "s/^[0-9]*:\([^:]*,\)\{0,1\}$2\(,[^:]*\)\{0,1\}://p" "/proc/$1/cgroup" 2>/dev/null; }

# After JOB: its daemon DPID, the server SPID, every MPS process on its pipe
# dirs, its dirs and its records are gone.
expect_tree_gone() {
  check_not "daemon pid $DPID is gone" proc_running "$DPID"
  check_not "server pid ${1:-?} is gone" proc_running "${1:-0}"
  expect_eq "no MPS process of the job" "" "$(mps_processes_under "$RUN_DIR/$JOB.")"
  expect_eq "no dir or record of the job" "" "$(ls -A "$RUN_DIR" "$STATE_DIR" 2>/dev/null | grep "^job$JOB\." || true)"
}
# "; ..." when the harness had to finish JOB's epilog as root because Slurm
# started it as the job's user (cluster.sh, cluster_finish_user_epilog).
user_epilog_note() {
  cluster_user_epilogs | grep -q "^job $JOB on " && printf '; Slurm started its epilog as the user, which failed closed; finished as root'
}
record_running() { [ -f "$1" ] && grep -q '"state": "running"' "$1"; }
has_child() { [ -n "$(children_of "$1")" ]; }

ensure_test_users
U1=$(id -u unimps1)
G1=$(id -g unimps1)

# ------------------------------------------------------------------ cluster parts
bring_up() { # bring_up MODE [PrologFlags]
  CLUSTER_DIR=$(mktemp -d /tmp/uct-c.XXXXXX)  # short: run_dir/.../pipe/control_privileged must fit 107 bytes
  chmod 755 "$CLUSTER_DIR"
  STATE_DIR=$CLUSTER_DIR/mps-state
  RUN_DIR=$CLUSTER_DIR/mps-run
  GPU_DEVS=("$CLUSTER_DIR/dev/nvidia3" "$CLUSTER_DIR/dev/nvidia1" "$CLUSTER_DIR/dev/nvidia0" "$CLUSTER_DIR/dev/nvidia2")
  # RunInJob (cgroup2): Slurm calls no SPANK job_prolog/job_epilog, so the
  # node runs the Prolog=/Epilog= helpers, as docs/ADMIN.md tells admins to.
  local helpers=
  [[ $1 == cgroup2 || ${2:-} == *RunInJob* ]] && helpers=$BIN
  CLUSTER_MODE=$1 CLUSTER_NODES=1 CLUSTER_PROLOG_FLAGS=${2:-} PLUGIN_SO=$STAGE/unilab_mps.so \
    CLUSTER_PROLOG_HELPERS=$helpers PLUGIN_ARGS="$(plugin_args)" cluster_up
}
plugin_args() { # plugin_args [extra...]
  printf '%s' "state_dir=$STATE_DIR run_dir=$RUN_DIR nvidia_smi=$FAKES/nvidia-smi driver_proc=$FAKES/driver-proc mps_control=$FAKES/nvidia-cuda-mps-control start_timeout=10 stop_timeout=3${1:+ $*}"
}

# submit WRAP...: an --unilab-mps batch job of unimps1 on one GPU; sets JOB.
submit() {
  local out
  out=$(as_user unimps1 sbatch --parsable --unilab-mps --gres=gpu:1 -o "$OUT/contain-%j.out" --wrap "$*" 2>&1)
  JOB=${out%%;*}
  [[ $JOB =~ ^[0-9]+$ ]] || { fail "sbatch failed" "$out"; JOB=; return 1; }
}
# The record of JOB's daemon (one GPU): sets REC, DPID, GRES, PIPE.
find_record() {
  REC=
  wait_for 30 bash -c "ls '$STATE_DIR'/job$JOB.n1.gpu*.json" || return 1
  REC=$(ls "$STATE_DIR"/job"$JOB".n1.gpu*.json | head -n1)
  wait_for 30 record_running "$REC" || return 1
  DPID=$(rec_field "$REC" pid)
  PIPE=$(rec_field "$REC" pipe_directory)
  GRES=${REC##*.gpu}
  GRES=${GRES%.json}
}
# find_record, or else: the failure (with the job's output), the case ended
# and the cluster stopped; non-zero so the part returns (its later cases need
# the daemon).
record_or_end_part() {
  find_record && return 0
  fail "the job's daemon record appears" "$(cat "$OUT/contain-$JOB.out" 2>/dev/null)"
  case_end "no daemon"
  KEEP_CLUSTER_LOGS=${KEEP_CLUSTER_LOGS:-0} cluster_down
  return 1
}
client_cmd() { printf '%s' "srun $FAKES/fake-cuda-client --hold $1"; }

# attack.stray-child (#22 item 4): a process a user injects into the daemon
# before it is contained (PTRACE_SEIZE it, make it double-fork) is outside
# the daemon's tree, so moving the tree never moved it; the fake plants one
# at start (mps_stray_child=1: /bin/sleep, pid in <log dir>/stray.pid).
# The daemon is born contained (the job's step_extern, or a root-owned
# holding cgroup until Slurm makes it), so the stray is in the job's cgroup
# and dies with the job. Arguments: the case id, the tail of the job's
# cgroup path with %J for the job id, and which lines of the stray's
# /proc/PID/cgroup must end there (v1: freezer and devices; v2: "0::").
stray_case() {
  local id=$1 want stray= logd where= line lines=${3:-'^[0-9]+:(freezer|devices):'}
  case_begin "$id" "a process planted outside the daemon's tree before containment (the ptrace window) is in the job's cgroup and dies with the job"
  fake_conf mps_stray_child=1
  submit "sleep 60"
  want=${2//%J/$JOB}
  if find_record; then
    logd=$(rec_field "$REC" log_directory)
    wait_for 20 test -s "$logd/stray.pid" || fail "the fake planted its stray"
    stray=$(cat "$logd/stray.pid" 2>/dev/null)
    check "the stray runs" proc_running "${stray:-0}"
    # The mover acts once Slurm made the step (Contain): the daemon is there first.
    wait_for 20 bash -c "grep -q '$want\$' /proc/$DPID/cgroup" || fail "the daemon reaches the job's cgroup" "$(cat "/proc/$DPID/cgroup" 2>/dev/null)"
    where=$(grep -E "$lines" "/proc/${stray:-0}/cgroup" 2>/dev/null | tr '\n' ' ')
    for line in $where; do
      expect_contains "the stray's cgroup ${line%%:/*} is the job's" "$line|" "$want|"
    done
    check "the stray's cgroups were read" test -n "$where"
  else
    fail "the job's daemon record appears" "$(cat "$OUT/contain-$JOB.out" 2>/dev/null)"
  fi
  as_user unimps1 scancel "$JOB"
  wait_job_gone "$JOB" 60 || fail "job $JOB ends"
  wait_for 10 bash -c "! kill -0 ${stray:-0} 2>/dev/null"
  check_not "the stray is gone with the job" proc_running "${stray:-0}"
  expect_eq "no holding cgroup of the job is left" "" "$(ls -d /sys/fs/cgroup/*/unilab_mps/job_"$JOB" 2>/dev/null)"
  fake_conf
  case_end "stray in: $where"
}

# The parts (each a file of its own), then the run.
for part_file in "$here"/containment/{cgroup,cgroup2,plain,helpers}.sh; do . "$part_file"; done

# Each part's floor: cases, checks.
PART_FLOORS=([helpers]="3 8" [plain]="4 18" [cgroup]="7 26" [cgroup-runinjob]="4 22" [cgroup2]="4 14"
             [cgroup2-job-id-paths]="1 11")
run_parts containment "${parts[@]}"
finish
