# The e2e suites' own library: `. "$here/e2e_lib.sh"` brings tests/lib.sh
# (checks, finish, test users, staging), cluster.sh (the local Slurm
# cluster) and, here, the stage, the CASE protocol and a suite's parts with
# their floors, record fields read as JSON, job lookups, waits and /proc
# looks. One copy of each; a suite adds only what is its own.
_e2e_lib_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$_e2e_lib_dir/../lib.sh"
. "$_e2e_lib_dir/cluster.sh"

# ------------------------------------------------------------------ the stage
# require_root: the e2e suites create test users and device files, mount
# and run Slurm's daemons; without root they exit 77 (ctest: skipped).
require_root() {
  [ "$(id -u)" = 0 ] || { echo "SKIP: $(basename "$0") needs root (test users, device files, mounts, Slurm's daemons)"; exit 77; }
}
# make_stage PREFIX BUILD: this run's staging dir, removed at exit: $STAGE
# (0755) with the built programs in $BIN and the fakes in $FAKES, world-
# readable (slurmd and the test users run them); $OUT for the jobs' output
# files (1777: /tmp is shared with the chroot roots, whose test users have
# other uids); $CALL_LOG, where the fakes log their calls. PREFIX is short:
# <run_dir>/<entry>/pipe/control_privileged must fit 107 bytes.
make_stage() {
  STAGE=$(mktemp -d "/tmp/$1.XXXXXX")
  chmod 755 "$STAGE"
  stage_binaries "$2" "$STAGE"
  BIN=$STAGE/bin FAKES=$STAGE/fakes OUT=$STAGE/out CALL_LOG=$STAGE/calls.log
  mkdir -p "$OUT" && chmod 1777 "$OUT"
  : >"$CALL_LOG" && chmod 666 "$CALL_LOG"
  fake_conf
  trap stage_down EXIT
}
# At exit: the cluster down, what the suite's own stage_teardown ends (if it
# defines one), every MPS process left under the stage, the stage itself.
stage_down() {
  cluster_down
  if declare -F stage_teardown >/dev/null; then stage_teardown; fi
  local p
  for p in $(mps_daemons_under "$STAGE") $(mps_processes_under "$STAGE"); do kill -9 "$p" 2>/dev/null; done
  rm -rf "$STAGE"
}
# fake_conf [key=value...]: the fakes' knobs (a daemon reads them when it
# starts), their calls logged to $CALL_LOG.
fake_conf() {
  { printf 'call_log=%s\n' "$CALL_LOG"; [ $# -eq 0 ] || printf '%s\n' "$@"; } >"$FAKES/fake.conf"
  chmod 644 "$FAKES/fake.conf"
}

# ------------------------------------------------------------------ cases
# case_begin ID "expected outcome"; checks...; case_end "observed": one line
# `CASE <id> PASS|FAIL <observed>` (scripts/reliability-report builds
# docs/RELIABILITY.md from these and the `expect:` lines). PASS when no
# check failed since case_begin.
CASES=0
case_begin() {
  CASE_ID=$1
  CASE_FAIL0=$FAIL
  echo "-- $1: expect: $2"
}
case_end() {
  CASES=$((CASES + 1))
  local st=PASS
  [ "$FAIL" -eq "$CASE_FAIL0" ] || st=FAIL
  printf 'CASE %s %s %s\n' "$CASE_ID" "$st" "$(obs "$*")"
}
# obs TEXT: one line, the suite's staging dir ($STAGE) and pids masked, bounded.
obs() {
  printf '%s' "$1" | tr '\n' ' ' | sed -e "s#${STAGE:-/nonexistent-stage}#<tmp>#g" -e 's/pid [0-9][0-9]*/pid N/g' -e 's/  */ /g' |
    cut -c1-300
}
one_line() { printf '%s\n' "$1" | grep -c .; }

# ------------------------------------------------------------------ parts
# A suite is parts: PART_FLOORS[part]="CASES CHECKS" is what each declares
# at least; run_parts SUITE PART... runs <part>_part for each (dashes read
# as underscores) and holds the suite to the sum of the floors of the parts
# that ran (cases here, checks in finish). An unknown part is a failure.
declare -A PART_FLOORS=()
run_parts() {
  local suite=$1 part min_cases=0 c k
  shift
  MIN_CHECKS=0
  for part in "$@"; do
    echo "== $part"
    if [ -z "${PART_FLOORS[$part]+x}" ]; then
      fail "$suite: unknown part '$part' (parts: ${!PART_FLOORS[*]})"
      continue
    fi
    read -r c k <<<"${PART_FLOORS[$part]}"
    min_cases=$((min_cases + c))
    MIN_CHECKS=$((MIN_CHECKS + k))
    "${part//-/_}_part"
  done
  echo "$suite: $CASES cases run (at least $min_cases expected)${T0:+, $((SECONDS - T0)) s}"
  if [ "$CASES" -lt "$min_cases" ] || [ "$CASES" -eq 0 ]; then
    fail "$suite: only $CASES cases ran, fewer than the $min_cases its parts declare"
  fi
}

# ------------------------------------------------------------------ records
# rec_field FILE FIELD: a top-level field of a daemon record (JSON), as text
# (strings bare, anything else as JSON); empty when the file or field is
# missing or the file is not JSON.
rec_field() {
  python3 -c 'import json, sys
try:
    v = json.load(open(sys.argv[1])).get(sys.argv[2])
except (OSError, ValueError, AttributeError):
    sys.exit(1)
if v is not None:
    print(v if isinstance(v, str) else json.dumps(v))' "$1" "$2" 2>/dev/null
}

# ------------------------------------------------------------------ jobs
# job_of TEXT: the job id srun or sbatch printed ("Submitted batch job N",
# "srun: job N queued ..."); empty when none.
job_of() { printf '%s' "$1" | sed -n 's/^Submitted batch job \([0-9]*\)$/\1/p;s/.*job \([0-9][0-9]*\).*/\1/p' | head -n1; }
# The newest job the controller knows, in any state.
last_job() { squeue -h -o %i -t all 2>/dev/null | sort -n | tail -1; }

# ------------------------------------------------------------------ waits, /proc
# wait_for SECONDS CMD...: until CMD succeeds (0) or the time is up (1).
wait_for() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS >= deadline)) && return 1
    sleep 0.2
  done
}
start_ticks() { awk '{sub(/.*\) /, ""); print $20}' "/proc/$1/stat"; }
children_of() { cat /proc/"$1"/task/*/children 2>/dev/null | tr ' ' '\n' | grep . || true; }
# Every process whose command is an MPS binary (comm nvidia-cuda-mps*: the
# fake daemon and its servers) and whose CUDA_MPS_PIPE_DIRECTORY starts
# with PREFIX.
mps_processes_under() {
  local prefix=$1 p
  for p in /proc/[0-9]*; do
    [[ $(cat "$p/comm" 2>/dev/null) == nvidia-cuda-mps* ]] || continue
    { tr '\0' '\n' <"$p/environ"; } 2>/dev/null | grep -q "^CUDA_MPS_PIPE_DIRECTORY=$prefix" && echo "${p#/proc/}"
  done
}
# assert_clean TAG JOB: once JOB has left the controller, no daemon process,
# pipe/log directory (under $RUN_DIR) or record (under $STATE_DIR) of it.
assert_clean() {
  local tag=$1 job=$2
  wait_job_gone "$job" 60 >/dev/null 2>&1
  expect_eq "$tag: no daemon process of job $job remains" "" "$(mps_daemons_under "$RUN_DIR/$job.")"
  expect_eq "$tag: no pipe/log dir of job $job remains" "" "$(ls -A "$RUN_DIR" 2>/dev/null | grep "^$job\." || true)"
  expect_eq "$tag: no record of job $job remains" "" "$(ls -A "$STATE_DIR" 2>/dev/null | grep "^job$job\." || true)"
}
# job_daemon_pid STATE_DIR JOB [NODE]: the daemon pid of the job's first
# record (on NODE); empty when there is none.
job_daemon_pid() {
  local f
  for f in "$1"/job"$2".${3:+$3.}*.json; do
    rec_field "$f" pid
    return
  done
}
