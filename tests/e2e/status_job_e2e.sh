#!/usr/bin/env bash
# End-to-end: `unilab-mps status --job J` run on the node as the job's
# (non-root) user, with no --state-dir, finds the job's daemon through the
# node's plugstack.conf (a non-default state_dir= and the fake nvidia_smi=),
# shows only that job's daemon and GPU, and exits 1 with one line for a job
# without a daemon there. Usage: tests/e2e/status_job_e2e.sh BUILD_DIR (root)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/e2e_lib.sh"  # with tests/lib.sh and cluster.sh
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
MIN_CHECKS=9
export CLUSTER_PORT_BASE=${CLUSTER_PORT_BASE:-21100}
require_root
make_stage usj "$build"
ensure_test_users
CLI=$STAGE/bin/unilab-mps
CLUSTER_DIR=$STAGE/c
STATE_DIR=$CLUSTER_DIR/st   # not /run/unilab-mps (short: pipe paths must fit a socket address)
RUN_DIR=$CLUSTER_DIR/r
if ! CLUSTER_MODE=plain CLUSTER_NODES=1 PLUGIN_SO=$STAGE/unilab_mps.so \
  PLUGIN_ARGS="state_dir=$STATE_DIR run_dir=$RUN_DIR nvidia_smi=$STAGE/fakes/nvidia-smi driver_proc=$STAGE/fakes/driver-proc mps_control=$STAGE/fakes/nvidia-cuda-mps-control" \
  cluster_up; then
  fail "cluster up"
  finish
  exit 1
fi

out=$(as_user unimps1 sbatch --unilab-mps --unilab-mps-mem=2G --gres=gpu:1 -o /dev/null --wrap "sleep 120" 2>&1)
job=$(printf '%s' "$out" | sed -n 's/^Submitted batch job \([0-9]*\)$/\1/p')
check "sbatch accepted ($out)" test -n "$job"
for _ in $(seq 1 300); do grep -qs '"state": "running"' "$STATE_DIR/job$job.n1.gpu0.json" && break; sleep 0.1; done

st=$(as_user unimps1 "$CLI" status --job "$job" 2>&1); rc=$?
expect_eq "the job's user: status --job exits 0" 0 "$rc"
expect_contains "records from the plugin's state_dir=" "$st" "daemons (1) in $STATE_DIR"
expect_contains "lists the job's daemon with its limit" "$st" "limits pinned memory 2048M per GPU"
expect_contains "runs the plugin's nvidia_smi=" "$st" "nvidia-smi $STAGE/fakes/nvidia-smi"
expect_eq "shows only the job's GPU" 1 "$(printf '%s\n' "$st" | grep -cE '^[0-9]+ +GPU-')"
expect_not_contains "no host-wide default pipe" "$st" "/tmp/nvidia-mps"
st=$(as_user unimps1 "$CLI" status --job 999999 2>&1); rc=$?
expect_eq "a job without a daemon here: exit 1" 1 "$rc"
expect_contains "one line naming job, node and directory" "$st" "job 999999 has no unilab-mps daemon of uid $(id -u unimps1) on node n1 in $STATE_DIR"
scancel "$job"
wait_job_gone "$job" 60 >/dev/null 2>&1
finish
