# containment_e2e.sh, parts "cgroup" (cgroup v1, ConstrainDevices=yes,
# PrologFlags=Contain) and "cgroup-runinjob" (cgroup v1, RunInJob, the
# Prolog=/Epilog= helpers). Sourced by containment_e2e.sh.
# shellcheck shell=bash

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
