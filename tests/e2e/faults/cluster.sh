# faults_e2e.sh, part "cluster": a real local Slurm cluster (plain mode)
# for what needs Slurm. Sourced by faults_e2e.sh.
# shellcheck shell=bash

CL_ARGS=()
cluster_part() {
  CLUSTER_DIR=$STAGE/cluster
  STATE_DIR=$CLUSTER_DIR/mps-state
  RUN_DIR=$CLUSTER_DIR/mps-run
  export PLUGIN_SO=$STAGE/unilab_mps.so
  export PLUGIN_ARGS="state_dir=$STATE_DIR run_dir=$RUN_DIR nvidia_smi=$FAKES/nvidia-smi driver_proc=$FAKES/driver-proc mps_control=$FAKES/nvidia-cuda-mps-control start_timeout=2 stop_timeout=3"
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
    job_daemon_pid "$STATE_DIR" "$1" n1
  }
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
