# faults_e2e.sh, part "cli": the unilab-mps command as hostile users and as
# root (no Slurm needed). Sourced by faults_e2e.sh.
# shellcheck shell=bash

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
