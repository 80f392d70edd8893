# containment_e2e.sh, part "helpers": the prolog/epilog helpers with planted
# records (no Slurm needed; ctest containment_local runs it). Sourced by
# containment_e2e.sh.
# shellcheck shell=bash

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
  args=("state_dir=$H/ww" "run_dir=$H/run" "nvidia_smi=$FAKES/nvidia-smi" "driver_proc=$FAKES/driver-proc" "mps_control=$FAKES/nvidia-cuda-mps-control" "history=$H/log/history.jsonl")
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
  args=("state_dir=$H/state" "run_dir=$H/run" "nvidia_smi=$FAKES/nvidia-smi" "driver_proc=$FAKES/driver-proc" "mps_control=$FAKES/nvidia-cuda-mps-control" "history=$H/log/history.jsonl")
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
