#!/bin/bash
# The comparison baseline's Epilog=: quits the daemon shell-prolog.sh started
# for this job's GPUs, then does the two checks Slurm's etc/prolog.example
# does when it stops a daemon: is an MPS process still listed by `ps`, and
# does `nvidia-smi` still answer. The example downs the node on either; this
# benchmark copy only logs. Same knobs as shell-prolog.sh.
here=${0%/*}
MPS_CMD_DIR=/usr/bin/ MPS_DIR_BASE=/tmp MPS_PARTITION="" MPS_PER_GPU=0
# shellcheck source=/dev/null
[ -r "$here/shell-mps.conf" ] && . "$here/shell-mps.conf"

[ -n "${CUDA_VISIBLE_DEVICES:-}" ] || exit 0
if [ -n "$MPS_PARTITION" ] && [ "${SLURM_JOB_PARTITION:-}" != "$MPS_PARTITION" ]; then exit 0; fi

quit_one() { # quit_one DEVICES
  export CUDA_MPS_PIPE_DIRECTORY=$MPS_DIR_BASE/nvidia-mps_$1
  export CUDA_MPS_LOG_DIRECTORY=$MPS_DIR_BASE/nvidia-log_$1
  echo quit | "${MPS_CMD_DIR}nvidia-cuda-mps-control" >/dev/null
}
if [ "$MPS_PER_GPU" = 1 ]; then
  IFS=, read -r -a devices <<<"$CUDA_VISIBLE_DEVICES"
  for d in "${devices[@]}"; do quit_one "$d"; done
else
  quit_one "$CUDA_VISIBLE_DEVICES"
fi
# shellcheck disable=SC2009 # the example's own check, kept for its cost
if ps aux | grep "nvidia-cuda-mps-control" | grep -v grep >/dev/null; then
  logger -t shell-epilog "an MPS process is still listed after quit" 2>/dev/null || true
fi
"${MPS_CMD_DIR}nvidia-smi" >/dev/null 2>&1 || logger -t shell-epilog "nvidia-smi failed" 2>/dev/null || true
exit 0
