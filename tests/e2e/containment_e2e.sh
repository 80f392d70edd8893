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
# `N passed, M failed`; it fails when fewer than MIN_CASES cases ran.
# Usage: tests/e2e/containment_e2e.sh BUILD_DIR [cgroup|plain|helpers|cgroup-runinjob|cgroup2|cgroup2-job-id-paths ...]
# Env: CLUSTER_PORT_BASE (default 18700), KEEP_CLUSTER_LOGS=1.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"
. "$here/cluster.sh"
build=$(cd "${1:?usage: $0 BUILD_DIR [cgroup|plain|helpers|cgroup-runinjob|cgroup2|cgroup2-job-id-paths ...]}" && pwd)
shift
parts=("$@")
((${#parts[@]})) || parts=(helpers plain cgroup)
export CLUSTER_PORT_BASE=${CLUSTER_PORT_BASE:-18700}
MIN_CASES=0
MIN_CHECKS=0
CASES_RUN=0

STAGE=$(mktemp -d /tmp/unilab-contain.XXXXXX)
chmod 755 "$STAGE"
stage_binaries "$build" "$STAGE"
FAKES=$STAGE/fakes
# The jobs' output files: this run's own dir (sticky, writable by the test
# users). A fixed /tmp name collided across runs: /tmp is shared with the
# Slurm 24.11 root, whose test users have other uids, and Slurm fails a batch
# job whose output file it may not open.
OUT=$STAGE/out
mkdir -p "$OUT" && chmod 1777 "$OUT"
BIN=$STAGE/bin
MPS_OPT=SPANK__SLURM_SPANK_OPTION_unilab_mps_unilab_mps
BG=()

teardown() {
  cluster_down
  local p
  for p in "${BG[@]}"; do kill -9 "$p" 2>/dev/null; done
  for p in $(mps_daemons_under "$STAGE"); do kill -9 "$p" 2>/dev/null; done
  for p in $(mps_processes_under "$STAGE"); do kill -9 "$p" 2>/dev/null; done
  rm -rf "$STAGE"
}
trap teardown EXIT

fake_conf() { # fake_conf [key=value...]: the fakes' knobs (read by a daemon when it starts)
  : >"$FAKES/fake.conf"
  local kv
  for kv in "$@"; do printf '%s\n' "$kv" >>"$FAKES/fake.conf"; done
  chmod 644 "$FAKES/fake.conf"
}
fake_conf

case_begin() {
  CASE_ID=$1
  CASE_FAIL0=$FAIL
  CASES_RUN=$((CASES_RUN + 1))
  echo "-- $1: expect: $2"
}
case_end() {
  local st=PASS
  [ "$FAIL" -eq "$CASE_FAIL0" ] || st=FAIL
  printf 'CASE %s %s %s\n' "$CASE_ID" "$st" "$(printf '%s' "$*" | tr '\n' ' ' | sed -e "s#$STAGE#<tmp>#g" -e 's/  */ /g' | cut -c1-300)"
}

# Every process (any name) whose CUDA_MPS_PIPE_DIRECTORY starts with PREFIX
# and whose command is an MPS binary (the fake daemon and its servers).
mps_processes_under() {
  local prefix=$1 p
  for p in /proc/[0-9]*; do
    [[ $(cat "$p/comm" 2>/dev/null) == nvidia-cuda-mps* ]] || continue
    { tr '\0' '\n' <"$p/environ"; } 2>/dev/null | grep -q "^CUDA_MPS_PIPE_DIRECTORY=$prefix" && echo "${p#/proc/}"
  done
}
children_of() { cat /proc/"$1"/task/*/children 2>/dev/null | tr ' ' '\n' | grep . || true; }
rec_field() { sed -n "s/.*\"$2\": \"\{0,1\}\([^\",]*\)\"\{0,1\},\{0,1\}$/\1/p" "$1" | head -n1; }
cgroup_of() { sed -n "s/^[0-9]*:\([^:]*,\)\{0,1\}$2\(,[^:]*\)\{0,1\}://p" "/proc/$1/cgroup" 2>/dev/null; }

# wait_for SECONDS CMD...: until CMD succeeds (0) or the time is up (1).
wait_for() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS >= deadline)) && return 1
    sleep 0.2
  done
}
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
  printf '%s' "state_dir=$STATE_DIR run_dir=$RUN_DIR nvidia_smi=$FAKES/nvidia-smi mps_control=$FAKES/nvidia-cuda-mps-control start_timeout=10 stop_timeout=3${1:+ $*}"
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

cgroup_part() {
  fake_conf
  bring_up cgroup || { fail "cgroup: cluster up"; cluster_down; return; }

  case_begin contain.cgroup "daemon and MPS server sit in the job's step_extern cgroup (devices and freezer)"
  submit "$(client_cmd 30)"
  find_record || fail "the job's daemon record appears" "$(cat "$OUT/contain-$JOB.out" 2>/dev/null)"
  local d_dev d_frz spid s_dev s_frz
  wait_for 20 has_child "$DPID" || fail "a client made the daemon fork its server"
  spid=$(children_of "$DPID" | head -n1)
  d_dev=$(cgroup_of "$DPID" devices) d_frz=$(cgroup_of "$DPID" freezer)
  s_dev=$(cgroup_of "$spid" devices) s_frz=$(cgroup_of "$spid" freezer)
  expect_contains "daemon's devices cgroup is the job's extern step" "$d_dev|" "/uid_$U1/job_$JOB/step_extern|"
  expect_contains "daemon's freezer cgroup is the job's extern step" "$d_frz|" "/uid_$U1/job_$JOB/step_extern|"
  expect_contains "server's devices cgroup is the job's extern step" "$s_dev|" "/uid_$U1/job_$JOB/step_extern|"
  expect_contains "server's freezer cgroup is the job's extern step" "$s_frz|" "/uid_$U1/job_$JOB/step_extern|"
  case_end "daemon devices=$d_dev freezer=$d_frz; server devices=$s_dev"

  case_begin contain.devices "a process the daemon forks opens only the job's GPU device file"
  local probe own other want=() i
  probe=$(printf '_open_devices %s\n' "${GPU_DEVS[*]}" | as_user unimps1 env CUDA_MPS_PIPE_DIRECTORY="$PIPE" "$FAKES/nvidia-cuda-mps-control" 2>&1)
  for i in 0 1 2 3; do
    if [ "$i" = "$GRES" ]; then want+=("${GPU_DEVS[$i]} ENXIO"); else want+=("${GPU_DEVS[$i]} EPERM"); fi
  done
  expect_eq "the job's GPU is open to the daemon's tree, the node's other GPUs are denied" "$(printf '%s\n' "${want[@]}")" "$probe"
  # The control: the same user outside the job may open every device file,
  # so the EPERM above comes from the job's cgroup.
  other=$(( (GRES + 1) % 4 ))
  own=$(as_user unimps1 bash -c "exec 3<'${GPU_DEVS[$other]}'" 2>&1)
  expect_contains "outside the job the same device file is not denied" "$own" "No such device or address"
  case_end "$(printf '%s' "$probe" | sed "s#$CLUSTER_DIR/dev/##g")"

  case_begin contain.state "the daemon runs with umask 077, cwd /, its own session, sane limits, oom_score_adj 0"
  local umask cwd sid nofile oom
  umask=$(sed -n 's/^Umask:[[:space:]]*//p' "/proc/$DPID/status")
  cwd=$(readlink "/proc/$DPID/cwd")
  sid=$(awk '{sub(/.*\) /, ""); print $4}' "/proc/$DPID/stat")
  nofile=$(awk '/^Max open files/ {print $4 "/" $5}' "/proc/$DPID/limits")
  oom=$(cat "/proc/$DPID/oom_score_adj")
  expect_eq "umask" 0077 "$umask"
  expect_eq "working directory" / "$cwd"
  check "own session (not slurmd's)" test "$sid" != "$(awk '{sub(/.*\) /, ""); print $4}' "/proc/$(cat "$CLUSTER_DIR/state/slurmd-n1.pid")/stat")"
  expect_eq "open files soft limit (NVIDIA: 16384 for the MPS server)" 16384 "${nofile%/*}"
  check "open files hard limit at least the soft one" bash -c '[[ $1 == unlimited || $1 -ge 16384 ]]' _ "${nofile#*/}"
  expect_eq "oom_score_adj" 0 "$oom"
  case_end "umask=$umask cwd=$cwd open-files soft=${nofile%/*} oom_score_adj=$oom"

  case_begin contain.reaped "scancel: no process of the daemon's tree, dir or record is left"
  as_user unimps1 scancel "$JOB"
  wait_job_gone "$JOB" 60 || fail "job $JOB ends"
  expect_tree_gone "$spid"
  case_end "daemon and server gone after scancel$(user_epilog_note)"

  case_begin contain.reaped-stubborn "a daemon that ignores quit and leaves its servers on SIGTERM still leaves nothing"
  fake_conf mps_ignore_quit=1 mps_orphan_servers_on_term=1
  submit "$(client_cmd 30)"
  find_record || fail "the job's daemon record appears"
  wait_for 20 has_child "$DPID" || fail "a client made the daemon fork its server"
  spid=$(children_of "$DPID" | head -n1)
  as_user unimps1 scancel "$JOB"
  wait_job_gone "$JOB" 60 || fail "job $JOB ends"
  expect_tree_gone "$spid"
  fake_conf
  case_end "daemon and orphaned server gone"

  stray_case attack-stray-child "/uid_$U1/job_%J/step_extern"
  KEEP_CLUSTER_LOGS=${KEEP_CLUSTER_LOGS:-0} cluster_down

  case_begin contain.refused "ConstrainDevices=yes without PrologFlags=Contain: --unilab-mps jobs are refused, naming the setting"
  bring_up cgroup none || { fail "cgroup (no Contain): cluster up"; cluster_down; return; }
  local out rc
  out=$(as_user unimps1 srun --immediate=30 --unilab-mps --gres=gpu:1 "$FAKES/fake-cuda-client" --hold 0 2>&1)
  rc=$?
  check "the job fails" test "$rc" -ne 0
  expect_not_contains "no task reached an MPS daemon" "$out" "connected to MPS server"
  expect_contains "slurmd log names the setting" "$(grep 'unilab-mps' "$(slurmd_log)")" "add PrologFlags=Contain"
  expect_eq "no daemon was started" "" "$(mps_processes_under "$RUN_DIR/")"
  case_end "$(grep -o 'unilab-mps: job [0-9]* prolog failed: [^;]*' "$(slurmd_log)" | head -n1)"
  scontrol update nodename=n1 state=resume >/dev/null 2>&1
  KEEP_CLUSTER_LOGS=${KEEP_CLUSTER_LOGS:-0} cluster_down
}

# cgroup v1 with PrologFlags=RunInJob (Slurm 24.05+ only): the Prolog=/Epilog=
# helpers run in the job's extern step and write the daemon into its
# step_extern cgroups at once (its freezer cgroup would be the job level).
cgroup_runinjob_part() {
  fake_conf
  bring_up cgroup RunInJob || { fail "cgroup RunInJob: cluster up"; cluster_down; return; }
  case_begin contain.v1-runinjob "cgroup v1, RunInJob (Prolog=/Epilog= helpers): daemon and MPS server sit in the job's step_extern cgroup"
  submit "$(client_cmd 30)"
  record_or_end_part || return
  local spid d_dev d_frz s_frz
  wait_for 20 has_child "$DPID" || fail "a client made the daemon fork its server"
  spid=$(children_of "$DPID" | head -n1)
  d_dev=$(cgroup_of "$DPID" devices) d_frz=$(cgroup_of "$DPID" freezer) s_frz=$(cgroup_of "$spid" freezer)
  expect_contains "daemon's devices cgroup is the job's extern step" "$d_dev|" "/uid_$U1/job_$JOB/step_extern|"
  expect_contains "daemon's freezer cgroup is the job's extern step" "$d_frz|" "/uid_$U1/job_$JOB/step_extern|"
  expect_contains "server's freezer cgroup is the job's extern step" "$s_frz|" "/uid_$U1/job_$JOB/step_extern|"
  case_end "daemon devices=$d_dev freezer=$d_frz; server freezer=$s_frz"

  case_begin contain.v1-runinjob-reaped "cgroup v1, RunInJob, scancel: no process of the daemon's tree, dir or record is left"
  as_user unimps1 scancel "$JOB"
  wait_job_gone "$JOB" 60 || fail "job $JOB ends"
  expect_tree_gone "$spid"
  case_end "daemon and server gone after scancel$(user_epilog_note)"

  stray_case attack-stray-child-runinjob "/uid_$U1/job_%J/step_extern"

  case_begin contain.v1-runinjob-user-epilog "an Epilog Slurm starts as the job's user (its RunInJob x11 race, made certain here) acts on nothing and fails closed naming the race and the fix; the rerun as root that docs/ADMIN.md gives leaves nothing"
  local wrapper=$CLUSTER_DIR/etc/unilab-mps-epilog.sh msg
  cp "$wrapper" "$wrapper.orig"
  # Every id the user's, as Slurm's run_command leaves them when it forks
  # while the extern step's x11 cleanup has dropped privileges.
  # (Slurm's own race may already have done it: then there is nothing to drop.)
  # The ids it started with go to its output, which slurmd logs on failure.
  sed -i 's|^exec |grep -E "^(Uid\|Gid\|Groups\|CapEff)" /proc/$$/status >\&2\n[ "$(id -u)" = 0 ] \&\& set -- setpriv --reuid="$SLURM_JOB_UID" --regid="$SLURM_JOB_GID" --groups="$SLURM_JOB_GID" --\nexec "$@" |' "$wrapper"
  submit "$(client_cmd 30)"
  record_or_end_part || return
  wait_for 20 has_child "$DPID" || fail "a client made the daemon fork its server"
  spid=$(children_of "$DPID" | head -n1)
  as_user unimps1 scancel "$JOB"
  CLUSTER_FINISH_USER_EPILOGS=0 wait_job_gone "$JOB" 60 || fail "job $JOB ends"
  mv "$wrapper.orig" "$wrapper"
  msg=$(grep -o "unilab-mps-epilog: job $JOB epilog failed: .*" "$(slurmd_log)" | head -n1)
  expect_contains "the epilog says it runs as the user, not root" "$msg" "job $JOB epilog failed: runs as uid $U1 (gid $G1), not root"
  expect_contains "... names the Slurm race" "$msg" "With PrologFlags=RunInJob, Slurm 24.11.0 to 25.11.3 can start the Prolog=/Epilog= as the job's user"
  expect_contains "... and what to run" "$msg" "as root, run unilab-mps-epilog again with the job's SLURM_JOB_ID"
  expect_contains "the node drains" "$(sinfo -h -n n1 -o %T)" "drain"
  check "the record is kept" test -f "$REC"
  cluster_finish_user_epilog "$JOB" || fail "the rerun as root and the resume"
  expect_contains "the rerun as root exits 0" "$(cluster_user_epilogs)" "job $JOB on n1: Slurm ran unilab-mps-epilog as uid $U1, which failed closed (node drained); rerun as root: exit 0"
  expect_tree_gone "$spid"
  expect_eq "n1 is idle again" idle "$(sinfo -h -n n1 -o %T)"
  case_end "${msg:0:120}..."
  KEEP_CLUSTER_LOGS=${KEEP_CLUSTER_LOGS:-0} cluster_down
}

# The v2 line of /proc/PID/cgroup ("0::PATH" -> PATH).
cgroup2_of() { sed -n 's/^0:://p' "/proc/$1/cgroup" 2>/dev/null; }

# v2_job_cgroup HOLD: submits a job whose client holds the server HOLD
# seconds, then checks where Slurm put the job (JOBDIR, read from the batch
# step's own /proc/self/cgroup) and that the daemon (DCG) and its server
# (SCG, pid SPID) sit in that job's extern step. The directory's name is the
# job's SLUID on Slurm 26.05 (SLURM_JOB_SLUID in the job), job_<id> before
# 26.05 or with cgroup.conf CgroupJobIdPaths=yes (CLUSTER_CGROUP_EXTRA).
v2_job_cgroup() {
  local sluid want
  submit 'echo "sluid=${SLURM_JOB_SLUID:-}"; cat /proc/self/cgroup; '"$(client_cmd "$1")"
  record_or_end_part || return 1
  wait_for 20 grep -q '^0::' "$OUT/contain-$JOB.out"
  JOBDIR=$(sed -n 's#^0::\(.*\)/step_batch/.*#\1#p' "$OUT/contain-$JOB.out" | head -n1)
  sluid=$(sed -n 's/^sluid=//p' "$OUT/contain-$JOB.out" | head -n1)
  check "the batch step's cgroup names the job's directory" test -n "$JOBDIR"
  want=job_$JOB
  [[ -n $sluid && ${CLUSTER_CGROUP_EXTRA:-} != *CgroupJobIdPaths=yes* ]] && want=$sluid
  expect_eq "the job's cgroup is named $want (SLUID '${sluid}', CgroupJobIdPaths: ${CLUSTER_CGROUP_EXTRA:-unset})" "$want" "${JOBDIR##*/}"
  wait_for 20 has_child "$DPID" || fail "a client made the daemon fork its server"
  SPID=$(children_of "$DPID" | head -n1)
  DCG=$(cgroup2_of "$DPID") SCG=$(cgroup2_of "$SPID")
  expect_contains "daemon's cgroup is the job's extern step" "$DCG" "${JOBDIR:-?}/step_extern/"
  expect_contains "server's cgroup is the job's extern step" "$SCG" "${JOBDIR:-?}/step_extern/"
}

# v2_end_times SECONDS: after JOB ended SECONDS after the test's last act
# (scancel, or the wait for a normal end): the epilog reported its own time,
# and Slurm did not sit out UnkillableStepTimeout (60 s by default; with
# 25.05+'s teardown a daemon outside step_extern/user would make it wait,
# then drain the node). Sets V2_TIMES for the case's summary.
v2_end_times() {
  local ep
  ep=$(grep -o "job $JOB epilog: [0-9]* daemon(s) stopped in [0-9]* ms" "$(slurmd_log)" | head -n1)
  expect_contains "the epilog reports how long it took" "$ep" "daemon(s) stopped in"
  check "job $JOB was gone $1 s later, well inside UnkillableStepTimeout (60 s)" test "$1" -lt 50
  V2_TIMES="gone in $1 s; ${ep#job $JOB }"
}

# Slurm 26.05.2+: CgroupJobIdPaths=yes names the job's cgroup job_<id> while
# the job still has a SLUID; the prolog finds it all the same.
cgroup2_job_id_paths_part() {
  local shim out
  shim=$(bash "$here/cgroup2/build.sh" "$STAGE") || { fail "cgroup2: the /proc cgroup shim builds"; return; }
  fake_conf
  export CLUSTER_CGROUP_EXTRA=CgroupJobIdPaths=yes
  CLUSTER_DEBUG=${CLUSTER_DEBUG:-debug2} CLUSTER_CGROUP2_SHIM=$shim bring_up cgroup2 ||
    { fail "cgroup2 with CgroupJobIdPaths=yes: cluster up (Slurm 26.05.2+ only)"; unset CLUSTER_CGROUP_EXTRA; cluster_down; return; }
  case_begin contain.v2-job-id-paths "cgroup v2, CgroupJobIdPaths=yes: the job's cgroup is job_<id>; daemon and server in its extern step; nothing left after a normal end"
  if v2_job_cgroup 8; then
    out=$("$BIN/unilab-mps" doctor --node 2>&1)
    expect_contains "doctor --node says how Slurm names job cgroups" "$(grep cgroup-job-dir <<<"$out")" "CgroupJobIdPaths=yes: job cgroups are named job_<id>"
    local t0=$SECONDS
    wait_job_gone "$JOB" 60 || fail "job $JOB ends"
    expect_tree_gone "$SPID"
    expect_eq "node n1 is idle (not drained)" idle "$(sinfo -h -n n1 -N -o %T | sort -u)"
    v2_end_times $((SECONDS - t0))
    case_end "job ${JOBDIR##*/}; daemon $DCG; $(grep -o "job $JOB: daemon [^ ]* (pid [0-9]*): [a-z]*" "$(slurmd_log)" | sed 's/pid [0-9]*/pid N/' | head -n1); $V2_TIMES"
  fi
  unset CLUSTER_CGROUP_EXTRA
  KEEP_CLUSTER_LOGS=${KEEP_CLUSTER_LOGS:-0} cluster_down
}

cgroup2_part() {
  local shim probe want=() i
  shim=$(bash "$here/cgroup2/build.sh" "$STAGE") || { fail "cgroup2: the /proc cgroup shim builds"; return; }
  fake_conf
  # debug2: slurmd logs the output of a Prolog=/Epilog= that succeeded too
  # (the epilog's time, v2_end_times).
  CLUSTER_DEBUG=${CLUSTER_DEBUG:-debug2} CLUSTER_CGROUP2_SHIM=$shim bring_up cgroup2 || { fail "cgroup2: cluster up"; cluster_down; return; }

  case_begin contain.v2-cgroup "cgroup v2, RunInJob: daemon and MPS server sit in the job's extern step"
  v2_job_cgroup 30 || return
  case_end "job ${JOBDIR##*/}; daemon $DCG; server $SCG"

  case_begin contain.v2-devices "cgroup v2: a process the daemon forks opens only the job's GPU device file"
  probe=$(printf '_open_devices %s\n' "${GPU_DEVS[*]}" | as_user unimps1 env CUDA_MPS_PIPE_DIRECTORY="$PIPE" "$FAKES/nvidia-cuda-mps-control" 2>&1)
  for i in 0 1 2 3; do
    if [ "$i" = "$GRES" ]; then want+=("${GPU_DEVS[$i]} ENXIO"); else want+=("${GPU_DEVS[$i]} EPERM"); fi
  done
  expect_eq "the job's GPU is open to the daemon's tree, the node's other GPUs are denied" "$(printf '%s\n' "${want[@]}")" "$probe"
  case_end "$(printf '%s' "$probe" | sed "s#$CLUSTER_DIR/dev/##g")"

  case_begin contain.v2-reaped "cgroup v2, scancel: no process of the daemon's tree, dir or record is left"
  local t0=$SECONDS
  as_user unimps1 scancel "$JOB"
  wait_job_gone "$JOB" 60 || fail "job $JOB ends"
  expect_tree_gone "$SPID"
  expect_eq "node n1 is idle (not drained)" idle "$(sinfo -h -n n1 -N -o %T | sort -u)"
  v2_end_times $((SECONDS - t0))
  case_end "daemon and server gone after scancel; $V2_TIMES$(user_epilog_note)"

  case_begin contain.v2-doctor "cgroup v2, RunInJob: doctor --node passes with the Prolog=/Epilog= helpers and fails without Epilog="
  local out rc
  out=$("$BIN/unilab-mps" doctor --node 2>&1); rc=$?
  expect_eq "doctor --node: exit 0 on this node" 0 "$rc"
  expect_contains "doctor --node: the prolog-helper row names both wrappers" "$out" "Prolog=$CLUSTER_DIR/etc/unilab-mps-prolog.sh and Epilog=$CLUSTER_DIR/etc/unilab-mps-epilog.sh run the helpers"
  sed -i '/^Epilog=/d' "$SLURM_CONF"
  out=$("$BIN/unilab-mps" doctor --node 2>&1); rc=$?
  expect_eq "doctor --node without Epilog=: exit 4 (not ready)" 4 "$rc"
  expect_contains "doctor --node names the missing helper" "$(grep prolog-helper <<<"$out")" "set Epilog= (unilab-mps-epilog)"
  case_end "$(grep -o '\[[a-z]*\] *prolog-helper' <<<"$out")"
  KEEP_CLUSTER_LOGS=${KEEP_CLUSTER_LOGS:-0} cluster_down
}

plain_part() {
  fake_conf
  bring_up plain || { fail "plain: cluster up"; cluster_down; return; }

  case_begin reap.quit-timeout "a client that outlives the job does not keep the daemon: quit -t ends it within stop_timeout"
  local uuid cout cpid spid
  submit "sleep 6"
  find_record || fail "the job's daemon record appears"
  uuid=$(sed -n 's/.*"\(GPU-[0-9a-f-]*\)".*/\1/p' "$REC" | head -n1)
  cout=$STAGE/client.out
  as_user unimps1 env CUDA_MPS_PIPE_DIRECTORY="$PIPE" CUDA_VISIBLE_DEVICES="$uuid" "$FAKES/fake-cuda-client" --hold 60 >"$cout" 2>&1 &
  cpid=$!
  BG+=("$cpid")
  wait_for 10 grep -q "connected to MPS server" "$cout" || fail "the outside client connected" "$(cat "$cout")"
  wait_job_gone "$JOB" 60 || fail "job $JOB ends"
  check_not "daemon pid $DPID is gone" proc_running "$DPID"
  expect_contains "the epilog's quit ended the daemon (not a signal)" "$(grep "job $JOB: daemon" "$(slurmd_log)")" "): quit"
  wait_for 5 grep -q "connection was lost" "$cout"
  expect_contains "the client was cut off" "$(cat "$cout")" "connection was lost"
  case_end "$(grep -o "job $JOB: daemon [^ ]* (pid [0-9]*): [a-z]*" "$(slurmd_log)" | sed 's/pid [0-9]*/pid N/')"

  case_begin reap.orphan-servers "servers that outlive a SIGTERMed daemon are found by their pipe dir and killed"
  fake_conf mps_ignore_quit=1 mps_orphan_servers_on_term=1
  submit "$(client_cmd 4)"
  find_record || fail "the job's daemon record appears"
  wait_for 20 has_child "$DPID" || fail "a client made the daemon fork its server"
  spid=$(children_of "$DPID" | head -n1)
  wait_job_gone "$JOB" 60 || fail "job $JOB ends"
  check_not "daemon pid $DPID is gone" proc_running "$DPID"
  check_not "orphaned server pid $spid is gone" proc_running "${spid:-0}"
  expect_eq "no MPS process of the job" "" "$(mps_processes_under "$RUN_DIR/$JOB.")"
  expect_contains "the epilog says what it killed" "$(grep "unilab-mps: job $JOB" "$(slurmd_log)")" "killed 1 leftover MPS process"
  fake_conf
  case_end "$(grep -o "killed [0-9]* leftover MPS process(es)" "$(slurmd_log)" | tail -n1)"

  case_begin hostile.fill-fs "a job that fills its pipe/log dirs fills only its own 64 MiB tmpfs; another job still starts; the mount goes with the job"
  submit 'dd if=/dev/zero of="$CUDA_MPS_LOG_DIRECTORY/fill" bs=1M count=200 2>&1 | tail -n1; cd "$CUDA_MPS_PIPE_DIRECTORY" && i=0; while touch f$i 2>/dev/null; do i=$((i+1)); done; echo "files=$i"; df -k --output=fstype,size "$CUDA_MPS_LOG_DIRECTORY" | tail -n1 | tr -s " "; sleep 10'
  find_record || fail "the job's daemon record appears"
  wait_for 60 grep -q '^files=' "$OUT/contain-$JOB.out" || fail "the job filled its dirs" "$(cat "$OUT/contain-$JOB.out")"
  local jout other
  jout=$(cat "$OUT/contain-$JOB.out")
  expect_contains "the bytes stopped at the job's own 64 MiB" "$jout" "(67 MB, 64 MiB) copied"
  expect_contains "the job's dirs are a 64 MiB tmpfs" "$jout" "tmpfs 65536"
  check "the job's dir is its own tmpfs mount" grep -q " $RUN_DIR/$(run_entry "$JOB" n1 0) tmpfs " /proc/mounts
  check "the inodes stopped at the job's own limit (4096 with the daemon's files)" test "$(sed -n 's/^files=//p' <<<"$jout")" -lt 4096
  other=$(as_user unimps2 srun --immediate=30 --unilab-mps --gres=gpu:1 "$FAKES/fake-cuda-client" --hold 0 2>&1)
  expect_contains "another user's job starts and reaches its daemon meanwhile" "$other" "connected to MPS server"
  wait_job_gone "$JOB" 60 || fail "job $JOB ends"
  expect_eq "no mount of the job is left" "" "$(grep " $RUN_DIR/$JOB\." /proc/mounts || true)"
  expect_eq "no dir or record of the job" "" "$(ls -A "$RUN_DIR" "$STATE_DIR" 2>/dev/null | grep "^job$JOB\." || true)"
  expect_eq "node n1 is idle" idle "$(sinfo -h -n n1 -N -o %T | sort -u)"
  case_end "$(printf '%s' "$jout" | grep -oE '\([0-9]+ MB, [0-9]+ MiB\) copied|^files=[0-9]+|^tmpfs [0-9]+' | tr '\n' ' ')"

  # Without the private tmpfs (dir_size=off) the epilog itself must remove
  # whatever tree the job left, however deep or wide.
  PLUGIN_SO=$STAGE/unilab_mps.so PLUGIN_ARGS="$(plugin_args dir_size=off)" write_plugstack_conf
  cluster_restart_slurmd >/dev/null 2>&1 || fail "slurmd restarts with dir_size=off"
  case_begin hostile.deep-tree "dir_size=off: a job that leaves a 30,000-level chain and 20,000 files in its dirs: the epilog removes all, the node stays up"
  submit 'cd "$CUDA_MPS_LOG_DIRECTORY" && python3 -c "
import os
for i in range(20000): open(\"f%d\" % i, \"w\").close()
os.chdir(os.environ[\"CUDA_MPS_PIPE_DIRECTORY\"])
for i in range(30000):
    os.mkdir(\"d\"); os.chdir(\"d\")
print(\"built\")
"'
  find_record || fail "the job's daemon record appears"
  wait_job_gone "$JOB" 120 || fail "job $JOB ends"
  expect_contains "the job built its tree" "$(cat "$OUT/contain-$JOB.out" 2>/dev/null)" "built"
  expect_eq "node n1 is idle (not drained)" idle "$(sinfo -h -n n1 -N -o %T | sort -u)"
  expect_eq "no dir or record of the job" "" "$(ls -A "$RUN_DIR" "$STATE_DIR" 2>/dev/null | grep "^job$JOB\." || true)"
  case_end "node $(sinfo -h -n n1 -N -o %T | sort -u); leftovers: $(ls -A "$RUN_DIR" 2>/dev/null | grep -c "^$JOB\.")"
  rm -f "$OUT"/contain-*.out
  KEEP_CLUSTER_LOGS=${KEEP_CLUSTER_LOGS:-0} cluster_down
}

# ------------------------------------------------------------------ helpers part
H=$STAGE/h
helper_env() { # helper_env JOB CMD...: what slurmd gives a prolog/epilog (unimps1, n1, GRES 0)
  local job=$1
  shift
  env -i SLURM_JOB_ID="$job" SLURM_JOB_UID="$U1" SLURM_JOB_GID="$G1" SLURM_JOB_GPUS=0 SLURMD_NODENAME=n1 \
    SLURM_CONF="$H/etc/slurm.conf" "$MPS_OPT=(null)" "$@"
}
plant_record() { # plant_record FILE JOB OWNED_DIR
  cat >"$1" <<EOF
{"schema_version": 1, "name": "job$2.n1.gpu0", "uid": $U1, "gid": $G1, "host": "n1",
 "topology_mode": "single_gpu", "gpu_uuids": ["GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16"],
 "pipe_directory": "$3/pipe", "log_directory": "$3/log", "pid": 1, "process_start_ticks": 1,
 "created_at": 0, "boot_id": "", "state": "running", "job_id": "$2",
 "slurm": {"job_id": "$2", "node": "n1", "mode": "auto", "gres_indices": [0], "node_gpus": []},
 "limits": {"active_thread_percentage": null, "pinned_mem_limit": null}, "owned_directories": ["$3"]}
EOF
}

helpers_part() {
  mkdir -p "$H/dev" "$H/etc" "$H/victim/keep" "$H/run"
  chmod 755 "$H" "$H/dev" "$H/etc" "$H/run"
  mknod -m 666 "$H/dev/nvidia0" c 195 0
  echo "NodeName=n1 Name=gpu File=$H/dev/nvidia0" >"$H/etc/gres.conf"
  : >"$H/etc/slurm.conf"
  echo precious >"$H/victim/keep/file"
  local args out rc

  case_begin trust.world-writable-state "a record planted by a user in a world-writable state dir deletes nothing"
  mkdir -p "$H/ww"
  chmod 1777 "$H/ww"
  SLURM_CONF=/dev/null as_user unimps1 bash -c "$(declare -f plant_record); U1=$U1 G1=$G1; plant_record '$H/ww/job77.n1.gpu0.json' 77 '$H/victim'"
  check "the user could plant its record" test -f "$H/ww/job77.n1.gpu0.json"
  args=("state_dir=$H/ww" "run_dir=$H/run" "nvidia_smi=$FAKES/nvidia-smi" "mps_control=$FAKES/nvidia-cuda-mps-control")
  out=$(helper_env 77 "$BIN/unilab-mps-epilog" "${args[@]}" 2>&1)
  rc=$?
  check "the victim tree is intact" test -f "$H/victim/keep/file"
  check "the epilog reports a failure (exit 1)" test "$rc" -eq 1
  expect_contains "the epilog names the writable state dir" "$out" "writable by group or others"
  case_end "exit $rc: $out"

  case_begin trust.owned-dirs "a root-written record whose owned_directories is not run_dir/<name> removes nothing"
  mkdir -p "$H/state"
  chmod 755 "$H/state"
  plant_record "$H/state/job78.n1.gpu0.json" 78 "$H/victim"
  chmod 644 "$H/state/job78.n1.gpu0.json"
  args=("state_dir=$H/state" "run_dir=$H/run" "nvidia_smi=$FAKES/nvidia-smi" "mps_control=$FAKES/nvidia-cuda-mps-control")
  out=$(helper_env 78 "$BIN/unilab-mps-epilog" "${args[@]}" 2>&1)
  rc=$?
  check "the victim tree is intact" test -f "$H/victim/keep/file"
  expect_contains "the epilog reports the record" "$out" "owned_directories"
  case_end "exit $rc: $out"

  case_begin trust.record-owner "a record file owned by the user is never trusted: the live process it names is not signalled"
  local victim ticks
  victim=$(setpriv --reuid="$U1" --regid="$G1" --init-groups sleep 600 </dev/null >/dev/null 2>&1 & echo $!)
  BG+=("$victim")
  sleep 0.2
  ticks=$(awk '{sub(/.*\) /, ""); print $20}' "/proc/$victim/stat")
  plant_record "$H/state/job79.n1.gpu0.json" 79 "$H/run/job79.n1.gpu0"
  sed -i -e "s/\"pid\": 1,/\"pid\": $victim,/" -e "s/\"process_start_ticks\": 1,/\"process_start_ticks\": $ticks,/" \
    -e "s/\"boot_id\": \"\"/\"boot_id\": \"$(cat /proc/sys/kernel/random/boot_id)\"/" "$H/state/job79.n1.gpu0.json"
  chown unimps1 "$H/state/job79.n1.gpu0.json"
  out=$(helper_env 79 "$BIN/unilab-mps-epilog" "${args[@]}" 2>&1)
  rc=$?
  check "the process the record names was not signalled" proc_running "$victim"
  expect_contains "the epilog says who owns the record" "$out" "owned by uid $U1"
  case_end "exit $rc: $out"
}

for part in "${parts[@]}"; do
  echo "== $part"
  case $part in
    helpers) MIN_CASES=$((MIN_CASES + 3)) MIN_CHECKS=$((MIN_CHECKS + 8)); helpers_part ;;
    plain) MIN_CASES=$((MIN_CASES + 4)) MIN_CHECKS=$((MIN_CHECKS + 18)); plain_part ;;
    cgroup) MIN_CASES=$((MIN_CASES + 7)) MIN_CHECKS=$((MIN_CHECKS + 26)); cgroup_part ;;
    cgroup-runinjob) MIN_CASES=$((MIN_CASES + 4)) MIN_CHECKS=$((MIN_CHECKS + 22)); cgroup_runinjob_part ;;
    cgroup2) MIN_CASES=$((MIN_CASES + 4)) MIN_CHECKS=$((MIN_CHECKS + 14)); cgroup2_part ;;
    cgroup2-job-id-paths) MIN_CASES=$((MIN_CASES + 1)) MIN_CHECKS=$((MIN_CHECKS + 11)); cgroup2_job_id_paths_part ;;
    *) fail "unknown part $part" ;;
  esac
done
echo "containment: $CASES_RUN cases run (at least $MIN_CASES expected)"
[ "$CASES_RUN" -ge "$MIN_CASES" ] && [ "$CASES_RUN" -gt 0 ] || fail "containment: only $CASES_RUN cases ran"
finish
