#!/usr/bin/env bash
# tests/e2e/smoke_cluster.sh: checks the throwaway cluster of cluster.sh
# WITHOUT any SPANK plugin, in three configurations: plain/1 node,
# cgroup/1 node, plain/2 nodes. Needs root. Prints "N passed, M failed".
#
#   sudo tests/e2e/smoke_cluster.sh            # all three configurations
#   SMOKE_CONFIGS="cgroup:1" tests/e2e/smoke_cluster.sh
#   KEEP_CLUSTER_LOGS=1 ...                    # keep /tmp/unilab-e2e.* dirs
set -euo pipefail
# Single-quoted snippets below are expanded by the job shell, on purpose.
# shellcheck disable=SC2016

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=cluster.sh
source "$HERE/cluster.sh"

unset PLUGIN_SO PLUGIN_ARGS PLUGIN_REQUIRED CLUSTER_DIR
GPU_MINORS=${GPU_MINORS:-3 1 0 2}
read -r -a MINORS <<<"$GPU_MINORS"
USER1=unimps1
PASSED=0
FAILED=0

trap 'cluster_down' EXIT
trap 'exit 130' INT TERM

pass() {
    PASSED=$((PASSED + 1))
    printf '  PASS %s\n' "$1"
}

fail() {
    FAILED=$((FAILED + 1))
    printf '  FAIL %s\n' "$1"
    shift
    local line
    for line in "$@"; do printf '       | %s\n' "$line"; done
}

# expect_eq NAME EXPECTED ACTUAL
expect_eq() {
    if [[ $2 == "$3" ]]; then pass "$1"; else fail "$1" "expected: $2" "actual:   $3"; fi
}

# expect_match NAME EXTENDED_REGEX ACTUAL
expect_match() {
    if [[ $3 =~ $2 ]]; then pass "$1"; else fail "$1" "expected to match: $2" "actual: $3"; fi
}

# OUT, RC = output (stdout+stderr) and exit status of CMD run as USER1.
run_user() {
    RC=0
    OUT=$(as_user "$USER1" "$@" 2>&1 </dev/null) || RC=$?
}

note() { printf '  observed: %s\n' "$*"; }

# Bash run inside a task: for every fake GPU device file, what open() says.
# shellcheck disable=SC2016
PROBE='for f in "$1"/nvidia*; do
  if err=$( { : <"$f"; } 2>&1 ); then r=OPEN
  else case $err in
    *"Operation not permitted"*) r=EPERM ;;
    *"No such device or address"*) r=ENXIO ;;
    *) r="OTHER(${err##*: })" ;;
  esac; fi
  printf "%s=%s " "${f##*/}" "$r"
done'

# Device file basename of GRES index I (gres.conf order = GPU_MINORS order).
gres_file() { printf 'nvidia%s' "${MINORS[$1]}"; }

# Expected probe output when exactly the GRES indices given may be opened.
# (plain mode: pass every index). Files are listed in glob (name) order.
expected_probe() {
    local allowed=" " i m out=
    for i in "$@"; do allowed+="$(gres_file "$i") "; done
    for m in $(printf '%s\n' "${MINORS[@]}" | sort); do
        if [[ $allowed == *" nvidia$m "* ]]; then out+="nvidia$m=ENXIO "; else out+="nvidia$m=EPERM "; fi
    done
    printf '%s' "$out"
}

