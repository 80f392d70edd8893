# containment_e2e.sh, part "plain": no cgroups, so the epilog does the
# reaping. Sourced by containment_e2e.sh.
# shellcheck shell=bash

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
  submit 'dd if=/dev/zero of="$CUDA_MPS_LOG_DIRECTORY/fill" bs=1M count=200 2>&1 | tail -n1; cd "$CUDA_MPS_PIPE_DIRECTORY" && i=0; while touch f$i 2>/dev/null; do i=$((i+1)); done; echo "files=$i"; df -k --output=fstype,size "$CUDA_MPS_LOG_DIRECTORY" | tail -n1 | tr -s " "; echo filled; sleep 10'
  find_record || fail "the job's daemon record appears"
  # Until its last line: read at "files=" alone, df's line could still be to come (a reliability run saw that).
  wait_for 60 grep -q '^filled$' "$OUT/contain-$JOB.out" || fail "the job filled its dirs" "$(cat "$OUT/contain-$JOB.out")"
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
