#!/usr/bin/env bash
# Soak: many short --unilab-mps jobs on one node of a local Slurm cluster
# (plain mode), mixed single-GPU, per-task (two tasks, one GPU each) and
# multi, from two users, every 10th one cancelled while it runs. Each job's
# clients must join their job's daemon. Afterwards: zero daemon processes,
# zero pipe/log dirs, zero records, and no unilab-mps error in the slurmd log.
# Prints `SOAK jobs=... wall=...` and `CASE soak PASS|FAIL ...` for
# scripts/reliability-report. About a minute for 200 jobs on 2 cores: a
# step of scripts/test.
# Usage: tests/e2e/soak.sh BUILD_DIR [--jobs N] [--batch N]
# Env: CLUSTER_PORT_BASE (default 18200), KEEP_CLUSTER_LOGS=1.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/e2e_lib.sh"  # with tests/lib.sh and cluster.sh
MIN_CHECKS=7
build=$(cd "${1:?usage: $0 BUILD_DIR [--jobs N] [--batch N]}" && pwd)
shift
jobs=200
batch=25
while (($#)); do
  case $1 in
    --jobs) jobs=${2:?}; shift 2 ;;
    --batch) batch=${2:?}; shift 2 ;;
    *) echo "soak.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
export CLUSTER_PORT_BASE=${CLUSTER_PORT_BASE:-18200}

require_root
make_stage usk "$build"
CLIENT=$FAKES/fake-cuda-client

ensure_test_users
CLUSTER_DIR=$STAGE/cluster
STATE_DIR=$CLUSTER_DIR/mps-state
RUN_DIR=$CLUSTER_DIR/mps-run
CLUSTER_MODE=plain CLUSTER_NODES=1 CLUSTER_DEBUG=info PLUGIN_SO=$STAGE/unilab_mps.so \
  PLUGIN_ARGS="state_dir=$STATE_DIR run_dir=$RUN_DIR nvidia_smi=$FAKES/nvidia-smi driver_proc=$FAKES/driver-proc mps_control=$FAKES/nvidia-cuda-mps-control start_timeout=10 stop_timeout=5" \
  cluster_up || { fail "soak: cluster up"; finish; exit 1; }

# kind of job i: single, per-task, multi; every 10th is cancelled mid-run.
kind_of() {
  local i=$1
  if ((i % 10 == 9)); then echo cancel; return; fi
  case $((i % 3)) in 0) echo single ;; 1) echo per-task ;; 2) echo multi ;; esac
}
submit() { # submit I -> job id
  local i=$1 user=unimps1 kind out
  ((i % 2)) && user=unimps2
  kind=$(kind_of "$i")
  local o=$OUT/$i.out
  case $kind in
    single) out=$(as_user $user sbatch --unilab-mps --gres=gpu:1 -n1 -o "$o" --wrap "$CLIENT --hold 0" 2>&1) ;;
    per-task) out=$(as_user $user sbatch --unilab-mps --gres=gpu:2 -n2 -o "$o" \
      --wrap "srun -n2 --gpus-per-task=1 $CLIENT --hold 0" 2>&1) ;;
    multi) out=$(as_user $user sbatch --unilab-mps=multi --gres=gpu:2 -n1 -o "$o" --wrap "$CLIENT --hold 0" 2>&1) ;;
    cancel) out=$(as_user $user sbatch --unilab-mps --gres=gpu:1 -n1 -o "$o" --wrap "$CLIENT --hold 0; sleep 120" 2>&1) ;;
  esac
  printf '%s' "$out" | sed -n 's/^Submitted batch job \([0-9]*\)$/\1/p'
}
expected_clients() { case $(kind_of "$1") in per-task) echo 2 ;; *) echo 1 ;; esac; }
# Daemons the prolog starts: one per GPU in per-task (task_per_gpu) jobs.
expected_daemons() { case $(kind_of "$1") in per-task) echo 2 ;; *) echo 1 ;; esac; }
# Clients of job output K that joined a daemon of that job (the fake client
# prints the pipe directory it used; without one it would fall back to
# /tmp/nvidia-mps, which is not a job's).
own_clients() { grep -c "^pipe=$RUN_DIR/$2\.[^/]*/pipe$" "$OUT/$1.out" 2>/dev/null; }

