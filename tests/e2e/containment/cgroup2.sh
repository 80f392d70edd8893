# containment_e2e.sh, parts "cgroup2" (cgroup v2, RunInJob) and
# "cgroup2-job-id-paths" (the same with CgroupJobIdPaths=yes). Sourced by
# containment_e2e.sh.
# shellcheck shell=bash

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