# All GRES indices of a node: 0 .. number of GPUs - 1.
ALL_GRES=()
for ((_i = 0; _i < ${#MINORS[@]}; _i++)); do ALL_GRES+=("$_i"); done

# ------------------------------------------------------------------ checks

check_user_identity() {
    run_user srun --immediate=30 id -un
    expect_eq "srun as $USER1 runs as $USER1" "$USER1" "$OUT"
}

check_as_user_quoting() {
    # shellcheck disable=SC2016
    run_user printf '<%s>' 'a b' '$HOME' '"q"' "it's" '*'
    expect_eq "as_user passes arguments verbatim" "<a b><\$HOME><\"q\"><it's><*>" "$OUT"
}

check_gres_env() {
    run_user srun --immediate=30 --gres=gpu:1 env
    local gpu_env
    gpu_env=$(grep -E '^(SLURM_JOB_GPUS|SLURM_STEP_GPUS|CUDA_VISIBLE_DEVICES|GPU_DEVICE_ORDINAL|SLURM_GPUS_ON_NODE)=' <<<"$OUT" | sort | tr '\n' ' ')
    note "srun --gres=gpu:1 env: ${gpu_env:-<none>} (rc=$RC)"
    expect_match "srun --gres=gpu:1: CUDA_VISIBLE_DEVICES=0" '(^| )CUDA_VISIBLE_DEVICES=0 ' "$gpu_env"
    expect_match "srun --gres=gpu:1: SLURM_STEP_GPUS=0" '(^| )SLURM_STEP_GPUS=0 ' "$gpu_env"
}

check_gpus_per_task() {
    run_user srun --immediate=30 -n2 --gpus-per-task=1 bash -c \
        'echo "$SLURM_PROCID|$CUDA_VISIBLE_DEVICES|$SLURM_STEP_GPUS|$SLURM_JOB_GPUS|$(bash -c "$0" probe "$1")"' \
        "$PROBE" "$CLUSTER_DIR/dev"
    local sorted
    # Only the tasks' lines: srun adds its own ("srun: job N queued and
    # waiting for resources" while an earlier job's resources are released).
    sorted=$(grep -v '^srun: ' <<<"$OUT" | sort)
    while IFS= read -r line; do note "-n2 --gpus-per-task=1 (PROCID|CVD|STEP_GPUS|JOB_GPUS|probe): $line"; done <<<"$sorted"
    expect_eq "srun -n2 --gpus-per-task=1 runs tasks 0 and 1" "0 1" "$(cut -d'|' -f1 <<<"$sorted" | tr '\n' ' ' | sed 's/ $//')"
    local t0 t1 e0 e1
    t0=$(sed -n 1p <<<"$sorted" | cut -d'|' -f2,3)
    t1=$(sed -n 2p <<<"$sorted" | cut -d'|' -f2,3)
    if [[ $CLUSTER_MODE == cgroup ]]; then
        # Seen: every task gets local CVD=0 and STEP_GPUS=0; the cgroup tells them apart.
        expect_eq "gpus-per-task cgroup: task 0 CVD|STEP_GPUS" "0|0" "$t0"
        expect_eq "gpus-per-task cgroup: task 1 CVD|STEP_GPUS" "0|0" "$t1"
        e0=$(expected_probe 0)
        e1=$(expected_probe 1)
    else
        expect_eq "gpus-per-task plain: task 0 CVD|STEP_GPUS" "0|0" "$t0"
        expect_eq "gpus-per-task plain: task 1 CVD|STEP_GPUS" "1|1" "$t1"
        e0=$(expected_probe "${ALL_GRES[@]}")
        e1=$e0
    fi
    expect_eq "gpus-per-task: task 0 device access" "$e0" "$(sed -n 1p <<<"$sorted" | cut -d'|' -f5)"
    expect_eq "gpus-per-task: task 1 device access" "$e1" "$(sed -n 2p <<<"$sorted" | cut -d'|' -f5)"
}

check_device_constraint() {
    # Two GPUs, one task: in cgroup mode exactly GRES 0 and 1 may be opened
    # (ENXIO: no driver behind major 195), the others give EPERM.
    run_user srun --immediate=30 --gres=gpu:2 bash -c \
        'echo "$CUDA_VISIBLE_DEVICES|$SLURM_STEP_GPUS|$(bash -c "$0" probe "$1")"' "$PROBE" "$CLUSTER_DIR/dev"
    note "srun --gres=gpu:2 (CVD|STEP_GPUS|probe): $OUT"
    local expected
    if [[ $CLUSTER_MODE == cgroup ]]; then
        expected="0,1|0,1|$(expected_probe 0 1)"
    else
        expected="0,1|0,1|$(expected_probe "${ALL_GRES[@]}")"
    fi
    expect_eq "$CLUSTER_MODE: device files a --gres=gpu:2 task may open" "$expected" "$OUT"
}

check_sbatch_wait() {
    local out_file=/home/$USER1/smoke-$$.out
    run_user sbatch --wait --gres=gpu:2 -o "$out_file" \
        --wrap 'echo user=$(id -un) SLURM_JOB_GPUS=$SLURM_JOB_GPUS CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES'
    expect_eq "sbatch --wait --wrap exits 0" 0 "$RC"
    local got
    got=$(cat "$out_file" 2>/dev/null || true)
    note "sbatch --gres=gpu:2 batch step: $got"
    expect_eq "sbatch batch step output" "user=$USER1 SLURM_JOB_GPUS=0,1 CUDA_VISIBLE_DEVICES=0,1" "$got"
    rm -f "$out_file"
}

check_wait_job_gone() {
    run_user sbatch --parsable -o /dev/null --wrap 'sleep 1'
    local job=${OUT%%;*}
    if [[ $RC != 0 || ! $job =~ ^[0-9]+$ ]]; then
        fail "sbatch --parsable gives a job id" "$OUT"
        return
    fi
    local t0=$SECONDS
    if wait_job_gone "$job" 30; then
        pass "wait_job_gone $job ($((SECONDS - t0))s)"
    else
        fail "wait_job_gone $job"
    fi
    expect_eq "node idle after wait_job_gone" "" "$(cluster_node_states | grep -v ' idle$' || true)"
}

check_node_resume() {
    scontrol update nodename=n1 state=drain reason=smoke-test
    if node_resume n1; then pass "node_resume n1 after drain"; else fail "node_resume n1 after drain"; fi
}

check_restart_slurmd() {
    local before after
    before=$(<"$CLUSTER_DIR/state/slurmd-n1.pid")
    if cluster_restart_slurmd; then pass "cluster_restart_slurmd"; else fail "cluster_restart_slurmd"; fi
    after=$(<"$CLUSTER_DIR/state/slurmd-n1.pid")
    if [[ $before != "$after" ]]; then pass "slurmd has a new pid"; else fail "slurmd has a new pid" "$before"; fi
    run_user srun --immediate=30 id -un
    expect_eq "srun works after slurmd restart" "$USER1" "$OUT"
}

check_two_nodes() {
    run_user srun --immediate=30 -N2 -n2 bash -c 'echo "$SLURMD_NODENAME $(hostname)"'
    note "srun -N2: $(tr '\n' ';' <<<"$OUT")"
    expect_eq "srun -N2 runs on n1 and n2" "n1 n2" "$(cut -d' ' -f1 <<<"$OUT" | sort | tr '\n' ' ' | sed 's/ $//')"
    run_user srun --immediate=30 -N2 --gres=gpu:1 bash -c 'echo "$SLURMD_NODENAME $CUDA_VISIBLE_DEVICES $SLURM_STEP_GPUS"'
    note "srun -N2 --gres=gpu:1: $(sort <<<"$OUT" | tr '\n' ';')"
    expect_eq "srun -N2 --gres=gpu:1: one GPU on each node" "n1 0 0;n2 0 0;" "$(sort <<<"$OUT" | tr '\n' ';')"
}

check_teardown() {
    local dir=$CLUSTER_DIR pids
    pids=$(cat "$dir"/state/*.pid)
    cluster_down
    local alive=
    for p in $pids; do [[ -e /proc/$p ]] && alive+=" $p"; done
    expect_eq "cluster_down stops every daemon" "" "$alive"
    if [[ ${KEEP_CLUSTER_LOGS:-0} == 1 ]]; then
        if [[ -d $dir ]]; then pass "cluster_down keeps $dir"; else fail "cluster_down keeps $dir"; fi
    else
        if [[ ! -e $dir ]]; then pass "cluster_down removes the dir"; else fail "cluster_down removes the dir" "$dir"; fi
    fi
    cluster_down # second call must be a no-op
    pass "cluster_down twice"
}

# ------------------------------------------------------------------ driver

run_config() {
    CLUSTER_MODE=$1
    CLUSTER_NODES=$2
    export CLUSTER_MODE CLUSTER_NODES
    printf '=== config: mode=%s nodes=%s\n' "$CLUSTER_MODE" "$CLUSTER_NODES"
    local t0=$SECONDS
    if ! cluster_up; then
        fail "cluster_up mode=$CLUSTER_MODE nodes=$CLUSTER_NODES"
        cluster_down
        return
    fi
    pass "cluster_up mode=$CLUSTER_MODE nodes=$CLUSTER_NODES ($((SECONDS - t0))s)"
    check_user_identity
    check_gres_env
    check_gpus_per_task
    check_device_constraint
    check_sbatch_wait
    check_wait_job_gone
    if [[ $CLUSTER_NODES == 2 ]]; then
        check_two_nodes
    fi
    if [[ $CLUSTER_MODE == plain && $CLUSTER_NODES == 1 ]]; then
        check_as_user_quoting
        check_node_resume
        check_restart_slurmd
    fi
    check_teardown
    printf '=== config mode=%s nodes=%s took %ss\n' "$CLUSTER_MODE" "$CLUSTER_NODES" "$((SECONDS - t0))"
}

main() {
    [[ $(id -u) == 0 ]] || { echo "smoke_cluster.sh needs root" >&2; exit 2; }
    ensure_test_users
    local cfg start=$SECONDS
    for cfg in ${SMOKE_CONFIGS:-plain:1 cgroup:1 plain:2}; do
        run_config "${cfg%%:*}" "${cfg##*:}"
    done
    printf '%d passed, %d failed (%ss)\n' "$PASSED" "$FAILED" "$((SECONDS - start))"
    # Floor: at least 10 checks per configuration run, else a part did not run.
    local floor=$((10 * $(wc -w <<<"${SMOKE_CONFIGS:-plain:1 cgroup:1 plain:2}")))
    if ((PASSED + FAILED < floor)); then
        echo "FAIL: only $((PASSED + FAILED)) checks ran, fewer than the $floor this suite declares"
        return 1
    fi
    ((FAILED == 0))
}

main "$@"