declare -A JOB_OF=() CANCELLED=()
t0=$SECONDS
cancel_running() { # scancel every cancel-kind job whose client already joined
  local i
  for i in "${!JOB_OF[@]}"; do
    [ "$(kind_of "$i")" = cancel ] || continue
    [ -n "${CANCELLED[$i]:-}" ] && continue
    if grep -qs "connected to MPS server" "$OUT/$i.out"; then
      scancel "${JOB_OF[$i]}" && CANCELLED[$i]=1
    fi
  done
}
queue_len() { squeue -h -o %i 2>/dev/null | wc -l; }
i=0
while ((i < jobs)); do
  n=0
  while ((n < batch && i < jobs)); do
    id=$(submit "$i")
    if [ -n "$id" ]; then JOB_OF[$i]=$id; else fail "soak: job $i was not submitted"; fi
    i=$((i + 1))
    n=$((n + 1))
  done
  # Let the queue drain to half a batch before the next one (2 cores).
  deadline=$((SECONDS + 300))
  while (($(queue_len) > batch / 2)) && ((SECONDS < deadline)); do
    cancel_running
    sleep 0.5
  done
  echo "soak: $i submitted, $(queue_len) queued, $((SECONDS - t0)) s"
done
deadline=$((SECONDS + 600))
while (($(queue_len) > 0)) && ((SECONDS < deadline)); do
  cancel_running
  sleep 0.5
done
while [[ $(sinfo -h -N -o %T 2>/dev/null) == *completing* ]] && ((SECONDS < deadline)); do sleep 0.3; done
wall=$((SECONDS - t0))
expect_eq "soak: the queue drained" 0 "$(queue_len)"

completed=0 cancelled=0 failed_jobs=0 clients=0 want_daemons=0
bad=()
for ((k = 0; k < jobs; k++)); do
  [ -n "${JOB_OF[$k]:-}" ] || continue
  want_daemons=$((want_daemons + $(expected_daemons "$k")))
  joined=$(grep -c "connected to MPS server" "$OUT/$k.out" 2>/dev/null)
  got=$(own_clients "$k" "${JOB_OF[$k]}")
  # A client that joined some other daemon does not count.
  [ "${joined:-0}" -eq "${got:-0}" ] || got=0
  clients=$((clients + ${got:-0}))
  if [ "$(kind_of "$k")" = cancel ]; then
    if [ -n "${CANCELLED[$k]:-}" ] && [ "${got:-0}" -ge 1 ]; then cancelled=$((cancelled + 1)); else failed_jobs=$((failed_jobs + 1)); bad+=("$k"); fi
  elif [ "${got:-0}" -eq "$(expected_clients "$k")" ] && ! grep -qs "error" "$OUT/$k.out"; then
    completed=$((completed + 1))
  else
    failed_jobs=$((failed_jobs + 1))
    bad+=("$k")
  fi
done
expect_eq "soak: every job's clients joined its daemon (failed jobs)" 0 "$failed_jobs"
for k in "${bad[@]:0:3}"; do echo "   job $k ($(kind_of "$k"), ${JOB_OF[$k]}): $(head -c 300 "$OUT/$k.out" 2>/dev/null | tr '\n' ' ')"; done

left_daemons=$(mps_daemons_under "$RUN_DIR/" | wc -l)
left_dirs=$(ls -A "$RUN_DIR" 2>/dev/null | wc -l)
left_records=$(ls -A "$STATE_DIR" 2>/dev/null | wc -l)
expect_eq "soak: no daemon process left" 0 "$left_daemons"
expect_eq "soak: no pipe/log dir left" 0 "$left_dirs"
expect_eq "soak: no record left" 0 "$left_records"
grep -h "unilab-mps" "$CLUSTER_DIR"/log/slurmd*.log | grep -i "error" >"$STAGE/errors.txt"
log_errors=$(wc -l <"$STAGE/errors.txt")
expect_eq "soak: no unilab-mps error in the slurmd log" 0 "$log_errors"
[ "$log_errors" -eq 0 ] || head -n 5 "$STAGE/errors.txt"
daemons_started=$(grep -c '^mps-daemon ' "$CALL_LOG")
expect_eq "soak: one daemon started per job GPU group (no extra, none missing)" "$want_daemons" "$daemons_started"

summary="jobs=$jobs completed=$completed cancelled=$cancelled failed=$failed_jobs clients_joined=$clients daemons_started=$daemons_started wall=${wall}s leftover_daemons=$left_daemons leftover_dirs=$left_dirs leftover_records=$left_records slurmd_log_errors=$log_errors"
echo "SOAK $summary"
st=PASS
[ "$FAIL" -eq 0 ] || st=FAIL
echo "CASE soak $st $jobs jobs ($completed completed, $cancelled cancelled mid-run, $failed_jobs failed; $daemons_started daemons started, $clients clients joined) in ${wall} s; left: $left_daemons daemons, $left_dirs dirs, $left_records records; $log_errors unilab-mps errors in the slurmd log"
KEEP_CLUSTER_LOGS=${KEEP_CLUSTER_LOGS:-0} cluster_down
finish
