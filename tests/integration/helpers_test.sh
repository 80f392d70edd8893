#!/usr/bin/env bash
# The prolog/epilog helpers' exit codes, as slurmd sees them: 0 when the job's
# daemons were started/stopped, non-zero when they could not be (a failed
# epilog is what drains the node). The "daemon survives SIGKILL" path uses a
# real process that SIGKILL cannot end: a kernel thread (kthreadd, uid 0)
# stands in for a daemon stuck in the driver, named by a root job's record.
# Usage: tests/integration/helpers_test.sh BUILD_DIR   (root: mknod, records)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
MIN_CHECKS=45
if [ "$(id -u)" -ne 0 ]; then
  skip "helpers" "needs root (mknod GPU device files, a root-owned state dir)"
  echo "0 passed, 0 failed, $SKIP skipped"
  exit 0
fi

work=$(mktemp -d /tmp/unilab-helpers.XXXXXX)
chmod 755 "$work"
cleanup() {
  for pid in $(mps_daemons_under "$work"); do kill -9 "$pid" 2>/dev/null; done
  # The survivor case's epilog keeps its daemon dir (a tmpfs) on purpose, as
  # it would on a node that drains: unmount what is left under $work, deepest
  # first, before removing it.
  awk -v w="$work/" 'index($2, w) == 1 { print $2 }' /proc/self/mounts | sort -r | while read -r m; do umount -l "$m"; done
  rm -rf "$work"
}
trap cleanup EXIT
stage_binaries "$build" "$work/stage"
ensure_test_users
BIN=$work/stage/bin FAKES=$work/stage/fakes
U1=$(id -u unimps1) G1=$(id -g unimps1)
mkdir -p "$work/dev" "$work/etc"
for m in 0 1; do mknod -m 666 "$work/dev/nvidia$m" c 195 "$m"; done
printf 'AutoDetect=off\nNodeName=n1 Name=gpu File=%s/dev/nvidia0\nNodeName=n1 Name=gpu File=%s/dev/nvidia1\n' "$work" "$work" >"$work/etc/gres.conf"
: >"$work/etc/slurm.conf"
ARGS=("state_dir=$work/state" "run_dir=$work/run" "nvidia_smi=$FAKES/nvidia-smi" "driver_proc=$FAKES/driver-proc"
      "mps_control=$FAKES/nvidia-cuda-mps-control" "gres_conf=$work/etc/gres.conf" "start_timeout=3" "stop_timeout=2"
      "history=$work/log/history.jsonl")
OPT=SPANK__SLURM_SPANK_OPTION_unilab_mps_unilab_mps
AS=()  # a command the helper runs under (setpriv below)
helper() { # helper prolog|epilog JOB UID GID [VAR=value...]: sets OUT and RC
  OUT=$("${AS[@]}" env -i SLURM_JOB_ID="$2" SLURM_JOB_UID="$3" SLURM_JOB_GID="$4" SLURM_JOB_GPUS=0 SLURMD_NODENAME=n1 \
    SLURM_CONF="$work/etc/slurm.conf" "$OPT=(null)" "${@:5}" "$BIN/unilab-mps-$1" "${ARGS[@]}" 2>&1)
  RC=$?
}
records_of() { ls -A "$work/state" 2>/dev/null | grep -c "^job$1\."; }
plain() { # plain prolog|epilog JOB UID GID [ARG...]: a job that did not ask for MPS; sets OUT and RC
  OUT=$("${AS[@]}" env -i SLURM_JOB_ID="$2" SLURM_JOB_UID="$3" SLURM_JOB_GID="$4" SLURM_JOB_GPUS=0 SLURMD_NODENAME=n1 \
    SLURM_CONF="$work/etc/slurm.conf" "$BIN/unilab-mps-$1" "${@:5}" 2>&1)
  RC=$?
}
reason_of() { echo "$work/state/prolog-failures/job$1.n1.prolog-failure"; }

