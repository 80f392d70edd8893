#!/usr/bin/env bash
# The CLI against real fake daemons: as root, as the current user and as two
# non-root users. Proves the round trip leaves nothing behind and that stale,
# corrupt and hostile state is refused. Usage: cli_lifecycle_test.sh BUILD_DIR
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
MIN_CHECKS=95

work=$(mktemp -d /tmp/unilab-cli.XXXXXX)
chmod 755 "$work"
cleanup() {
  for pid in $(mps_daemons_under "$work"); do kill -9 "$pid" 2>/dev/null; done
  [ -n "${sleeper:-}" ] && kill "$sleeper" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
stage_binaries "$build" "$work/stage"
ensure_test_users
B=$work/stage/bin/unilab-mps
export UNILAB_MPS_NVIDIA_SMI=$work/stage/fakes/nvidia-smi
export UNILAB_MPS_CONTROL=$work/stage/fakes/nvidia-cuda-mps-control
KEEP_VARS="UNILAB_MPS_NVIDIA_SMI UNILAB_MPS_CONTROL"

echo "== root round trip"
export UNILAB_MPS_STATE_DIR=$work/root-state UNILAB_MPS_RUN_DIR=$work/root-run
out=$($B start 1 2>&1); rc=$?
expect_eq "root: start exits 0" 0 "$rc"
expect_contains "root: start names the daemon" "$out" "started gpu-3c8a1d5e"
envout=$($B env)
expect_contains "root: env exports UUID visibility" "$envout" "export CUDA_VISIBLE_DEVICES='GPU-3c8a1d5e-94b2-4f7e-8a61-0b2c9d4e5f60'"
eval "$envout"
client=$("$work/stage/fakes/fake-cuda-client" --hold 0 2>&1)
expect_contains "root: a client joins the daemon" "$client" "connected to MPS server"
json=$($B status --json)
pid=$(printf '%s' "$json" | grep -m1 '"pid"' | tr -dc '0-9')
check "root: status --json reports a live daemon" grep -q '"live": true' <<<"$json"
# The recorded pid is the control daemon of this pipe dir (not merely some pid).
expect_eq "root: recorded pid is the daemon process" "CUDA_MPS_PIPE_DIRECTORY=$work/root-run/gpu-3c8a1d5e/pipe" \
  "$(tr '\0' '\n' <"/proc/${pid:-none}/environ" 2>/dev/null | grep '^CUDA_MPS_PIPE_DIRECTORY=')"
expect_eq "root: recorded pid runs the MPS control program" "nvidia-cuda-mps-control" "$(basename "$(readlink "/proc/${pid:-none}/exe")")"
owner=$(stat -c %U:%a "$work/root-run/gpu-3c8a1d5e/pipe")
expect_eq "root: pipe dir is private" "root:700" "$owner"
out=$($B stop); rc=$?
expect_eq "root: stop exits 0" 0 "$rc"
expect_contains "root: stop used quit" "$out" "quit"
check_gone "root: daemon process is gone" "$pid"
expect_eq "root: no pipe/log dir remains" "" "$(ls -A "$work/root-run")"
expect_eq "root: no record remains" "" "$(ls -A "$work/root-state")"
unset CUDA_VISIBLE_DEVICES CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY

echo "== non-root users, per-gpu and multi topologies"
for u in unimps1 unimps2; do
  uid=$(id -u "$u")
  sel=per-gpu:0,2; [ "$u" = unimps2 ] && sel=per-gpu:1,3
  export UNILAB_MPS_STATE_DIR=$work/$u-state UNILAB_MPS_RUN_DIR=$work/$u-run
  KEEP_VARS="UNILAB_MPS_NVIDIA_SMI UNILAB_MPS_CONTROL UNILAB_MPS_STATE_DIR UNILAB_MPS_RUN_DIR"
  mkdir -p "$work/$u-run" "$work/$u-state" && chown "$u" "$work/$u-run" "$work/$u-state" && chmod 700 "$work/$u-run" "$work/$u-state"
  out=$(as_user_env "$u" "$B" start "$sel" 2>&1); rc=$?
  expect_eq "$u: per-gpu start exits 0" 0 "$rc" || true; [ "$rc" = 0 ] || echo "$out"
  n=$(as_user_env "$u" "$B" status --json | grep -c '"live": true')
  expect_eq "$u: two live daemons" 2 "$n"
  for p in $(mps_daemons_under "$work/$u-run"); do
    expect_eq "$u: daemon $p runs as the user" "$uid" "$(awk '/^Uid:/{print $2}' "/proc/$p/status")"
  done
  cvd=$(tr '\0' '\n' <"/proc/$(mps_daemons_under "$work/$u-run" | head -1)/environ" | grep '^CUDA_VISIBLE_DEVICES=')
  expect_contains "$u: daemon environment holds a UUID" "$cvd" "CUDA_VISIBLE_DEVICES=GPU-"
  if [ "$u" = unimps1 ]; then
    out=$(as_user_env "$u" "$B" env --gpu gpu-7FDAF0A5179BF636D15DDAF243E3FF16 2>&1)
    expect_contains "$u: env --gpu matches any UUID spelling" "$out" "CUDA_VISIBLE_DEVICES='GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16'"
  fi
done

echo "== one user cannot reach or stop another's daemons"
p2=$(mps_daemons_under "$work/unimps2-run" | head -1)
pipe2=$(tr '\0' '\n' <"/proc/$p2/environ" | sed -n 's/^CUDA_MPS_PIPE_DIRECTORY=//p')
# Control: the same command as unimps2 connects, so a failure below is the refusal.
out=$(KEEP_VARS="" as_user_env unimps2 env CUDA_MPS_PIPE_DIRECTORY="$pipe2" "$work/stage/fakes/fake-cuda-client" --hold 0 2>&1)
expect_contains "unimps2 itself connects to its pipe (control)" "$out" "connected to MPS server"
out=$(KEEP_VARS="" as_user_env unimps1 env CUDA_MPS_PIPE_DIRECTORY="$pipe2" "$work/stage/fakes/fake-cuda-client" --hold 0 2>&1); rc=$?
check "unimps1 cannot connect to unimps2's pipe" test "$rc" -ne 0
expect_contains "unimps1 is refused by the pipe dir's permissions" "$out" "$pipe2/control: Permission denied"
chmod 755 "$work/unimps2-state"  # even readable, another user's records are not trusted
out=$(UNILAB_MPS_STATE_DIR=$work/unimps2-state as_user_env unimps1 "$B" stop --all 2>&1); rc=$?
chmod 700 "$work/unimps2-state"
check "unimps1 stop --all on unimps2's state dir is refused" test "$rc" -ne 0
expect_contains "refusal names the ownership problem" "$out" "refusing"
check "unimps2's daemon survives" proc_running "$p2"
# A record of unimps2's daemon planted in unimps1's own state dir: the CLI
# itself must refuse it (the kernel would refuse the signals anyway).
n2=$(basename "$(dirname "$pipe2")")
install -o unimps1 -m 600 "$work/unimps2-state/$n2.json" "$work/unimps1-state/$n2.json"
out=$(UNILAB_MPS_STATE_DIR=$work/unimps1-state as_user_env unimps1 "$B" stop "$n2" 2>&1); rc=$?
expect_eq "unimps1 cannot stop a daemon by unimps2's record (exit 1)" 1 "$rc"
expect_contains "unimps1: the refusal names the other uid" "$out" "belongs to uid $(id -u unimps2)"
# The same record rewritten to unimps1's uid: the daemon runs as another uid,
# so it is not the recorded process: stale, nothing signalled.
sed -i -E "s/\"uid\": *$(id -u unimps2)([^0-9]|$)/\"uid\": $(id -u unimps1)\1/" "$work/unimps1-state/$n2.json"
out=$(UNILAB_MPS_STATE_DIR=$work/unimps1-state as_user_env unimps1 "$B" stop "$n2" 2>&1); rc=$?
expect_eq "unimps1: a record forged to its uid is stale (exit 3)" 3 "$rc"
expect_contains "unimps1: forged record: nothing was signalled" "$out" "nothing was signalled"
check_not "unimps1: the forged record is removed" test -e "$work/unimps1-state/$n2.json"
check "unimps2's daemon still survives" proc_running "$p2"
check "unimps2's own record is untouched" test -e "$work/unimps2-state/$n2.json"

echo "== multi-GPU daemon for unimps1"
export UNILAB_MPS_STATE_DIR=$work/unimps1-state UNILAB_MPS_RUN_DIR=$work/unimps1-run
out=$(as_user_env unimps1 "$B" start 1,3 --name pair 2>&1); rc=$?
expect_eq "multi: start exits 0" 0 "$rc"
out=$(as_user_env unimps1 "$B" env pair)
expect_contains "multi: both UUIDs visible" "$out" "GPU-3c8a1d5e-94b2-4f7e-8a61-0b2c9d4e5f60,GPU-0f1e2d3c-4b5a-4697-8877-66554433aa10"

for u in unimps1 unimps2; do
  export UNILAB_MPS_STATE_DIR=$work/$u-state UNILAB_MPS_RUN_DIR=$work/$u-run
  out=$(as_user_env "$u" "$B" stop --all 2>&1); rc=$?
  expect_eq "$u: stop --all exits 0" 0 "$rc"
  expect_eq "$u: no daemon process remains" "" "$(mps_daemons_under "$work/$u-run")"
  expect_eq "$u: no pipe/log dir remains" "" "$(ls -A "$work/$u-run")"
  expect_eq "$u: no record remains" "" "$(ls -A "$work/$u-state" 2>/dev/null)"
done

echo "== a record pointing to a live unrelated process is refused"
export UNILAB_MPS_STATE_DIR=$work/root-state UNILAB_MPS_RUN_DIR=$work/root-run
# The unrelated process must start in another clock tick than the daemon
# (start times have 10 ms resolution; a real PID cannot wrap within one).
sleep 300 & sleeper=$!
sleep 0.2
$B start 2 --name victim >/dev/null
rec=$work/root-state/victim.json
real=$(grep '"pid"' "$rec" | tr -dc '0-9')
sed -i "s/\"pid\": $real/\"pid\": $sleeper/" "$rec"
out=$($B stop victim 2>&1); rc=$?
expect_eq "stale: stop exits 3 (stale)" 3 "$rc"
expect_contains "stale: message says nothing was signalled" "$out" "nothing was signalled"
check "stale: the unrelated process survives" kill -0 "$sleeper"
check_not "stale: record removed" test -e "$rec"
kill -9 "$real" 2>/dev/null; kill "$sleeper"; sleeper=

echo "== exit codes of every command (README.md: 0 ok, 1 error, 2 usage, 3 stale cleaned, 4 not ready)"
out=$($B start 2 --name .hidden 2>&1); rc=$?
expect_eq "exit 2: start --name .hidden" 2 "$rc"
expect_contains "exit 2: the name error states the leading-dot rule" "$out" "not starting with '.'"
$B stop --bogus >/dev/null 2>&1; expect_eq "exit 2: stop --bogus" 2 "$?"
$B env .x >/dev/null 2>&1; expect_eq "exit 2: env with an invalid name" 2 "$?"
$B nosuchcommand >/dev/null 2>&1; expect_eq "exit 2: unknown command" 2 "$?"
$B stop nosuch >/dev/null 2>&1; expect_eq "exit 1: stop of an unknown name" 1 "$?"
$B env nosuch >/dev/null 2>&1; expect_eq "exit 1: env of an unknown name" 1 "$?"
$B start 9 >/dev/null 2>&1; expect_eq "exit 1: start on a GPU that does not exist" 1 "$?"
$B doctor 9 >/dev/null 2>&1; expect_eq "exit 4: doctor on a GPU that does not exist" 4 "$?"
$B doctor 2 >/dev/null 2>&1; expect_eq "exit 0: doctor on a usable GPU" 0 "$?"
$B visible-devices 0,3 >/dev/null 2>&1; expect_eq "exit 0: visible-devices" 0 "$?"
# env NAME on a dead daemon: exit 3 and the record really is cleaned.
$B start 2 --name dead >/dev/null 2>&1
dead=$(grep '"pid"' "$work/root-state/dead.json" | tr -dc '0-9')
kill -9 "${dead:-0}"; for _ in $(seq 1 50); do proc_running "${dead:-0}" || break; sleep 0.1; done
out=$($B env dead 2>&1); rc=$?
expect_eq "exit 3: env on a dead daemon" 3 "$rc"
check_not "exit 3: env removed the stale record" test -e "$work/root-state/dead.json"
check_not "exit 3: env removed the stale directories" test -e "$work/root-run/dead"
# stop --all with one stale record: exit 3, like stop NAME.
$B start 2 --name dead2 >/dev/null 2>&1
dead=$(grep '"pid"' "$work/root-state/dead2.json" | tr -dc '0-9')
kill -9 "${dead:-0}"; for _ in $(seq 1 50); do proc_running "${dead:-0}" || break; sleep 0.1; done
out=$($B stop --all 2>&1); rc=$?
expect_eq "exit 3: stop --all that cleaned a stale record" 3 "$rc"
expect_contains "stop --all reports it as stale" "$out" "dead2: stale"
check_not "stop --all removed the stale record" test -e "$work/root-state/dead2.json"
$B stop --all >/dev/null 2>&1; expect_eq "exit 0: stop --all with nothing recorded" 0 "$?"
# start --foreground: the daemon runs until signalled; its directories go with it.
$B start 2 --name fg --foreground >"$work/fg.out" 2>&1 &
fg=$!
for _ in $(seq 1 100); do [ -S "$work/root-run/fg/pipe/control" ] && break; sleep 0.1; done
check "foreground: the daemon answers" test -S "$work/root-run/fg/pipe/control"
kill -TERM "$fg"; wait "$fg"
check_not "foreground: its run directories are removed when it ends" test -e "$work/root-run/fg"
expect_eq "foreground: no daemon is left" "" "$(mps_daemons_under "$work/root-run/fg/")"

echo "== a corrupt record is reported and ignored"
mkdir -p "$work/root-state" && chmod 700 "$work/root-state"
printf '{"schema_version": 1, "name": "broken"' >"$work/root-state/broken.json"
out=$($B status 2>&1); rc=$?
expect_eq "corrupt: status still exits 0" 0 "$rc"
expect_contains "corrupt: status reports it" "$out" "ignored record broken.json"
out=$($B stop --all 2>&1); rc=$?
expect_eq "corrupt: stop --all ignores it" 0 "$rc"
check "corrupt: the file is left for inspection" test -e "$work/root-state/broken.json"
rm -f "$work/root-state/broken.json"

echo "== a symlink planted where a pipe dir goes is refused"
mkdir -p "$work/elsewhere"
ln -s "$work/elsewhere" "$work/root-run/gpu-a1b2c3d4"
out=$($B start 2 2>&1); rc=$?
check "symlink: start fails" test "$rc" -ne 0
expect_contains "symlink: message names the symlink" "$out" "symlink"
expect_eq "symlink: nothing created behind it" "" "$(ls -A "$work/elsewhere")"
expect_eq "symlink: no record written" "" "$(ls -A "$work/root-state")"
rm "$work/root-run/gpu-a1b2c3d4"

echo "== a pid file naming a decoy is refused: the daemon is proven by ancestry (#22 item 3)"
# The fake renames a pid file naming its sleeping child "decoy" (same user,
# same pipe dir in its environment) over its own before it reports ready,
# as a user racing the start with inotify did. Before, the record named the
# decoy and the real daemon ran unrecorded.
printf 'mps_pid_file_decoy=1\n' >"$work/stage/fakes/fake.conf"
chmod 644 "$work/stage/fakes/fake.conf"
out=$($B start 2 --name decoy 2>&1); rc=$?
: >"$work/stage/fakes/fake.conf"
check "decoy: start fails" test "$rc" -ne 0
expect_contains "decoy: the message names the pid file and the daemon this start launched" "$out" "but the daemon this start launched is pid"
check_not "decoy: no record is written" test -e "$work/root-state/decoy.json"
for _ in $(seq 1 50); do [ -z "$(mps_daemons_under "$work/root-run/decoy/")$(pgrep -x decoy)" ] && break; sleep 0.1; done
expect_eq "decoy: the launched daemon is ended" "" "$(mps_daemons_under "$work/root-run/decoy/")"
expect_eq "decoy: so is the decoy (it dies with the daemon)" "" "$(pgrep -x decoy)"

echo "== MIG: a daemon on a MIG device, never on its MIG-enabled GPU (#25)"
# GPU 1 (GPU-3c8a1d5e, minor 0) cut into two MIG devices; nvidia-smi lists them (-L, the table).
M0=MIG-1a2b3c4d-5e6f-5a7b-8c9d-0e1f2a3b4c5d M1=MIG-2b3c4d5e-6f70-5b8c-9d0e-1f2a3b4c5d6e
{ cat "$work/stage/fakes/gpus.csv"; printf 'MIG, 1, %s, 3g.71gb, 0, 1, 0\nMIG, 1, %s, 1g.18gb, 1, 5, 0\n' "$M0" "$M1"; } >"$work/stage/fakes/gpus-mig.csv"
printf 'gpu_table=%s\nsmi_mig_mode.1=Enabled\n' "$work/stage/fakes/gpus-mig.csv" >"$work/stage/fakes/fake.conf"
chmod 644 "$work/stage/fakes/fake.conf" "$work/stage/fakes/gpus-mig.csv"
out=$($B start "$M1" 2>&1); rc=$?
expect_eq "mig: start on a MIG device exits 0 ($out)" 0 "$rc"
expect_contains "mig: the daemon is named for the MIG device" "$out" "started mig-2b3c4d5e"
mpid=$(mps_daemons_under "$work/root-run/mig-2b3c4d5e/" | head -n1)
expect_eq "mig: the daemon's CUDA_VISIBLE_DEVICES is the MIG UUID" "CUDA_VISIBLE_DEVICES=$M1" \
  "$(tr '\0' '\n' <"/proc/${mpid:-none}/environ" 2>/dev/null | grep '^CUDA_VISIBLE_DEVICES=')"
st=$($B status 2>&1)
expect_contains "mig: status names the MIG device and its parent" "$st" "MIG 1g.18gb of GPU-3c8a1d5e-94b2-4f7e-8a61-0b2c9d4e5f60 (GPU 1, GPU instance 5, compute instance 0)"
eval "$($B env mig-2b3c4d5e)"
client=$("$work/stage/fakes/fake-cuda-client" --hold 0 2>&1)
expect_contains "mig: a client with the MIG UUID joins the daemon" "$client" "connected to MPS server"
unset CUDA_VISIBLE_DEVICES CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
out=$($B start 1 --name whole 2>&1); rc=$?
check "mig: the MIG-enabled GPU itself is refused" test "$rc" -ne 0
expect_contains "mig: ... naming the fix" "$out" "has MIG enabled: MPS runs on its MIG devices, one daemon each"
out=$($B start "$M0,$M1" --name both 2>&1); rc=$?
check "mig: one daemon over two MIG devices is refused" test "$rc" -ne 0
expect_contains "mig: ... naming per-gpu:" "$out" "use per-gpu:$M0,$M1"
out=$($B stop mig-2b3c4d5e 2>&1); rc=$?
expect_eq "mig: stop exits 0" 0 "$rc"
check_gone "mig: the daemon is gone" "$mpid"
: >"$work/stage/fakes/fake.conf"

echo "== an over-long pipe directory is refused before anything starts"
long=$work/$(printf 'x%.0s' $(seq 1 120))
out=$($B start 2 --pipe-dir "$long" 2>&1); rc=$?
check "long path: start fails" test "$rc" -ne 0
expect_contains "long path: message names the UNIX socket limit" "$out" "UNIX sockets allow 107"

finish
