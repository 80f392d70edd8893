#!/bin/bash
# The comparison baseline: a site's shell Prolog= that starts an MPS daemon
# for a job, written for this benchmark after the steps of Slurm's
# etc/prolog.example (SchedMD/slurm, "Sample Prolog to start and quit the MPS
# server as needed"): pipe/log dirs named after CUDA_VISIBLE_DEVICES under
# /tmp, `nvidia-cuda-mps-control -d` as root, a fixed `sleep 1` for the
# daemon to come up, then `start_server -uid $SLURM_JOB_UID`. Not a product
# script: no identity record, daemon owned by root, no task environment.
#
# Knobs in shell-mps.conf next to this script (re-read every run):
#   MPS_CMD_DIR=/path/        where nvidia-smi and nvidia-cuda-mps-control live
#   MPS_DIR_BASE=/tmp         parent of the nvidia-mps_<devices> dirs
#   MPS_WAIT=sleep|poll       sleep 1 as the example, or poll until it answers
#   MPS_PARTITION=NAME        only jobs in this partition get MPS (empty: all GPU jobs)
#   MPS_PER_GPU=1             one daemon per GPU of CUDA_VISIBLE_DEVICES, started
#                             one after another (the example starts one for all)
here=${0%/*}
MPS_CMD_DIR=/usr/bin/ MPS_DIR_BASE=/tmp MPS_WAIT=sleep MPS_PARTITION="" MPS_PER_GPU=0
# shellcheck source=/dev/null
[ -r "$here/shell-mps.conf" ] && . "$here/shell-mps.conf"

[ -n "${CUDA_VISIBLE_DEVICES:-}" ] || exit 0
if [ -n "$MPS_PARTITION" ] && [ "${SLURM_JOB_PARTITION:-}" != "$MPS_PARTITION" ]; then exit 0; fi

start_one() { # start_one DEVICES: the example's steps for one daemon
  export CUDA_VISIBLE_DEVICES=$1
  export CUDA_MPS_PIPE_DIRECTORY=$MPS_DIR_BASE/nvidia-mps_$1
  export CUDA_MPS_LOG_DIRECTORY=$MPS_DIR_BASE/nvidia-log_$1
  "${MPS_CMD_DIR}nvidia-cuda-mps-control" -d && echo "MPS control daemon started"
  if [ "$MPS_WAIT" = poll ]; then
    for _ in $(seq 1 500); do
      echo get_server_list | "${MPS_CMD_DIR}nvidia-cuda-mps-control" >/dev/null 2>&1 && break
      sleep 0.01
    done
  else
    sleep 1
  fi
  echo "start_server -uid $SLURM_JOB_UID" | "${MPS_CMD_DIR}nvidia-cuda-mps-control" >/dev/null &&
    echo "MPS server started for $SLURM_JOB_UID"
}
if [ "$MPS_PER_GPU" = 1 ]; then
  IFS=, read -r -a devices <<<"$CUDA_VISIBLE_DEVICES"
  for d in "${devices[@]}"; do start_one "$d"; done
else
  start_one "$CUDA_VISIBLE_DEVICES"
fi
exit 0