echo "== success: prolog then epilog"
helper prolog 11 "$U1" "$G1"
expect_eq "prolog of a --unilab-mps job exits 0" 0 "$RC"
expect_contains "prolog names the daemon it started" "$OUT" "started MPS daemon job11.n1.gpu0"
dpid=$(mps_daemons_under "$work/run/11." | head -n1)
check "the job's daemon runs" proc_running "${dpid:-0}"
helper epilog 11 "$U1" "$G1"
expect_eq "epilog that stopped the job's daemon exits 0" 0 "$RC"
expect_contains "epilog says how the daemon ended" "$OUT" "daemon job11.n1.gpu0 (pid $dpid): quit"
check_gone "the job's daemon is gone" "$dpid"
expect_eq "no record of job 11 is left" 0 "$(records_of 11)"

echo "== started with the job user's ids, as Slurm's extern step can (x11 cleanup racing the fork)"
# Slurm 24.11.0 to 25.11.3, RunInJob: the Prolog=/Epilog= can start with uid 0 and
# the user's gid and groups, or entirely as the user (run_command copies the
# effective ids it forked with into the real ones).
AS=(setpriv "--regid=$G1" "--groups=$G1" --)
helper prolog 21 "$U1" "$G1"
expect_eq "uid 0, the user's gid: prolog exits 0" 0 "$RC"
expect_contains "prolog says it took root's ids back" "$OUT" "job 21 prolog: started with uid 0/0 and gid $G1/$G1 (real/effective)"
expect_eq "the record is root's" "0:0" "$(stat -c %u:%g "$work/state/job21.n1.gpu0.json" 2>&1)"
dpid=$(mps_daemons_under "$work/run/21." | head -n1)
check "the job's daemon runs" proc_running "${dpid:-0}"
AS=(setpriv "--reuid=$U1" "--regid=$G1" "--groups=$G1" --)
helper epilog 21 "$U1" "$G1"
expect_eq "entirely the user: epilog fails (the node drains)" 1 "$RC"
expect_contains "epilog says it is not root and how to finish by hand" "$OUT" \
  "job 21 epilog failed: runs as uid $U1 (gid $G1), not root"
expect_contains "... naming what to run" "$OUT" "as root, run unilab-mps-epilog again with the job's SLURM_JOB_ID"
check "it acted on nothing: the daemon runs" proc_running "${dpid:-0}"
expect_eq "... and its record is kept" 1 "$(records_of 21)"
plain epilog 21 "$U1" "$G1"
expect_eq "entirely the user, a job that did not ask: epilog exits 0" 0 "$RC"
expect_contains "... and says why it did nothing" "$OUT" "(the job did not ask for MPS: not failing it)"
AS=(setpriv "--regid=$G1" "--groups=$G1" --)
helper epilog 21 "$U1" "$G1"
AS=()
expect_eq "run again with uid 0 (and the user's gid): epilog exits 0" 0 "$RC"
expect_contains "epilog says it took root's ids back" "$OUT" "job 21 epilog: started with uid 0/0 and gid $G1/$G1"
check_gone "the job's daemon is gone" "$dpid"
expect_eq "no record of job 21 is left" 0 "$(records_of 21)"
expect_eq "no dir or mount of job 21 is left" "" "$(ls -A "$work/run" | grep '^21\.'; grep " $work/run/21\." /proc/self/mounts)"

echo "== failures: non-zero exit"
printf 'mps_fail_start=1\n' >"$FAKES/fake.conf"
helper prolog 12 "$U1" "$G1"
rm -f "$FAKES/fake.conf"
check "prolog whose daemon cannot start exits non-zero" test "$RC" -ne 0
expect_contains "prolog failure is reported" "$OUT" "prolog failed"
check "the failure reason is kept for the job's tasks" test -f "$(reason_of 12)"
expect_eq "only root can read the kept reason" "600 root" "$(stat -c '%a %U' "$(reason_of 12)" 2>/dev/null)"
expect_contains "the kept reason is the tool's own message" "$(cat "$(reason_of 12)" 2>/dev/null)" "mps_fail_start"
expect_eq "the kept reason is one line" 1 "$(wc -l <"$(reason_of 12)" 2>/dev/null)"
ARGS_SAVED=("${ARGS[@]}")
ARGS+=("bogus_key=1")
helper epilog 12 "$U1" "$G1"
ARGS=("${ARGS_SAVED[@]}")
check "epilog with an invalid plugin argument exits non-zero" test "$RC" -ne 0
expect_contains "it says a daemon may be left running" "$OUT" "may be left running"
check "the kept reason survives an epilog that could not run" test -f "$(reason_of 12)"
helper epilog 12 "$U1" "$G1"
expect_eq "epilog of the failed job exits 0" 0 "$RC"
check "the epilog removes the kept reason" test ! -e "$(reason_of 12)"

