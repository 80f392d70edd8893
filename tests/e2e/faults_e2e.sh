#!/usr/bin/env bash
# Reliability and security matrix (docs/RELIABILITY.md): faults survived,
# attacks refused, nothing leaked. Three parts:
#   helpers  the standalone prolog/epilog helpers driven with a Slurm-like
#            environment, as slurmd would run them: for the cases where a
#            whole cluster adds nothing (same run_job_prolog/run_job_epilog)
#   cli      the unilab-mps command as hostile users and as root
#   cluster  a real local Slurm cluster (plain mode) for what needs Slurm:
#            drain/requeue, a failed prolog seen by the job, slurmd restarted
#            mid-job, a daemon SIGKILLed mid-job, the job's environment,
#            option values given to srun/sbatch
# Every case states its expected outcome, checks it, and prints one line
# `CASE <id> PASS|FAIL <observed>` (scripts/reliability-report builds the
# table from them), then `N passed, M failed`.
# Usage: tests/e2e/faults_e2e.sh BUILD_DIR [helpers|cli|cluster ...]
# Env: CLUSTER_PORT_BASE (default 18100), KEEP_CLUSTER_LOGS=1.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"
. "$here/cluster.sh"
build=$(cd "${1:?usage: $0 BUILD_DIR [helpers|cli|cluster ...]}" && pwd)
shift
parts=("$@")
((${#parts[@]})) || parts=(helpers cli cluster)
export CLUSTER_PORT_BASE=${CLUSTER_PORT_BASE:-18100}
T0=$SECONDS

STAGE=$(mktemp -d /tmp/ufl.XXXXXX)  # short: run_dir/.../pipe/control_privileged must fit 107 bytes
chmod 755 "$STAGE"
stage_binaries "$build" "$STAGE"
FAKES=$STAGE/fakes
BIN=$STAGE/bin
CALL_LOG=$STAGE/calls.log
MPS_OPT=SPANK__SLURM_SPANK_OPTION_unilab_mps_unilab_mps
HOST=$(hostname)
SLEEPERS=()

teardown() {
  cluster_down
  local p
  for p in $(mps_daemons_under "$STAGE"); do kill -9 "$p" 2>/dev/null; done
  for p in "${SLEEPERS[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$STAGE"
}
trap teardown EXIT

# fake_conf [key=value...]: the fakes' knobs (the daemon reads them once, at start).
fake_conf() {
  printf 'call_log=%s\n' "$CALL_LOG" >"$FAKES/fake.conf"
  local kv
  for kv in "$@"; do printf '%s\n' "$kv" >>"$FAKES/fake.conf"; done
}
fake_conf
: >"$CALL_LOG"
chmod 666 "$CALL_LOG"

# ---------------------------------------------------------------- cases
# case_begin ID "expected outcome"; checks...; case_end "observed"
case_begin() {
  CASE_ID=$1
  CASE_FAIL0=$FAIL
  echo "-- $1: expect: $2"
}
CASES=0
case_end() {
  CASES=$((CASES + 1))
  local st=PASS
  [ "$FAIL" -eq "$CASE_FAIL0" ] || st=FAIL
  printf 'CASE %s %s %s\n' "$CASE_ID" "$st" "$(obs "$*")"
}
# One line, staging paths and pids masked, bounded.
obs() {
  printf '%s' "$1" | tr '\n' ' ' | sed -e "s#$STAGE#<tmp>#g" -e 's/pid [0-9][0-9]*/pid N/g' -e 's/  */ /g' | cut -c1-300
}
one_line() { printf '%s\n' "$1" | grep -c .; }

# A process that must survive: USER sleeps; prints its pid.
sleeper() {
  setpriv --reuid="$(id -u "$1")" --regid="$(id -g "$1")" --init-groups sleep 600 </dev/null >/dev/null 2>&1 &
  SLEEPERS+=($!)
  echo $!
}
start_ticks() { awk '{sub(/.*\) /, ""); print $20}' "/proc/$1/stat"; }
rec_field() { sed -n "s/.*\"$2\": \"\{0,1\}\([^\",]*\)\"\{0,1\},\{0,1\}$/\1/p" "$1" | head -n1; }

ensure_test_users
U1=$(id -u unimps1) G1=$(id -g unimps1) U2=$(id -u unimps2) G2=$(id -g unimps2)

# An LD_PRELOAD probe and look-alike tools: whoever loads or runs them leaves
# a line in $STAGE/evil.log.
make_evil() {
  [ -e "$STAGE/evil.log" ] && return 0
  local tool
  mkdir -p "$STAGE/evil"
  printf '#include <stdio.h>\n#include <unistd.h>\n__attribute__((constructor)) static void evil(void) { char e[512] = {0}; if (readlink("/proc/self/exe", e, sizeof e - 1) < 0) return; FILE *f = fopen("%s/evil.log", "a"); if (f) { fprintf(f, "%%s uid=%%d\\n", e, (int)getuid()); fclose(f); } }\n' \
    "$STAGE" >"$STAGE/evil/evil.c"
  HAVE_SO=0
  gcc -shared -fPIC -o "$STAGE/evil/evil.so" "$STAGE/evil/evil.c" 2>/dev/null && HAVE_SO=1
  : >"$STAGE/evil.log"
  chmod 666 "$STAGE/evil.log"
  chmod 755 "$STAGE/evil" "$STAGE/evil/evil.so" 2>/dev/null
  for tool in nvidia-smi nvidia-cuda-mps-control; do
    printf '#!/bin/sh\necho "$0" >>%s/evil.log\n' "$STAGE" >"$STAGE/evil/$tool"
    chmod 755 "$STAGE/evil/$tool"
  done
  # Controls: both probes fire when a process does load/run them, so an
  # empty log below means "not reached", not "probe broken".
  env LD_PRELOAD="$STAGE/evil/evil.so" /bin/true 2>/dev/null
  env PATH="$STAGE/evil:/usr/bin:/bin" sh -c 'nvidia-smi' >/dev/null 2>&1
  PROBES_FIRE=0
  grep -q '^/usr/bin/true uid=\|^/bin/true uid=' "$STAGE/evil.log" && grep -qx "$STAGE/evil/nvidia-smi" "$STAGE/evil.log" && PROBES_FIRE=1
  : >"$STAGE/evil.log"
}

# ---------------------------------------------------------------- helpers part
# A node sandbox: fake GPU device files, gres.conf for n1, n2 and this host.
H=$STAGE/h
LONG_NODE=n$(printf 'x%.0s' $(seq 1 80))
setup_helpers() {
  mkdir -p "$H/dev" "$H/etc"
  chmod 755 "$H" "$H/dev" "$H/etc"
  local m n
  for m in 3 1 0 2; do [ -e "$H/dev/nvidia$m" ] || mknod -m 666 "$H/dev/nvidia$m" c 195 "$m"; done
  {
    echo "AutoDetect=off"
    for n in n1 n2 "$HOST" "$LONG_NODE"; do
      for m in 3 1 0 2; do echo "NodeName=$n Name=gpu File=$H/dev/nvidia$m"; done
    done
  } >"$H/etc/gres.conf"
  : >"$H/etc/slurm.conf"
  H_ARGS=("state_dir=$H/state" "run_dir=$H/run" "nvidia_smi=$FAKES/nvidia-smi"
          "mps_control=$FAKES/nvidia-cuda-mps-control" "start_timeout=2" "stop_timeout=3")
  EXTRA_ARGS=()
}

# slurm_env JOB [VAR=value...] CMD...: what slurmd gives a prolog/epilog
# (unimps1's job on n1, GRES 0); later VAR=value win.
slurm_env() {
  local job=$1
  shift
  env -i SLURM_JOB_ID="$job" SLURM_JOB_UID="$U1" SLURM_JOB_GID="$G1" SLURM_JOB_GPUS=0 SLURMD_NODENAME=n1 \
    SLURM_CONF="$H/etc/slurm.conf" "$@"
}
# prolog JOB [VAR=value...]: runs the helper for an --unilab-mps job.
prolog() {
  PRO_OUT=$(slurm_env "$1" "$MPS_OPT=(null)" "${@:2}" "$BIN/unilab-mps-prolog" "${H_ARGS[@]}" "${EXTRA_ARGS[@]}" 2>&1)
  PRO_RC=$?
}
epilog() {
  local t0
  t0=$(date +%s%N)
  EPI_OUT=$(slurm_env "$1" "${@:2}" "$BIN/unilab-mps-epilog" "${H_ARGS[@]}" "${EXTRA_ARGS[@]}" 2>&1)
  EPI_RC=$?
  EPI_MS=$((($(date +%s%N) - t0) / 1000000))
}
# leftovers JOB [STATE RUN]: "D daemons, E dirs, R records" of that job.
leftovers() {
  local job=$1 state=${2:-$H/state} run=${3:-$H/run}
  local d e r
  d=$(mps_daemons_under "$run/$job." | wc -l)
  e=$(ls -A "$run" 2>/dev/null | grep -c "^$job\.")
  r=$(ls -A "$state" 2>/dev/null | grep -c "^job$job\.")
  echo "$d daemons, $e dirs, $r records"
}
expect_nothing_left() { # expect_nothing_left TAG JOB [STATE RUN]
  expect_eq "$1: nothing of job $2 is left" "0 daemons, 0 dirs, 0 records" "$(leftovers "${@:2}")"
}
daemon_pid_of() { rec_field "$H/state/job$1.n1.gpu${2:-0}.json" pid; }
launches_in_log() { grep -c '^nvidia-cuda-mps-control .* -d$' "$CALL_LOG"; }  # front-end runs of -d

prolog_fails_closed() { # prolog_fails_closed TAG JOB NEEDLE
  check "$1: the prolog fails" test "$PRO_RC" -ne 0
  expect_contains "$1: the message says why" "$PRO_OUT" "$3"
  expect_eq "$1: one line" 1 "$(one_line "$PRO_OUT")"
  expect_nothing_left "$1" "$2"
}

helpers_part() {
  setup_helpers

  case_begin prolog-mps-start-fails "nvidia-cuda-mps-control -d fails: prolog fails with the tool's own message; no daemon, dir or record left"
  fake_conf mps_fail_start=1
  prolog 101
  prolog_fails_closed prolog-mps-start-fails 101 "mps_fail_start"
  fake_conf
  case_end "prolog rc=$PRO_RC: $PRO_OUT; $(leftovers 101)"

  case_begin prolog-daemon-answers-late "daemon answers after start_timeout: prolog fails within the timeout naming it; the launched daemon is killed; nothing left"
  fake_conf mps_start_delay_ms=4000
  EXTRA_ARGS=(start_timeout=1)
  local t=$SECONDS
  prolog 102
  local took=$((SECONDS - t))
  EXTRA_ARGS=()
  fake_conf
  prolog_fails_closed prolog-daemon-answers-late 102 "did not answer within 1000 ms"
  check "prolog-daemon-answers-late: gave up within start_timeout (+2 s)" test "$took" -le 3
  case_end "prolog rc=$PRO_RC after ${took}s: $(printf '%s' "$PRO_OUT" | sed 's/pid [0-9][0-9]*/pid N/g' | cut -c1-120)...; $(leftovers 102)"

  local before
  case_begin prolog-second-daemon-fails "2-GPU job, the second daemon fails: the first is stopped again; nothing left"
  # GRES 1 is /dev/nvidia1, minor 1: the fake's GPU-0f1e2d3c (tests/fakes/gpus.csv).
  # The fake fails only that daemon's -d, whichever thread launches first.
  fake_conf mps_fail_start_for=GPU-0f1e2d3c-4b5a-4697-8877-66554433aa10
  before=$(launches_in_log)
  local daemons_before
  daemons_before=$(grep -c '^mps-daemon ' "$CALL_LOG")
  prolog 103 SLURM_JOB_GPUS=0,1
  fake_conf
  prolog_fails_closed prolog-second-daemon-fails 103 "-d failed for daemon 'job103.n1.gpu1'"
  expect_contains "prolog-second-daemon-fails: the message is the failed daemon's own" "$PRO_OUT" "failed to start the MPS control daemon for GPU-0f1e2d3c"
  expect_eq "prolog-second-daemon-fails: two daemons were launched" $((before + 2)) "$(launches_in_log)"
  # The first daemon started and was proven; only the second's failure is told.
  expect_eq "prolog-second-daemon-fails: the first daemon ran" $((daemons_before + 1)) "$(grep -c '^mps-daemon ' "$CALL_LOG")"
  expect_not_contains "prolog-second-daemon-fails: the first daemon was verified (no error of its own)" "$PRO_OUT" "job103.n1.gpu0"
  case_end "prolog rc=$PRO_RC: $(printf '%s' "$PRO_OUT" | sed 's/pid [0-9][0-9]*/pid N/g' | cut -c1-220); launches=$(($(launches_in_log) - before)); $(leftovers 103)"

  case_begin prolog-nvidia-smi-missing "nvidia-smi missing: prolog fails naming the path; no daemon launched; nothing left"
  before=$(launches_in_log)
  EXTRA_ARGS=("nvidia_smi=$STAGE/missing/nvidia-smi")
  prolog 104
  EXTRA_ARGS=()
  prolog_fails_closed prolog-nvidia-smi-missing 104 "cannot execute $STAGE/missing/nvidia-smi"
  expect_eq "prolog-nvidia-smi-missing: no daemon launched" "$before" "$(launches_in_log)"
  case_end "prolog rc=$PRO_RC: $PRO_OUT; $(leftovers 104)"

  case_begin prolog-nvidia-smi-no-driver "nvidia-smi fails with the no-driver message: prolog fails with that message; nothing left"
  fake_conf no_driver=1
  before=$(launches_in_log)
  prolog 105
  fake_conf
  prolog_fails_closed prolog-nvidia-smi-no-driver 105 "couldn't communicate with the NVIDIA driver"
  expect_eq "prolog-nvidia-smi-no-driver: no daemon launched" "$before" "$(launches_in_log)"
  case_end "prolog rc=$PRO_RC: $(printf '%s' "$PRO_OUT" | sed 's/pid [0-9][0-9]*/pid N/g' | cut -c1-160); $(leftovers 105)"

  case_begin prolog-nvidia-smi-garbage "nvidia-smi prints garbage: prolog fails quoting the bad line; nothing left"
  fake_conf garbage=1
  before=$(launches_in_log)
  prolog 106
  fake_conf
  prolog_fails_closed prolog-nvidia-smi-garbage 106 "is not a GPU row"
  expect_eq "prolog-nvidia-smi-garbage: no daemon launched" "$before" "$(launches_in_log)"
  case_end "prolog rc=$PRO_RC: $(printf '%s' "$PRO_OUT" | sed 's/pid [0-9][0-9]*/pid N/g' | cut -c1-160); $(leftovers 106)"

  case_begin prolog-mps-control-missing "nvidia-cuda-mps-control missing: prolog fails naming the path; its dirs and starting record are removed"
  EXTRA_ARGS=("mps_control=$STAGE/missing/nvidia-cuda-mps-control")
  prolog 107
  EXTRA_ARGS=()
  prolog_fails_closed prolog-mps-control-missing 107 "cannot execute $STAGE/missing/nvidia-cuda-mps-control"
  case_end "prolog rc=$PRO_RC: $PRO_OUT; $(leftovers 107)"

  case_begin epilog-daemon-ignores-quit "daemon ignores quit: epilog sends verified SIGTERM within stop_timeout (3 s); outcome terminated; nothing left"
  fake_conf mps_ignore_quit=1
  prolog 110
  fake_conf
  local dpid
  dpid=$(daemon_pid_of 110)
  epilog 110
  expect_eq "epilog-daemon-ignores-quit: epilog exits 0" 0 "$EPI_RC"
  expect_contains "epilog-daemon-ignores-quit: outcome terminated" "$EPI_OUT" "gpu0 (pid $dpid): terminated"
  expect_contains "epilog-daemon-ignores-quit: quit was ignored" "$EPI_OUT" "ignored quit"
  check "epilog-daemon-ignores-quit: done within stop_timeout" test "$EPI_MS" -le 3500
  check_not "epilog-daemon-ignores-quit: the daemon is gone" proc_running "$dpid"
  expect_nothing_left epilog-daemon-ignores-quit 110
  case_end "epilog rc=$EPI_RC in ${EPI_MS} ms: $(printf '%s' "$EPI_OUT" | grep -o 'gpu0 (pid [0-9]*): [a-z]*' | sed 's/ (pid [0-9]*)//' | head -n1), $(printf '%s' "$EPI_OUT" | grep -o 'ignored quit' | head -n1); $(leftovers 110)"

  case_begin epilog-daemon-ignores-quit-and-term "daemon ignores quit and SIGTERM: verified SIGKILL; done within stop_timeout + 1 s; outcome killed; nothing left"
  fake_conf mps_ignore_quit=1 mps_ignore_term=1
  prolog 111
  fake_conf
  dpid=$(daemon_pid_of 111)
  epilog 111
  expect_eq "epilog-daemon-ignores-quit-and-term: epilog exits 0" 0 "$EPI_RC"
  expect_contains "epilog-daemon-ignores-quit-and-term: outcome killed" "$EPI_OUT" "gpu0 (pid $dpid): killed"
  check "epilog-daemon-ignores-quit-and-term: done within stop_timeout + 1 s" test "$EPI_MS" -le 4500
  check_not "epilog-daemon-ignores-quit-and-term: the daemon is gone" proc_running "$dpid"
  expect_nothing_left epilog-daemon-ignores-quit-and-term 111
  case_end "epilog rc=$EPI_RC in ${EPI_MS} ms: $(printf '%s' "$EPI_OUT" | grep -o 'gpu0 (pid [0-9]*): [a-z]*' | sed 's/ (pid [0-9]*)//' | head -n1); $(leftovers 111)"

  # --- records the epilog must not trust: it reports them, never signals
  # what they name, still stops the job's daemon (pid file + /proc proof)
  # and removes them.
  record_case() { # record_case ID JOB MANGLE-FUNCTION NEEDLE "expected"
    local id=$1 job=$2 mangle=$3 needle=$4
    case_begin "$id" "$5"
    prolog "$job"
    local f=$H/state/job$job.n1.gpu0.json dpid
    dpid=$(rec_field "$f" pid)
    "$mangle" "$f"
    epilog "$job"
    expect_eq "$id: epilog exits 0" 0 "$EPI_RC"
    expect_contains "$id: the record is reported as not trusted" "$EPI_OUT" "not trusted"
    expect_contains "$id: with the reason" "$EPI_OUT" "$needle"
    check_not "$id: the job's daemon was still found and stopped" proc_running "$dpid"
    expect_nothing_left "$id" "$job"
    case_end "epilog rc=$EPI_RC: $(printf '%s' "$EPI_OUT" | grep -o 'not trusted[^)]*' | head -n1); daemon $(proc_running "$dpid" && echo alive || echo stopped) ($(printf '%s' "$EPI_OUT" | grep -o 'stopped: [a-z]*' | head -n1)); $(leftovers "$job")"
  }
  truncate_record() { head -c 300 "$1" >"$1.tmp" && mv "$1.tmp" "$1"; }
  corrupt_record() { sed -i 's/"pid": [0-9]*,/"pid": "1; kill -9 1",/' "$1"; }
  old_schema_record() { sed -i 's/"schema_version": 1/"schema_version": 0/' "$1"; }
  other_host_record() { sed -i 's/"host": "n1"/"host": "n2"/' "$1"; }
  record_case record-truncated 120 truncate_record "invalid JSON" \
    "truncated record: never used, reported; the daemon is found through its pid file + /proc and stopped; nothing left; epilog rc 0"
  record_case record-corrupt 121 corrupt_record "field 'pid' has the wrong type" \
    "corrupt record (pid holds a shell command): never used, reported; daemon still stopped; nothing left; epilog rc 0"
  record_case record-old-schema 122 old_schema_record "schema version 0 is not supported" \
    "record of another schema version: never used, reported; daemon still stopped; nothing left; epilog rc 0"
  record_case record-other-host 123 other_host_record "names host 'n2', not node n1" \
    "record of this job naming another host: never used, reported; daemon still stopped; nothing left; epilog rc 0"

  case_begin record-other-host-untouched "the same job's records and daemon of node n2 (shared state dir): n1's epilog leaves them alone"
  prolog 124 SLURMD_NODENAME=n2
  local n2pid
  n2pid=$(rec_field "$H/state/job124.n2.gpu0.json" pid)
  epilog 124
  local n1out=$EPI_OUT n1rc=$EPI_RC
  expect_eq "record-other-host-untouched: epilog exits 0" 0 "$EPI_RC"
  check "record-other-host-untouched: n2's daemon runs" proc_running "$n2pid"
  check "record-other-host-untouched: n2's record is kept" test -f "$H/state/job124.n2.gpu0.json"
  local n2state
  n2state="n2 daemon $(proc_running "$n2pid" && echo alive || echo gone), record $(test -f "$H/state/job124.n2.gpu0.json" && echo kept || echo removed)"
  epilog 124 SLURMD_NODENAME=n2
  expect_nothing_left record-other-host-untouched 124
  case_end "n1 epilog rc=$n1rc, output '$n1out'; $n2state; n2's own epilog then: $(leftovers 124)"

  case_begin record-other-uid "record of this job naming unimps2 and a live unimps2 process (pid + start ticks): that process gets no quit and no signal; the job's daemon is still stopped; nothing left"
  prolog 125
  local f=$H/state/job125.n1.gpu0.json victim
  dpid=$(rec_field "$f" pid)
  victim=$(sleeper unimps2)
  sleep 0.2
  sed -i -e "s/\"uid\": $U1\$/\"uid\": $U2/" -e "s/\"pid\": $dpid,/\"pid\": $victim,/" \
    -e "s/\"process_start_ticks\": [0-9]*/\"process_start_ticks\": $(start_ticks "$victim")/" "$f"
  epilog 125
  expect_eq "record-other-uid: epilog exits 0" 0 "$EPI_RC"
  expect_contains "record-other-uid: reported with the reason" "$EPI_OUT" "names uid $U2, not the job's uid $U1"
  check "record-other-uid: unimps2's process survives" proc_running "$victim"
  check_not "record-other-uid: the job's daemon was stopped" proc_running "$dpid"
  expect_nothing_left record-other-uid 125
  case_end "epilog rc=$EPI_RC: $(printf '%s' "$EPI_OUT" | grep -o 'not trusted[^)]*' | head -n1); unimps2 process $(proc_running "$victim" && echo alive || echo KILLED); job daemon $(proc_running "$dpid" && echo alive || echo stopped); $(leftovers 125)"
  kill "$victim" 2>/dev/null

  case_begin record-pid-reused "daemon gone, its PID now names another process of the job user: epilog signals nothing (pid-reused), removes record and dirs, rc 0"
  # Started first: start times have 10 ms resolution, and a process started
  # in the daemon's own tick is indistinguishable from it (a real PID reuse
  # needs the whole PID space to wrap in between).
  victim=$(sleeper unimps1)
  sleep 0.05
  prolog 126
  f=$H/state/job126.n1.gpu0.json
  dpid=$(rec_field "$f" pid)
  check "record-pid-reused: (the other process started in another clock tick)" test "$(start_ticks "$victim")" != "$(rec_field "$f" process_start_ticks)"
  kill -9 "$dpid"
  sed -i "s/\"pid\": $dpid,/\"pid\": $victim,/" "$f"
  before=$(grep -c 'nvidia-cuda-mps-control uid' "$CALL_LOG")
  epilog 126
  expect_eq "record-pid-reused: epilog exits 0" 0 "$EPI_RC"
  expect_contains "record-pid-reused: stale, pid reused" "$EPI_OUT" "pid-reused"
  expect_contains "record-pid-reused: nothing signalled" "$EPI_OUT" "nothing was signalled"
  check "record-pid-reused: the process now holding the PID survives" proc_running "$victim"
  expect_eq "record-pid-reused: not even a quit was sent" "$before" "$(grep -c 'nvidia-cuda-mps-control uid' "$CALL_LOG")"
  expect_nothing_left record-pid-reused 126
  case_end "epilog rc=$EPI_RC: $(printf '%s' "$EPI_OUT" | grep -o 'no longer running ([a-z-]*)' | head -n1), $(printf '%s' "$EPI_OUT" | grep -o 'nothing was signalled' | head -n1); holder of the PID $(proc_running "$victim" && echo alive || echo KILLED); $(leftovers 126)"
  kill "$victim" 2>/dev/null

  case_begin record-pid-points-elsewhere "a record's pid names another live process of the job user while the job's daemon still runs: that process gets nothing; the daemon is found through its pid file + /proc and stopped; nothing left"
  victim=$(sleeper unimps1)
  sleep 0.05
  prolog 127
  f=$H/state/job127.n1.gpu0.json
  dpid=$(rec_field "$f" pid)
  check "record-pid-points-elsewhere: (the other process started in another clock tick)" test "$(start_ticks "$victim")" != "$(rec_field "$f" process_start_ticks)"
  sed -i "s/\"pid\": $dpid,/\"pid\": $victim,/" "$f"
  epilog 127
  expect_eq "record-pid-points-elsewhere: epilog exits 0" 0 "$EPI_RC"
  check "record-pid-points-elsewhere: the process the record names survives" proc_running "$victim"
  check_not "record-pid-points-elsewhere: the real daemon is stopped" proc_running "$dpid"
  expect_contains "record-pid-points-elsewhere: reported" "$EPI_OUT" "recorded pid $victim is not it, but pid $dpid serves its pipe directory"
  expect_nothing_left record-pid-points-elsewhere 127
  case_end "epilog rc=$EPI_RC: $(printf '%s' "$EPI_OUT" | grep -o 'recorded pid [0-9]* is not it[^:]*' | head -n1); named process $(proc_running "$victim" && echo alive || echo KILLED); daemon $(proc_running "$dpid" && echo alive || echo stopped) ($(printf '%s' "$EPI_OUT" | grep -o 'gpu0 (pid [0-9]*): [a-z]*' | sed 's/ (pid [0-9]*)//' | head -n1)); $(leftovers 127)"
  kill "$victim" 2>/dev/null

  case_begin epilog-twice "epilog run twice: the second run does nothing (rc 0, no output, no tool run)"
  prolog 130
  epilog 130
  local first_rc=$EPI_RC calls
  calls=$(wc -l <"$CALL_LOG")
  epilog 130
  expect_eq "epilog-twice: first run exits 0" 0 "$first_rc"
  expect_eq "epilog-twice: second run exits 0" 0 "$EPI_RC"
  expect_eq "epilog-twice: second run says nothing" "" "$EPI_OUT"
  expect_eq "epilog-twice: second run runs no tool" "$calls" "$(wc -l <"$CALL_LOG")"
  expect_nothing_left epilog-twice 130
  case_end "rc $first_rc then $EPI_RC, second output '${EPI_OUT}', $(( $(wc -l <"$CALL_LOG") - calls )) tool runs; $(leftovers 130)"

  case_begin epilog-without-prolog "epilog on a node where no prolog ran (no state or run dir): rc 0, nothing created, no tool run"
  EXTRA_ARGS=("state_dir=$STAGE/never/state" "run_dir=$STAGE/never/run")
  calls=$(wc -l <"$CALL_LOG")
  epilog 131
  EXTRA_ARGS=()
  expect_eq "epilog-without-prolog: exits 0" 0 "$EPI_RC"
  expect_eq "epilog-without-prolog: says nothing" "" "$EPI_OUT"
  check_not "epilog-without-prolog: creates nothing" test -e "$STAGE/never"
  expect_eq "epilog-without-prolog: runs no tool" "$calls" "$(wc -l <"$CALL_LOG")"
  case_end "rc $EPI_RC, output '${EPI_OUT}', state dir $(test -e "$STAGE/never" && echo created || echo absent)"

  # --- a prolog that dies between launching the daemon and the final record.
  # Recreated by hand: the dirs as the prolog makes them, the daemon launched
  # as the user with exactly start_daemon's environment, and the "starting"
  # record written before the launch.
  crash_setup() { # crash_setup JOB -> CRASH_PIPE, CRASH_REC (record text of a normal start)
    prolog "$1"
    CRASH_REC=$(cat "$H/state/job$1.n1.gpu0.json")
    epilog "$1"
    local d=$H/run/$(run_entry "$1" n1 0)
    install -d -o unimps1 -g unimps1 -m 700 "$d" "$d/pipe" "$d/log"
    CRASH_PIPE=$d/pipe
  }
  crash_launch() {
    local d=${CRASH_PIPE%/pipe}
    setpriv --reuid="$U1" --regid="$G1" --init-groups env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
      CUDA_MPS_PIPE_DIRECTORY="$CRASH_PIPE" CUDA_MPS_LOG_DIRECTORY="$d/log" \
      CUDA_VISIBLE_DEVICES=GPU-a1b2c3d4-e5f6-4718-9a0b-1c2d3e4f5a6b "$FAKES/nvidia-cuda-mps-control" -d
    local i
    for i in $(seq 1 50); do [ -S "$CRASH_PIPE/control" ] && break; sleep 0.05; done
    cat "$CRASH_PIPE/nvidia-cuda-mps-control.pid"
  }
  case_begin crash-before-final-record "prolog died after launching the daemon, only the 'starting' record exists: epilog finds the daemon from its pid file (uid + CUDA_MPS_PIPE_DIRECTORY verified in /proc) and stops it; nothing left"
  crash_setup 140
  printf '%s\n' "$CRASH_REC" | sed -e 's/"pid": [0-9]*/"pid": 0/' -e 's/"process_start_ticks": [0-9]*/"process_start_ticks": 0/' \
    -e 's/"state": "running"/"state": "starting"/' >"$H/state/job140.n1.gpu0.json"
  dpid=$(crash_launch)
  check "crash-before-final-record: the orphan daemon runs" proc_running "$dpid"
  epilog 140
  expect_eq "crash-before-final-record: epilog exits 0" 0 "$EPI_RC"
  expect_contains "crash-before-final-record: stopped through its own pipe" "$EPI_OUT" "gpu0 (pid $dpid): quit"
  check_not "crash-before-final-record: the orphan is gone" proc_running "$dpid"
  expect_nothing_left crash-before-final-record 140
  case_end "epilog rc=$EPI_RC: '$EPI_OUT'; orphan $(proc_running "$dpid" && echo alive || echo stopped); $(leftovers 140)"

  case_begin crash-record-lost "a live daemon of the job with no record at all: epilog finds it in the job's run dir (same /proc proof) and stops it; nothing left"
  crash_setup 141
  dpid=$(crash_launch)
  epilog 141
  expect_eq "crash-record-lost: epilog exits 0" 0 "$EPI_RC"
  expect_contains "crash-record-lost: reported" "$EPI_OUT" "(no record): its daemon pid $dpid"
  check_not "crash-record-lost: the orphan is gone" proc_running "$dpid"
  expect_nothing_left crash-record-lost 141
  case_end "epilog rc=$EPI_RC: $(printf '%s' "$EPI_OUT" | sed 's/pid [0-9][0-9]*/pid N/g' | cut -c1-200); $(leftovers 141)"

  # --- attacks on the root prolog
  local shared=$STAGE/shared victim_dir=$STAGE/victim
  mkdir -p "$shared" "$victim_dir"
  chmod 1777 "$shared"
  chmod 755 "$victim_dir"
  case_begin attack-plant-dir "unimps2 pre-creates the run dir (in a shared sticky dir) as its own: unimps1's prolog refuses it (one line), creates nothing in it, starts no daemon"
  su unimps2 -s /bin/sh -c "mkdir -m 755 $shared/run"
  EXTRA_ARGS=("run_dir=$shared/run")
  prolog 150
  prolog_fails_closed attack-plant-dir 150 "refusing $shared/run: owned by uid $U2"
  expect_eq "attack-plant-dir: nothing created in the planted dir" "" "$(ls -A "$shared/run")"
  case_end "prolog rc=$PRO_RC: $(printf '%s' "$PRO_OUT" | grep -o 'refusing.*' | head -n1); planted dir has $(ls -A "$shared/run" | wc -l) entries"
  su unimps2 -s /bin/sh -c "rmdir $shared/run"

  case_begin attack-plant-symlink "unimps2 plants a symlink where the run dir or state dir will be created: refused (one line), nothing created behind it"
  su unimps2 -s /bin/sh -c "ln -s $victim_dir $shared/run"
  prolog 151
  prolog_fails_closed attack-plant-symlink 151 "symlink"
  local out1=$PRO_OUT
  su unimps2 -s /bin/sh -c "rm $shared/run; ln -s $victim_dir $shared/state"
  EXTRA_ARGS=("state_dir=$shared/state")
  prolog 152
  prolog_fails_closed attack-plant-symlink 152 "symlink"
  expect_eq "attack-plant-symlink: nothing created behind the links" "" "$(ls -A "$victim_dir")"
  case_end "run dir: rc=$PRO_RC $(printf '%s' "$out1" | grep -o 'refusing[^;]*' | head -n1); state dir: $(printf '%s' "$PRO_OUT" | grep -o 'refusing[^;]*' | head -n1); target has $(ls -A "$victim_dir" | wc -l) entries"
  su unimps2 -s /bin/sh -c "rm $shared/state"
  EXTRA_ARGS=()

  case_begin attack-option-values "hostile --unilab-mps* values reaching the prolog (crafted job submission): refused in one line each, nothing run, nothing created"
  local v vals=() rcs="" lens=""
  local long
  long=$(printf 'A%.0s' $(seq 1 100000))
  calls=$(wc -l <"$CALL_LOG")
  for v in 'multi;rm -rf /' '$(touch /tmp/pwned)' '../../../etc' "$long"; do
    prolog 153 "$MPS_OPT=$v"
    rcs+="$PRO_RC "
    lens+="$(printf '%s' "$PRO_OUT" | wc -c) "
    check "attack-option-values: mode '${v:0:20}' refused" test "$PRO_RC" -ne 0
    expect_contains "attack-option-values: mode '${v:0:20}' message" "$PRO_OUT" "invalid --unilab-mps value"
    expect_eq "attack-option-values: mode '${v:0:20}' one line" 1 "$(one_line "$PRO_OUT")"
  done
  for v in '50;id' '1e999' '-5' 'nan' '$(id)'; do
    prolog 153 "${MPS_OPT}_threads=$v"
    rcs+="$PRO_RC "
    check "attack-option-values: threads '$v' refused" test "$PRO_RC" -ne 0
    expect_eq "attack-option-values: threads '$v' one line" 1 "$(one_line "$PRO_OUT")"
  done
  for v in '8G;id' '../x' '99999999999999999999G' '8G$(id)'; do
    prolog 153 "${MPS_OPT}_mem=$v"
    rcs+="$PRO_RC "
    check "attack-option-values: mem '$v' refused" test "$PRO_RC" -ne 0
    expect_eq "attack-option-values: mem '$v' one line" 1 "$(one_line "$PRO_OUT")"
  done
  check_not "attack-option-values: no file named by a value was created" test -e /tmp/pwned
  expect_eq "attack-option-values: no tool ran" "$calls" "$(wc -l <"$CALL_LOG")"
  expect_nothing_left attack-option-values 153
  case_end "13 values, prolog rc: ${rcs}; longest message $(echo "$lens" | tr ' ' '\n' | sort -n | tail -n1) bytes for a 100000-byte value; tools run: $(( $(wc -l <"$CALL_LOG") - calls )); $(leftovers 153)"

  case_begin attack-af-unix-limit "paths that overflow the 108-byte AF_UNIX limit: a long run_dir= refuses to load naming the longest that fits (64); a long node name cannot make one (the daemon's directory name does not hold it)"
  EXTRA_ARGS=("run_dir=$STAGE/$(printf 'r%.0s' $(seq 1 90))")
  prolog 154
  local long_run_out=$PRO_OUT long_run_rc=$PRO_RC
  EXTRA_ARGS=()
  check "attack-af-unix-limit: long run_dir refused" test "$long_run_rc" -ne 0
  expect_contains "attack-af-unix-limit: names the longest run_dir that fits" "$long_run_out" "give a run_dir of at most 64 characters"
  prolog 155 "SLURMD_NODENAME=$LONG_NODE"
  local long_node_rc=$PRO_RC
  expect_eq "attack-af-unix-limit: a long node name starts its daemon" 0 "$long_node_rc"
  epilog 155 "SLURMD_NODENAME=$LONG_NODE"
  expect_eq "attack-af-unix-limit: and its epilog leaves nothing" "0 daemons, 0 dirs, 0 records" "$(leftovers 155)"
  case_end "run_dir: rc=$long_run_rc '$(printf '%s' "$long_run_out" | grep -o 'at most [0-9]* characters')'; node name of ${#LONG_NODE} characters: prolog rc=$long_node_rc; after its epilog $(leftovers 155)"

  case_begin attack-env-injection "LD_PRELOAD, PATH, CUDA_* in the prolog's own environment: no child sees them; the daemon's environ is exactly PATH, CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_LOG_DIRECTORY, CUDA_VISIBLE_DEVICES; only the configured absolute tool paths run"
  make_evil
  calls=$(wc -l <"$CALL_LOG")
  prolog 156 "LD_PRELOAD=$STAGE/evil/evil.so" "PATH=$STAGE/evil:/usr/bin:/bin" CUDA_MPS_PIPE_DIRECTORY=/tmp/x \
    CUDA_MPS_LOG_DIRECTORY=/tmp/y CUDA_VISIBLE_DEVICES=3 HOME=/root LD_LIBRARY_PATH="$STAGE/evil"
  expect_eq "attack-env-injection: prolog exits 0" 0 "$PRO_RC"
  dpid=$(daemon_pid_of 156)
  local env_keys
  env_keys=$(tr '\0' '\n' <"/proc/$dpid/environ" | sed 's/=.*//' | sort | tr '\n' ' ')
  expect_eq "attack-env-injection: daemon environ keys" "CUDA_MPS_LOG_DIRECTORY CUDA_MPS_PIPE_DIRECTORY CUDA_VISIBLE_DEVICES PATH " "$env_keys"
  expect_eq "attack-env-injection: daemon PATH" "PATH=/usr/sbin:/usr/bin:/sbin:/bin" "$(tr '\0' '\n' <"/proc/$dpid/environ" | grep '^PATH=')"
  expect_eq "attack-env-injection: daemon pipe dir is the job's" "CUDA_MPS_PIPE_DIRECTORY=$H/run/$(run_entry 156 n1 0)/pipe" \
    "$(tr '\0' '\n' <"/proc/$dpid/environ" | grep '^CUDA_MPS_PIPE_DIRECTORY=')"
  local ran
  ran=$(tail -n +"$((calls + 1))" "$CALL_LOG" | awk '{print $4}' | sort -u | tr '\n' ' ')
  expect_eq "attack-env-injection: only the configured absolute paths ran" \
    "$FAKES/nvidia-cuda-mps-control $FAKES/nvidia-smi " "$ran"
  expect_eq "attack-env-injection: no tool from the planted PATH ran, no child loaded LD_PRELOAD" "" \
    "$(grep -v "$STAGE/bin/unilab-mps-prolog" "$STAGE/evil.log")"
  [ "$HAVE_SO" = 1 ] || fail "attack-env-injection: could not build the LD_PRELOAD probe (gcc)"
  expect_eq "attack-env-injection: the probes fire (control: true with LD_PRELOAD, nvidia-smi from PATH)" 1 "${PROBES_FIRE:-0}"
  # The prolog itself was started with LD_PRELOAD: the probe reached the helper.
  check "attack-env-injection: the probe library loaded in the prolog itself" grep -q "^$BIN/unilab-mps-prolog uid=0" "$STAGE/evil.log"
  epilog 156
  expect_nothing_left attack-env-injection 156
  case_end "daemon environ keys: ${env_keys}; tools run: ${ran}; children that loaded LD_PRELOAD or ran from PATH: $(grep -cv "$STAGE/bin/unilab-mps-" "$STAGE/evil.log")"

  attack_tmpfs_mount_point
}

# The daemon's directory gets its own tmpfs. Were its mount point the
# user's before the mount, a process of the user could open it in that
# window and, through that descriptor, write below the tmpfs: on the run
# dir's own file system (/run, shared with munged and slurmd), past
# dir_size=. The mount point must be root's, 0700, before, during and after
# the mount: it is made so (mkdir 0700 by root, never chowned) and seen so
# through a non-recursive bind mount of the run dir, which shows what lies
# under the tmpfs. (A racer of the user polling for the new directory from
# Python never hit the window in 3 runs of the old code: the check is the
# owner, not luck.)
attack_tmpfs_mount_point() {
  case_begin attack-tmpfs-mount-point "the mount point under a daemon's private tmpfs is root's 0700 (the user owns only the tmpfs root), so no process of the user can hold it open to write past the tmpfs; nothing left"
  local entry=$H/run/$(run_entry 157 n1 0) under=$STAGE/under shared=0
  # The run dir on a shared mount, as systemd makes / and /run: a mount
  # below it propagates unless it is made private.
  mount --bind "$H/run" "$H/run" && mount --make-shared "$H/run" && shared=1
  check "attack-tmpfs-mount-point: the run dir is a shared mount for this case" test "$shared" = 1
  prolog 157
  expect_eq "attack-tmpfs-mount-point: prolog exits 0" 0 "$PRO_RC"
  check "attack-tmpfs-mount-point: the daemon's dir is a tmpfs mount" grep -q " $entry tmpfs " /proc/mounts
  expect_eq "attack-tmpfs-mount-point: the tmpfs root is the user's, 0700" "$U1 700" "$(stat -c '%u %a' "$entry")"
  # Private propagation: a FUSE mount the user puts below stays in this namespace.
  expect_eq "attack-tmpfs-mount-point: the tmpfs is a private mount" private "$(findmnt -n -o PROPAGATION "$entry")"
  mkdir -p "$under"
  local below=""
  if mount --bind "$H/run" "$under"; then
    below=$(stat -c '%u %a' "$under/$(basename "$entry")")
    expect_eq "attack-tmpfs-mount-point: the mount point under it is root's, 0700" "0 700" "$below"
    check_not "attack-tmpfs-mount-point: the user cannot open the mount point" su unimps1 -s /bin/sh -c "ls $under/$(basename "$entry")"
    umount "$under"
  else
    fail "attack-tmpfs-mount-point: cannot bind-mount $H/run to look under the tmpfs"
  fi
  epilog 157
  expect_eq "attack-tmpfs-mount-point: epilog exits 0" 0 "$EPI_RC"
  check_not "attack-tmpfs-mount-point: the mount is gone" grep -q " $entry tmpfs " /proc/mounts
  expect_nothing_left attack-tmpfs-mount-point 157
  [ "$shared" = 1 ] && umount "$H/run"
  case_end "under the tmpfs: '$below'; epilog rc=$EPI_RC"

  # A user's FUSE mount on pipe/ or log/ (user_allow_other) answers root's
  # opens and stats and can hang them. Stood in for by a root-made tmpfs:
  # the epilog must neither look into it nor leave it (mountinfo, detach).
  case_begin attack-mount-in-daemon-dir "a file system mounted on the daemon's pipe/ and log/ (a user's FUSE where user_allow_other is set): root never looks into it; the epilog detaches it, stops the daemon and leaves nothing, with the private tmpfs and with dir_size=off"
  local job size mounted obs_mount=""
  for job in 158 159; do
    size=""
    [ "$job" = 159 ] && size=dir_size=off
    entry=$H/run/$(run_entry "$job" n1 0)
    EXTRA_ARGS=($size)
    prolog "$job"
    expect_eq "attack-mount-in-daemon-dir ($job ${size:-tmpfs}): prolog exits 0" 0 "$PRO_RC"
    dpid=$(daemon_pid_of "$job")
    mounted=0
    mount -t tmpfs -o size=1m,mode=0700,uid="$U1" stand-in-fuse "$entry/pipe" && mount -t tmpfs -o size=1m,mode=0700,uid="$U1" stand-in-fuse "$entry/log" && mounted=1
    check "attack-mount-in-daemon-dir ($job): pipe/ and log/ are mount points for this case" test "$mounted" = 1
    epilog "$job"
    EXTRA_ARGS=()
    expect_eq "attack-mount-in-daemon-dir ($job): epilog exits 0" 0 "$EPI_RC"
    expect_eq "attack-mount-in-daemon-dir ($job): no mount is left at or below the daemon's dir" "" "$(awk -v d="$entry" '$2 == d || index($2, d "/") == 1' /proc/mounts)"
    check_not "attack-mount-in-daemon-dir ($job): the daemon is gone" proc_running "$dpid"
    expect_nothing_left "attack-mount-in-daemon-dir ($job)" "$job"
    obs_mount+="${size:-tmpfs}: epilog rc=$EPI_RC, $(printf '%s' "$EPI_OUT" | grep -o 'gpu0 (pid [0-9]*): [a-z]*' | sed 's/ (pid [0-9]*)//' | head -n1); "
  done
  case_end "$obs_mount$(leftovers 158), $(leftovers 159)"
}

# ---------------------------------------------------------------- cli part
C=$STAGE/c
cli_part() {
  mkdir -p "$C"
  chmod 755 "$C"
  local u
  for u in unimps1 unimps2; do
    install -d -o "$u" -g "$u" -m 700 "$C/$u-state" "$C/$u-run"
  done
  local B=$BIN/unilab-mps
  export UNILAB_MPS_NVIDIA_SMI=$FAKES/nvidia-smi UNILAB_MPS_CONTROL=$FAKES/nvidia-cuda-mps-control
  local KEEP_VARS="UNILAB_MPS_NVIDIA_SMI UNILAB_MPS_CONTROL UNILAB_MPS_STATE_DIR UNILAB_MPS_RUN_DIR"
  local out rc

  case_begin cli-doctor-orphan "a CLI start that died between launch and final record: doctor reports the orphan daemon with its pid and the command that stops it; stop NAME stops it"
  export UNILAB_MPS_STATE_DIR=$C/unimps1-state UNILAB_MPS_RUN_DIR=$C/unimps1-run
  KEEP_VARS=$KEEP_VARS as_user_env unimps1 "$B" start 0 --name crashed >/dev/null 2>&1
  local f=$C/unimps1-state/crashed.json dpid
  dpid=$(rec_field "$f" pid)
  sed -i -e 's/"pid": [0-9]*/"pid": 0/' -e 's/"process_start_ticks": [0-9]*/"process_start_ticks": 0/' \
    -e 's/"state": "running"/"state": "starting"/' "$f"
  out=$(KEEP_VARS=$KEEP_VARS as_user_env unimps1 "$B" doctor 0 2>&1)
  expect_contains "cli-doctor-orphan: doctor names the orphan and its pid" "$out" "orphan: pid $dpid"
  expect_contains "cli-doctor-orphan: doctor says how to stop it" "$out" "unilab-mps stop crashed"
  local docline
  docline=$(printf '%s\n' "$out" | grep 'daemon crashed')
  out=$(KEEP_VARS=$KEEP_VARS as_user_env unimps1 "$B" stop crashed 2>&1)
  rc=$?
  expect_eq "cli-doctor-orphan: stop exits 0" 0 "$rc"
  check_not "cli-doctor-orphan: the orphan is gone" proc_running "$dpid"
  expect_eq "cli-doctor-orphan: no record left" "" "$(ls -A "$C/unimps1-state")"
  expect_eq "cli-doctor-orphan: no dir left" "" "$(ls -A "$C/unimps1-run")"
  case_end "doctor: '$docline'; stop: rc=$rc '$out'"

  case_begin cli-squat-run-dir "another user squats the run dir (own dir or symlink, in a shared sticky dir) of unimps1 or root: start refuses in one line; nothing is created there"
  local shared=$STAGE/cshared
  mkdir -p "$shared" "$STAGE/ctarget"
  chmod 1777 "$shared"
  chmod 755 "$STAGE/ctarget"
  su unimps2 -s /bin/sh -c "mkdir -m 755 $shared/unilab-mps-$U1; ln -s $STAGE/ctarget $shared/unilab-mps-0; mkdir -m 700 $shared/p; ln -s $STAGE/ctarget $shared/l"
  out=$(UNILAB_MPS_RUN_DIR=$shared/unilab-mps-$U1 KEEP_VARS=$KEEP_VARS as_user_env unimps1 "$B" start 0 2>&1)
  rc=$?
  check "cli-squat-run-dir: unimps1's start fails" test "$rc" -ne 0
  expect_contains "cli-squat-run-dir: names the squatter" "$out" "owned by uid $U2"
  expect_eq "cli-squat-run-dir: one line" 1 "$(one_line "$out")"
  local o1=$out
  out=$(UNILAB_MPS_STATE_DIR=$C/root-state UNILAB_MPS_RUN_DIR=$shared/unilab-mps-0 "$B" start 0 2>&1)
  rc=$?
  check "cli-squat-run-dir: root's start fails" test "$rc" -ne 0
  expect_contains "cli-squat-run-dir: names the symlink" "$out" "symlink"
  local o2=$out
  out=$(KEEP_VARS=$KEEP_VARS as_user_env unimps1 "$B" start 0 --pipe-dir "$shared/p" --log-dir "$shared/l" 2>&1)
  rc=$?
  check "cli-squat-run-dir: explicit pipe/log dirs planted by unimps2 refused" test "$rc" -ne 0
  expect_eq "cli-squat-run-dir: nothing created in the squatted dirs" "" "$(find "$shared/unilab-mps-$U1" "$shared/p" "$STAGE/ctarget" -mindepth 1)"
  expect_eq "cli-squat-run-dir: no daemon" "" "$(mps_daemons_under "$shared")"
  case_end "unimps1: '$o1'; root: '$o2'; --pipe-dir/--log-dir: '$out'"

  case_begin cli-stop-other-users "unimps1 runs stop/stop --all against unimps2's job daemons, root's daemon and forged records naming them: refused or out of scope, nothing signalled, all survive"
  # unimps2's Slurm job daemon on a node named like the host (records in scope by host).
  setup_helpers 2>/dev/null || true
  prolog 170 SLURM_JOB_UID="$U2" SLURM_JOB_GID="$G2" SLURMD_NODENAME="$HOST"
  local p2 prec=$H/state/job170.$HOST.gpu0.json
  p2=$(rec_field "$prec" pid)
  install -d -o root -g root -m 700 "$C/root-state" "$C/root-run"
  UNILAB_MPS_STATE_DIR=$C/root-state UNILAB_MPS_RUN_DIR=$C/root-run "$B" start 1 --name rootd >/dev/null 2>&1
  local p0
  p0=$(rec_field "$C/root-state/rootd.json" pid)
  local results=""
  out=$(KEEP_VARS=$KEEP_VARS as_user_env unimps1 "$B" stop --all --state-dir "$H/state" 2>&1)
  rc=$?
  results+="stop --all on the Slurm state dir: rc=$rc '$(printf '%s' "$out" | head -n1)'; "
  expect_contains "cli-stop-other-users: stop --all sees none of unimps2's" "$out" "no daemon recorded for uid $U1"
  out=$(KEEP_VARS=$KEEP_VARS as_user_env unimps1 "$B" stop "job170.$HOST.gpu0" --state-dir "$H/state" 2>&1)
  rc=$?
  results+="stop unimps2's job daemon by name: rc=$rc; "
  check "cli-stop-other-users: stop by name refused" test "$rc" -ne 0
  # The Slurm store is root's: to unimps1's CLI its record files are not trusted at all (owned by uid 0, not the user).
  expect_contains "cli-stop-other-users: says why it is refused" "$out" "is not trusted (refusing job170.$HOST.gpu0.json: owned by uid 0, not uid $U1"
  expect_eq "cli-stop-other-users: one line" 1 "$(one_line "$out")"
  out=$(KEEP_VARS=$KEEP_VARS as_user_env unimps1 "$B" stop --all --state-dir "$C/root-state" 2>&1)
  rc=$?
  results+="stop --all on root's state dir: rc=$rc '$out'; "
  check "cli-stop-other-users: root's state dir refused" test "$rc" -ne 0
  expect_eq "cli-stop-other-users: one line (root)" 1 "$(one_line "$out")"
  # Forged records in unimps1's own state dir naming unimps2's and root's daemons.
  local pid src name
  for pid in "$p2" "$p0"; do
    src=$prec
    [ "$pid" = "$p0" ] && src=$C/root-state/rootd.json
    name=forged$pid
    sed -e "s/\"name\": \"[^\"]*\"/\"name\": \"$name\"/" -e "s/\"uid\": [0-9]*/\"uid\": $U1/" \
      -e "s/\"host\": \"[^\"]*\"/\"host\": \"$HOST\"/" "$src" >"$C/unimps1-state/$name.json"
    chown unimps1 "$C/unimps1-state/$name.json"
    chmod 600 "$C/unimps1-state/$name.json"
    out=$(KEEP_VARS=$KEEP_VARS as_user_env unimps1 "$B" stop "$name" 2>&1)
    rc=$?
    results+="forged record naming pid of $([ "$pid" = "$p0" ] && echo root || echo unimps2): rc=$rc; "
    expect_eq "cli-stop-other-users: forged record ($name) is stale (exit 3)" 3 "$rc"
    expect_contains "cli-stop-other-users: forged record ($name): nothing signalled" "$out" "nothing was signalled"
  done
  check "cli-stop-other-users: unimps2's daemon survives" proc_running "$p2"
  check "cli-stop-other-users: root's daemon survives" proc_running "$p0"
  # Root pointed at a state dir unimps1 controls refuses to trust it.
  out=$(UNILAB_MPS_STATE_DIR=$C/unimps1-state "$B" stop --all 2>&1)
  rc=$?
  results+="root's stop --all on unimps1's state dir: rc=$rc '$out'"
  check "cli-stop-other-users: root refuses a user's state dir" test "$rc" -ne 0
  expect_contains "cli-stop-other-users: root names the owner" "$out" "owned by uid $U1"
  check "cli-stop-other-users: both daemons still survive" bash -c "kill -0 $p2 && kill -0 $p0"
  case_end "$results; unimps2 daemon $(proc_running "$p2" && echo alive || echo KILLED), root daemon $(proc_running "$p0" && echo alive || echo KILLED)"
  UNILAB_MPS_STATE_DIR=$C/root-state UNILAB_MPS_RUN_DIR=$C/root-run "$B" stop rootd >/dev/null 2>&1
  epilog 170 SLURM_JOB_UID="$U2" SLURM_JOB_GID="$G2" SLURMD_NODENAME="$HOST"
  unset UNILAB_MPS_STATE_DIR UNILAB_MPS_RUN_DIR

  attack_doctor_stale_pid
}

# slurmd died and left its pid file (22.05 removes it only on a clean exit);
# unimps1 forked until it owned that pid, running its own ~/slurmd. Root's
# `doctor --node` must neither run that binary nor call it slurmd; nor read
# a pid file the user wrote or links. The binary leaves a marker whenever
# it runs with -V, and runs so once as the user first (the probe fires).
attack_doctor_stale_pid() {
  local D=$C/doctor out rc results="" uhome=$C/doctor/home
  mkdir -p "$D"
  install -d -o unimps1 -g "$G1" -m 755 "$uhome"
  printf '#include <stdio.h>\n#include <string.h>\n#include <unistd.h>\nint main(int c, char **v) { if (c > 1 && !strcmp(v[1], "-V")) { FILE *f = fopen("%s/marker", "a"); if (f) { fprintf(f, "uid=%%d euid=%%d\\n", (int)getuid(), (int)geteuid()); fclose(f); } puts("slurm 22.05.8"); return 0; } sleep(600); return 0; }\n' \
    "$D" >"$D/fake-slurmd.c"
  case_begin attack-doctor-stale-slurmd-pid "a stale slurmd pid file whose pid a user's ~/slurmd now owns, and a pid file the user wrote or symlinked: doctor --node as root runs no user binary (marker stays empty), reports slurmd as not proven running, says why"
  if ! gcc -o "$uhome/slurmd" "$D/fake-slurmd.c" 2>"$D/gcc.err"; then
    check "attack-doctor-stale-slurmd-pid: gcc builds the user's binary ($(head -c 200 "$D/gcc.err"))" false
    case_end "no compiler"
    return
  fi
  chown unimps1 "$uhome/slurmd"
  : >"$D/marker"
  chmod 666 "$D/marker"
  su unimps1 -s /bin/sh -c "$uhome/slurmd -V" >/dev/null
  expect_eq "attack-doctor-stale-slurmd-pid: control: the user's binary leaves its marker when run" "uid=$U1 euid=$U1" "$(cat "$D/marker")"
  : >"$D/marker"
  setpriv --reuid="$U1" --regid="$G1" --init-groups "$uhome/slurmd" </dev/null >/dev/null 2>&1 &
  local upid=$!
  SLEEPERS+=("$upid")
  local i
  for ((i = 0; i < 50; i++)); do [ "$(cat "/proc/$upid/comm" 2>/dev/null)" = slurmd ] && break; sleep 0.1; done
  echo "$upid" >"$D/slurmd.pid"  # root's stale pid file, now naming the user's process
  printf 'ClusterName=c\nSlurmdPidFile=%s/slurmd.pid\nNodeName=n1 NodeHostname=%s Gres=gpu:1\n' "$D" "$HOST" >"$D/slurm.conf"
  out=$("$BIN/unilab-mps" doctor --node --slurm-conf "$D/slurm.conf" --node-name n1 2>&1)
  results+="stale pid: marker '$(cat "$D/marker")'; $(printf '%s\n' "$out" | grep -m1 ' slurmd ') "
  expect_eq "attack-doctor-stale-slurmd-pid: root ran no user binary (marker empty)" "" "$(cat "$D/marker")"
  expect_contains "attack-doctor-stale-slurmd-pid: slurmd line says the pid is a user's" "$out" "runs as uid $U1, not root"
  expect_not_contains "attack-doctor-stale-slurmd-pid: no version from the user's binary" "$out" "[ok] slurm-version"
  # The pid file itself in the user's hands: written by the user, or a symlink the user made.
  install -d -o unimps1 -g "$G1" -m 755 "$D/u"
  su unimps1 -s /bin/sh -c "echo $upid >$D/u/slurmd.pid; ln -s $D/slurmd.pid $D/u/link.pid"
  local pf
  for pf in "$D/u/slurmd.pid" "$D/u/link.pid"; do
    sed -i "s#^SlurmdPidFile=.*#SlurmdPidFile=$pf#" "$D/slurm.conf"
    out=$("$BIN/unilab-mps" doctor --node --slurm-conf "$D/slurm.conf" --node-name n1 2>&1)
    results+="$(basename "$pf"): $(printf '%s\n' "$out" | grep -m1 ' slurmd ') "
    expect_contains "attack-doctor-stale-slurmd-pid: $(basename "$pf") is not read" "$out" "cannot tell whether slurmd runs: $pf"
  done
  expect_eq "attack-doctor-stale-slurmd-pid: still no user binary run" "" "$(cat "$D/marker")"
  kill "$upid" 2>/dev/null
  case_end "$results"
}

# ---------------------------------------------------------------- cluster part
CL_ARGS=()
cluster_part() {
  CLUSTER_DIR=$STAGE/cluster
  STATE_DIR=$CLUSTER_DIR/mps-state
  RUN_DIR=$CLUSTER_DIR/mps-run
  export PLUGIN_SO=$STAGE/unilab_mps.so
  export PLUGIN_ARGS="state_dir=$STATE_DIR run_dir=$RUN_DIR nvidia_smi=$FAKES/nvidia-smi mps_control=$FAKES/nvidia-cuda-mps-control start_timeout=2 stop_timeout=3"
  CLUSTER_MODE=plain CLUSTER_NODES=1 cluster_up || { fail "cluster: up"; return; }
  local u=unimps1 out rc job
  local outd=$STAGE/out
  mkdir -p "$outd"
  chmod 1777 "$outd"
  make_evil

  # Waits for the job's running record; prints its daemon pid.
  running_pid() {
    local i
    for i in $(seq 1 100); do
      grep -qs '"state": "running"' "$STATE_DIR"/job"$1".n1.*.json && break
      sleep 0.1
    done
    sed -n 's/.*"pid": \([0-9]*\).*/\1/p' "$STATE_DIR"/job"$1".n1.*.json 2>/dev/null | head -n1
  }
  job_of() { printf '%s' "$1" | sed -n 's/^Submitted batch job \([0-9]*\)$/\1/p' | head -n1; }
  last_job() { squeue -h -o %i -t all 2>/dev/null | sort -n | tail -1; }
  node_state() { sinfo -h -n n1 -N -o '%T' 2>/dev/null | sort -u | tr '\n' ' ' | sed 's/ $//'; }
  slurmd_lines() { grep -hE "unilab-mps: job $1[: ]" "$(slurmd_log)" | sed 's/^\[[^]]*\] //'; }
  cluster_clean() { # cluster_clean TAG JOB
    wait_job_gone "$2" 60 >/dev/null 2>&1
    expect_eq "$1: nothing of job $2 is left" "0 daemons, 0 dirs, 0 records" "$(leftovers "$2" "$STATE_DIR" "$RUN_DIR")"
    expect_eq "$1: node n1 is idle (not drained)" idle "$(node_state)"
  }

  case_begin cluster-daemon-killed "the daemon is SIGKILLed mid-job: the job's end runs the epilog, which reports it gone, signals nothing, cleans everything; the node is not drained"
  # Kill only once the batch script runs: killed earlier, the script's own
  # task_init would (rightly) refuse to start without its daemon.
  local started=$outd/daemon-killed.started
  out=$(as_user $u sbatch --unilab-mps --gres=gpu:1 -o /dev/null --wrap "touch $started; sleep 300" 2>&1)
  job=$(job_of "$out")
  local dpid i
  dpid=$(running_pid "$job")
  for i in $(seq 1 100); do [ -e "$started" ] && break; sleep 0.1; done
  check "cluster-daemon-killed: the batch script runs" test -e "$started"
  check "cluster-daemon-killed: the daemon runs" proc_running "$dpid"
  kill -9 "$dpid"
  local calls
  calls=$(grep -c 'nvidia-cuda-mps-control uid' "$CALL_LOG")
  scancel "$job"
  cluster_clean cluster-daemon-killed "$job"
  expect_contains "cluster-daemon-killed: slurmd log says it was gone" "$(slurmd_lines "$job")" "no longer running (gone)"
  expect_eq "cluster-daemon-killed: nothing was sent to the dead daemon's pipe" "$calls" "$(grep -c 'nvidia-cuda-mps-control uid' "$CALL_LOG")"
  case_end "slurmd: '$(slurmd_lines "$job" | grep -o 'daemon [^ ]* (pid [0-9]*) is no longer running ([a-z-]*)' | head -n1)'; $(leftovers "$job" "$STATE_DIR" "$RUN_DIR"); node $(node_state)"

  case_begin cluster-daemon-ignores-quit-and-term "a daemon that ignores quit and SIGTERM at job end: SIGKILLed within stop_timeout; job completes; node not drained; nothing left"
  fake_conf mps_ignore_quit=1 mps_ignore_term=1
  out=$(as_user $u sbatch --unilab-mps --gres=gpu:1 -o /dev/null --wrap "sleep 1" 2>&1)
  job=$(job_of "$out")
  dpid=$(running_pid "$job")
  fake_conf
  cluster_clean cluster-daemon-ignores-quit-and-term "$job"
  expect_contains "cluster-daemon-ignores-quit-and-term: killed" "$(slurmd_lines "$job")" "gpu0 (pid $dpid): killed"
  check_not "cluster-daemon-ignores-quit-and-term: the daemon is gone" proc_running "$dpid"
  case_end "slurmd: '$(slurmd_lines "$job" | grep -o 'daemon [^ ]* (pid [0-9]*): [a-z]*' | head -n1)'; $(leftovers "$job" "$STATE_DIR" "$RUN_DIR"); node $(node_state)"

  case_begin cluster-prolog-fails-optional "optional plugin (the documented install), the daemon fails to start: Slurm runs the job anyway, so every task and the batch script fail before exec with a message naming the failed prolog and its reason; the slurmd log has the reason; node not drained; nothing left"
  fake_conf mps_fail_start=1
  out=$(as_user $u srun --immediate=20 --unilab-mps --gres=gpu:1 -n1 echo TASK-RAN 2>&1)
  rc=$?
  job=$(last_job)
  check "cluster-prolog-fails-optional: srun fails" test "$rc" -ne 0
  expect_not_contains "cluster-prolog-fails-optional: the task never ran" "$out" "TASK-RAN"
  expect_contains "cluster-prolog-fails-optional: the user is pointed at the prolog" "$out" "prolog failed"
  expect_contains "cluster-prolog-fails-optional: the task's message carries the prolog's reason" "$out" "the job prolog failed there: "
  expect_contains "cluster-prolog-fails-optional: that reason is the tool's own" "$out" "mps_fail_start"
  expect_contains "cluster-prolog-fails-optional: slurmd log has the tool's reason" "$(slurmd_lines "$job")" "mps_fail_start"
  local srun_msg
  srun_msg=$(printf '%s\n' "$out" | grep -o 'no MPS daemon was started[^:]*' | head -n1)
  cluster_clean cluster-prolog-fails-optional "$job"
  local outf=$outd/batch-fail.out
  out=$(as_user $u sbatch --wait --unilab-mps --gres=gpu:1 -o "$outf" --wrap "echo SCRIPT-RAN" 2>&1)
  local bjob
  bjob=$(job_of "$out")
  local bstate
  bstate=$(scontrol show job "$bjob" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
  expect_not_contains "cluster-prolog-fails-optional: the batch script never ran" "$(cat "$outf" 2>/dev/null)" "SCRIPT-RAN"
  expect_eq "cluster-prolog-fails-optional: the batch job failed" FAILED "$bstate"
  fake_conf
  cluster_clean cluster-prolog-fails-optional "$bjob"
  case_end "srun rc=$rc '$srun_msg...'; batch job $bstate, script output '$(cat "$outf" 2>/dev/null | head -c 80)'; slurmd: '$(slurmd_lines "$job" | grep -o 'prolog failed: .*' | cut -c1-110)'; $(leftovers "$job" "$STATE_DIR" "$RUN_DIR"); node $(node_state)"

  case_begin cluster-prolog-late-optional "the daemon answers after start_timeout (2 s): prolog gives up, kills it, the task fails naming the prolog; nothing left"
  fake_conf mps_start_delay_ms=5000
  out=$(as_user $u srun --immediate=20 --unilab-mps --gres=gpu:1 -n1 echo TASK-RAN 2>&1)
  rc=$?
  job=$(last_job)
  fake_conf
  check "cluster-prolog-late-optional: srun fails" test "$rc" -ne 0
  expect_not_contains "cluster-prolog-late-optional: the task never ran" "$out" "TASK-RAN"
  expect_contains "cluster-prolog-late-optional: slurmd log names start_timeout" "$(slurmd_lines "$job")" "did not answer within 2000 ms"
  cluster_clean cluster-prolog-late-optional "$job"
  case_end "srun rc=$rc; slurmd: '$(slurmd_lines "$job" | grep -o "MPS daemon '[^']*' did not answer within [0-9]* ms" | head -n1)'; $(leftovers "$job" "$STATE_DIR" "$RUN_DIR"); node $(node_state)"

  case_begin cluster-prolog-fails-required "required plugin, the daemon fails to start: the prolog fails closed; Slurm drains the node (Prolog error) and requeues the job held; nothing left; scancel + node_resume recover"
  PLUGIN_REQUIRED=1 write_plugstack_conf && cluster_restart_slurmd
  fake_conf mps_fail_start=1
  out=$(as_user $u sbatch --unilab-mps --gres=gpu:1 -o /dev/null --wrap "echo SCRIPT-RAN" 2>&1)
  job=$(job_of "$out")
  local i reason="" jreason=""
  for i in $(seq 1 60); do
    reason=$(sinfo -h -n n1 -N -o '%T %E' | sort -u | head -n1)
    jreason=$(squeue -h -j "$job" -o '%T %r' 2>/dev/null)
    [[ $reason == drained* && $jreason == *held* ]] && break
    sleep 0.5
  done
  fake_conf
  expect_eq "cluster-prolog-fails-required: node drained by the prolog" "drained Prolog error" "$reason"
  expect_eq "cluster-prolog-fails-required: job requeued held" "PENDING launch failed requeued held" "$jreason"
  expect_contains "cluster-prolog-fails-required: slurmd log has the reason" "$(slurmd_lines "$job")" "mps_fail_start"
  expect_eq "cluster-prolog-fails-required: nothing left" "0 daemons, 0 dirs, 0 records" "$(leftovers "$job" "$STATE_DIR" "$RUN_DIR")"
  scancel "$job"
  wait_job_gone "$job" 60 >/dev/null 2>&1
  node_resume n1 >/dev/null 2>&1
  expect_eq "cluster-prolog-fails-required: node back to idle" idle "$(node_state)"
  PLUGIN_REQUIRED=0 write_plugstack_conf && cluster_restart_slurmd
  case_end "node '$reason', job '$jreason'; $(leftovers "$job" "$STATE_DIR" "$RUN_DIR"); after scancel + node_resume: $(node_state)"

  case_begin cluster-slurmd-restart "slurmd restarted while the job runs: the job keeps running, its daemon too; at the end the new slurmd's epilog finds and stops it; nothing left"
  out=$(as_user $u sbatch --unilab-mps --gres=gpu:1 -o /dev/null --wrap "sleep 300" 2>&1)
  job=$(job_of "$out")
  dpid=$(running_pid "$job")
  check "cluster-slurmd-restart: the daemon runs" proc_running "$dpid"
  restart_slurmd_busy n1 || fail "cluster-slurmd-restart: slurmd restart"
  local jstate
  jstate=$(squeue -h -j "$job" -o %T 2>/dev/null)
  expect_eq "cluster-slurmd-restart: the job still runs" RUNNING "$jstate"
  check "cluster-slurmd-restart: the daemon still runs" proc_running "$dpid"
  scancel "$job"
  cluster_clean cluster-slurmd-restart "$job"
  expect_contains "cluster-slurmd-restart: the epilog stopped it" "$(slurmd_lines "$job")" "gpu0 (pid $dpid): quit"
  case_end "after restart job $jstate, daemon survived; epilog: '$(slurmd_lines "$job" | grep -o 'daemon [^ ]* (pid [0-9]*): [a-z]*' | head -n1)'; $(leftovers "$job" "$STATE_DIR" "$RUN_DIR"); node $(node_state)"

  case_begin cluster-env-injection "a job submitted with LD_PRELOAD, PATH and CUDA_MPS_* exported: the daemon's environ is exactly PATH=/usr/sbin:/usr/bin:/sbin:/bin, CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_LOG_DIRECTORY, CUDA_VISIBLE_DEVICES; only the configured absolute tools run; the task gets the job's pipe dir"
  : >"$STAGE/evil.log"
  calls=$(wc -l <"$CALL_LOG")
  local task_out=$outd/env-task.out
  out=$(as_user $u env LD_PRELOAD="$STAGE/evil/evil.so" PATH="$STAGE/evil:/usr/bin:/bin" CUDA_MPS_PIPE_DIRECTORY=/tmp/x \
    CUDA_MPS_LOG_DIRECTORY=/tmp/y CUDA_VISIBLE_DEVICES=3 sbatch --export=ALL --unilab-mps --gres=gpu:1 -o "$task_out" \
    --wrap 'echo "PIPE=$CUDA_MPS_PIPE_DIRECTORY"; sleep 300' 2>&1)
  job=$(job_of "$out")
  dpid=$(running_pid "$job")
  local keys pathv
  keys=$(tr '\0' '\n' <"/proc/$dpid/environ" 2>/dev/null | sed 's/=.*//' | sort | tr '\n' ' ')
  pathv=$(tr '\0' '\n' <"/proc/$dpid/environ" 2>/dev/null | grep '^PATH=')
  expect_eq "cluster-env-injection: daemon environ keys" "CUDA_MPS_LOG_DIRECTORY CUDA_MPS_PIPE_DIRECTORY CUDA_VISIBLE_DEVICES PATH " "$keys"
  expect_eq "cluster-env-injection: daemon PATH" "PATH=/usr/sbin:/usr/bin:/sbin:/bin" "$pathv"
  for i in $(seq 1 50); do grep -q PIPE= "$task_out" 2>/dev/null && break; sleep 0.1; done
  expect_contains "cluster-env-injection: the batch script got the job's pipe dir" "$(cat "$task_out" 2>/dev/null)" "PIPE=$RUN_DIR/$(run_entry "$job" n1 0)/pipe"
  scancel "$job"
  cluster_clean cluster-env-injection "$job"
  local ran
  ran=$(tail -n +"$((calls + 1))" "$CALL_LOG" | awk '{print $4}' | sort -u | tr '\n' ' ')
  expect_eq "cluster-env-injection: only the configured absolute tools ran" "$FAKES/nvidia-cuda-mps-control $FAKES/nvidia-smi " "$ran"
  expect_eq "cluster-env-injection: no NVIDIA tool or unilab-mps helper loaded LD_PRELOAD or ran from PATH" "" \
    "$(grep -E 'nvidia|unilab-mps' "$STAGE/evil.log")"
  expect_eq "cluster-env-injection: the probes fire (controls)" 1 "${PROBES_FIRE:-0}"
  # The submitting sbatch loaded the probe: LD_PRELOAD really was in the job's environment.
  check "cluster-env-injection: the probe library loaded in the submitting sbatch" grep -q "sbatch uid=$(id -u "$u")" "$STAGE/evil.log"
  case_end "daemon environ keys: ${keys}(${pathv}); tools run: ${ran}; task $(grep -o 'PIPE=[^ ]*' "$task_out" 2>/dev/null | sed "s#$RUN_DIR#<run_dir>#")"

  case_begin cluster-option-values "hostile option values given to srun/sbatch: refused before anything is allocated, one line each"
  local before v n=0 refused=0 msgs=""
  before=$(last_job)
  local long
  long=$(printf 'A%.0s' $(seq 1 20000))
  for v in "--unilab-mps=multi;rm -rf /" '--unilab-mps=$(id)' "--unilab-mps=../../etc" "--unilab-mps=$long" \
    "--unilab-mps-threads=50;id" "--unilab-mps-threads=1e999" "--unilab-mps-mem=8G;id" "--unilab-mps-mem=../x"; do
    n=$((n + 1))
    local args=(--unilab-mps "$v")
    [[ $v == --unilab-mps=* ]] && args=("$v")
    out=$(as_user $u srun --immediate=5 "${args[@]}" --gres=gpu:1 true 2>&1)
    rc=$?
    [ "$rc" -ne 0 ] && refused=$((refused + 1))
    check "cluster-option-values: srun refuses '${v:0:28}'" test "$rc" -ne 0
    # The plugin's refusal ("error: unilab-mps: ..."), not srun's own
    # "unrecognized option '--unilab-mps...'" (which a missing plugin gives).
    expect_contains "cluster-option-values: the plugin's message for '${v:0:28}'" "$out" "error: unilab-mps: "
    expect_not_contains "cluster-option-values: the option is known for '${v:0:28}'" "$out" "unrecognized option"
    msgs+="$(printf '%s\n' "$out" | grep -m1 'unilab-mps' | cut -c1-70 | sed 's/$/ | /')"
  done
  out=$(as_user $u sbatch --unilab-mps='$(id)' --gres=gpu:1 --wrap true 2>&1)
  rc=$?
  [ "$rc" -ne 0 ] && refused=$((refused + 1))
  check "cluster-option-values: sbatch refuses \$(id)" test "$rc" -ne 0
  expect_eq "cluster-option-values: nothing was allocated" "$before" "$(last_job)"
  local after
  after=$(last_job)
  case_end "$refused of $((n + 1)) refused, $(( ${after:-0} - ${before:-0} )) jobs allocated; e.g. $msgs"

  if grep -h "unilab-mps" "$CLUSTER_DIR"/log/slurmd*.log | grep -i "error" |
    grep -v "mps_fail_start\|did not answer within\|no MPS daemon was started\|invalid --unilab-mps\|--unilab-mps-threads\|--unilab-mps-mem" >"$STAGE/errors.txt"; then
    fail "cluster: unexpected unilab-mps errors in the slurmd log" "$(head -5 "$STAGE/errors.txt")"
  else
    pass "cluster: slurmd log free of unilab-mps errors other than the provoked ones"
  fi
  KEEP_CLUSTER_LOGS=${KEEP_CLUSTER_LOGS:-0} cluster_down
}

# Restart slurmd on NODE while jobs run (cluster_restart_slurmd waits for
# idle): stop it by its recorded PID, start it, wait until it registered.
restart_slurmd_busy() {
  local node=$1 before deadline
  before=$(_ue2e_slurmd_start_time "$node")
  _ue2e_kill_recorded "$CLUSTER_DIR/state/slurmd-$node.pid" "$_UE2E_SBIN/slurmd" "$SLURM_CONF" || return 1
  _ue2e_start_slurmd "$node" || return 1
  deadline=$((SECONDS + 60))
  while [[ $(_ue2e_slurmd_start_time "$node") == "$before" ]]; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

for part in "${parts[@]}"; do
  echo "== $part"
  case $part in
    helpers) helpers_part ;;
    cli) cli_part ;;
    cluster) cluster_part ;;
    *) fail "unknown part $part" ;;
  esac
done
echo "faults suite: $((SECONDS - T0)) s, $CASES cases"
# Floors: every part that ran must have reported its cases.
min_cases=0
for part in "${parts[@]}"; do case $part in helpers) min_cases=$((min_cases + 26)) ;; cli) min_cases=$((min_cases + 3)) ;; cluster) min_cases=$((min_cases + 8)) ;; esac; done
[ "$CASES" -ge "$min_cases" ] || fail "faults suite: only $CASES cases reported, fewer than the $min_cases its parts declare"
MIN_CHECKS=$((min_cases * 3))
finish
