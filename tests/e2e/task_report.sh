#!/bin/bash
# Runs inside a Slurm task: prints what the task sees, one fact per line,
# prefixed with T<procid>@<node>, so the e2e driver can assert on it.
p="T${SLURM_PROCID:-0}@${SLURMD_NODENAME:-?}"
echo "$p USER=$(id -un)"
echo "$p JOB=${SLURM_JOB_ID-unset}"
echo "$p CVD=${CUDA_VISIBLE_DEVICES-unset}"
echo "$p PIPE=${CUDA_MPS_PIPE_DIRECTORY-unset}"
echo "$p LOG=${CUDA_MPS_LOG_DIRECTORY-unset}"
echo "$p JOB_GPUS=${SLURM_JOB_GPUS-unset}"
echo "$p STEP_GPUS=${SLURM_STEP_GPUS-unset}"
# GRES indices whose device file this task may open (GPU_DEVS lists the
# node's device files in GRES order); cgroup device constraint denies the rest.
if [ -n "${GPU_DEVS:-}" ]; then
  allowed=() i=0
  for dev in $GPU_DEVS; do
    if ! err=$( { exec 3<"$dev"; } 2>&1 ) && [[ $err == *"not permitted"* ]]; then :; else allowed+=("$i"); fi
    i=$((i + 1))
  done
  echo "$p ALLOWED=$(IFS=,; echo "${allowed[*]}")"
fi
if [ -n "${CUDA_MPS_PIPE_DIRECTORY:-}" ]; then
  echo "$p PIPE_STAT=$(stat -c %U:%a "$CUDA_MPS_PIPE_DIRECTORY")"
  dpid=$(cat "$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid" 2>/dev/null)
  echo "$p DAEMON_PID=$dpid"
  echo "$p DAEMON_USER=$(stat -c %U "/proc/$dpid" 2>/dev/null)"
  echo "$p DAEMON_CVD=$(tr '\0' '\n' <"/proc/$dpid/environ" 2>/dev/null | sed -n 's/^CUDA_VISIBLE_DEVICES=//p')"
  echo "$p CLIENT=$("$FAKE_CLIENT" --hold "${HOLD:-0}" 2>&1 | tr '\n' ' ')"
fi
# Attack: try to reach another user's daemon through its pipe directory.
if [ -n "${OTHER_PIPE:-}" ]; then
  # The client's own error says why (the driver checks it is a refusal).
  if other=$(CUDA_MPS_PIPE_DIRECTORY=$OTHER_PIPE "$FAKE_CLIENT" --hold 0 2>&1); then
    echo "$p OTHER=reachable"
  else
    echo "$p OTHER=unreachable: $(printf '%s' "$other" | grep -m1 'CUDA error' | tr '\n' ' ')"
  fi
fi
exit 0