echo "== a configuration error never touches a job that did not ask for MPS"
plain prolog 14 "$U1" "$G1" "${ARGS[@]}" bogus_key=1
expect_eq "prolog of a plain job with a bad argument exits 0" 0 "$RC"
expect_eq "and says nothing (the arguments are not read)" "" "$OUT"
plain epilog 14 "$U1" "$G1" "${ARGS[@]}" bogus_key=1
expect_eq "epilog of a plain job with a bad argument exits 0" 0 "$RC"
expect_contains "and logs the error" "$OUT" "unknown plugin argument 'bogus_key'"
plain epilog 14 "$U1" "$G1" --config "$work/etc/missing.args"
expect_eq "epilog of a plain job with a missing --config exits 0" 0 "$RC"

echo "== --config FILE: slurm.conf syntax"
{
  echo "# unilab-mps helper arguments"
  printf '%s %s \\\n' "${ARGS[0]}" "${ARGS[1]}"
  printf '   nvidia_smi="%s"   # quoted\n' "$FAKES/nvidia-smi"
  printf '%s\n' "${ARGS[@]:3}"
} >"$work/etc/helper.args"
helper_args=("${ARGS[@]}")
ARGS=(--config "$work/etc/helper.args")
helper prolog 15 "$U1" "$G1"
expect_eq "prolog with --config (comments, continuation, quotes) exits 0" 0 "$RC"
expect_contains "and started the daemon" "$OUT" "started MPS daemon job15.n1.gpu0"
helper epilog 15 "$U1" "$G1"
expect_eq "epilog with --config exits 0" 0 "$RC"
expect_eq "no record of job 15 is left" 0 "$(records_of 15)"
printf 'state_dir=%s\nrun_dir "%s"\n' "$work/state" "$work/run" >"$work/etc/bad.args"
ARGS=(--config "$work/etc/bad.args")
helper prolog 16 "$U1" "$G1"
check "a --config error fails the prolog of an MPS job" test "$RC" -ne 0
expect_contains "naming file and line" "$OUT" "$work/etc/bad.args:2: 'run_dir' is not key=value"
mkdir -p "$work/open" && chmod 777 "$work/open" && cp "$work/etc/helper.args" "$work/open/"
ARGS=(--config "$work/open/helper.args")
helper prolog 16 "$U1" "$G1"
check "a --config file in a world-writable directory is refused" test "$RC" -ne 0
ARGS=("${helper_args[@]}")

echo "== a daemon that survives SIGKILL fails the epilog (the node drains)"
kticks=$(awk '{sub(/.*\) /, ""); print $20}' /proc/2/stat 2>/dev/null)
if [ "$(awk '/^Name:/{print $2}' /proc/2/status 2>/dev/null)" != kthreadd ] || [ -z "$kticks" ]; then
  skip "survives SIGKILL" "pid 2 is not kthreadd here (a PID namespace without kernel threads)"
else
  helper prolog 13 0 0
  expect_eq "prolog of root's job exits 0" 0 "$RC"
  rec=$work/state/job13.n1.gpu0.json
  real=$(sed -n 's/.*"pid": \([0-9]*\).*/\1/p' "$rec")
  kill -9 "$real" 2>/dev/null
  # The record now names a process that is live, root's, with the recorded
  # start time, and that no signal can end.
  sed -i -e "s/\"pid\": $real/\"pid\": 2/" -e "s/\"process_start_ticks\": [0-9]*/\"process_start_ticks\": $kticks/" "$rec"
  helper epilog 13 0 0
  check "epilog whose daemon survives SIGKILL exits non-zero" test "$RC" -ne 0
  expect_contains "epilog names the survivor" "$OUT" "still alive after quit, SIGTERM and SIGKILL"
  check "its record is kept for the admin" test -e "$rec"
  check "kthreadd is unharmed (kernel threads ignore signals)" proc_running 2
  rm -f "$rec"
  umount -l "$work/run/$(run_entry 13 n1 0)" 2>/dev/null; rm -rf "$work/run/$(run_entry 13 n1 0)"
fi
finish
