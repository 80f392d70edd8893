# faults_e2e.sh, part "helpers": the standalone prolog/epilog helpers driven
# with a Slurm-like environment, as slurmd would run them (no Slurm needed;
# ctest faults_local runs it with the cli part). Sourced by faults_e2e.sh.
# shellcheck shell=bash

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
  H_ARGS=("state_dir=$H/state" "run_dir=$H/run" "nvidia_smi=$FAKES/nvidia-smi" "driver_proc=$FAKES/driver-proc"
          "mps_control=$FAKES/nvidia-cuda-mps-control" "start_timeout=2" "stop_timeout=3" "history=$H/log/history.jsonl")
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
  for v in '50;id' '1e999' '-5' 'nan' '$(id)' 'auto;id'; do
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
  for v in '1;id' '$(touch /tmp/pwned)' '2' "$long"; do
    prolog 153 "${MPS_OPT}_priority=$v"
    rcs+="$PRO_RC "
    check "attack-option-values: priority '${v:0:20}' refused" test "$PRO_RC" -ne 0
    expect_contains "attack-option-values: priority '${v:0:20}' message" "$PRO_OUT" "invalid MPS client priority"
    expect_eq "attack-option-values: priority '${v:0:20}' one line" 1 "$(one_line "$PRO_OUT")"
  done
  check_not "attack-option-values: no file named by a value was created" test -e /tmp/pwned
  expect_eq "attack-option-values: no tool ran" "$calls" "$(wc -l <"$CALL_LOG")"
  expect_nothing_left attack-option-values 153
  case_end "18 values, prolog rc: ${rcs}; longest message $(echo "$lens" | tr ' ' '\n' | sort -n | tail -n1) bytes for a 100000-byte value; tools run: $(( $(wc -l <"$CALL_LOG") - calls )); $(leftovers 153)"

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
