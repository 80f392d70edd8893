#!/usr/bin/env bash
# `unilab-mps probe` against a real fake daemon: an explicit mps request
# validates while the daemon runs and fails closed (exit 1, reason on stderr)
# once it is stopped or dead; the null request always exits 0 and reports
# ambient state; --manifest records the evidence under "cuda_process_sharing".
# Usage: probe_cli_test.sh BUILD_DIR   (uses BUILD_DIR/cli/unilab-mps and BUILD_DIR/fakes/bin)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
MIN_CHECKS=40
B=$build/cli/unilab-mps
fakes=$build/fakes/bin

work=$(mktemp -d /tmp/unilab-probe.XXXXXX)
chmod 755 "$work"
cleanup() {
  for pid in $(mps_daemons_under "$work"); do kill -9 "$pid" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT

export UNILAB_MPS_NVIDIA_SMI=$fakes/nvidia-smi
export UNILAB_MPS_CONTROL=$fakes/nvidia-cuda-mps-control
export UNILAB_MPS_STATE_DIR=$work/state UNILAB_MPS_RUN_DIR=$work/run
export UNILAB_FAKE_CONF=$work/fake.conf  # absent: the fakes' defaults, whatever sits in the build dir
unset CUDA_VISIBLE_DEVICES CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
GPU1=GPU-3c8a1d5e-94b2-4f7e-8a61-0b2c9d4e5f60
probe_mps=("$B" probe --requested mps --learner-device cuda:0 --collector-device cuda:0 --backend test)
probe_none=("$B" probe --requested none --learner-device cuda:0 --collector-device cuda:0 --backend test)

echo "== explicit mps with a running daemon"
out=$($B start 1 2>&1); rc=$?
expect_eq "start 1 exits 0" 0 "$rc"
envout=$($B env)
eval "$envout"
daemon_pid=$(tr -dc '0-9' <"$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid")
json=$("${probe_mps[@]}" --json 2>"$work/err"); rc=$?
expect_eq "mps probe exits 0" 0 "$rc"
expect_contains "mps probe validated" "$json" '"validated": true'
expect_contains "configured mps" "$json" '"configured": "mps"'
expect_contains "effective mps" "$json" '"effective": "mps"'
expect_contains "learner GPU is the daemon's" "$json" "\"learner_gpu_uuid\": \"$GPU1\""
expect_contains "collector GPU is the daemon's" "$json" "\"collector_gpu_uuid\": \"$GPU1\""
expect_contains "control pipe is a socket" "$json" '"control_pipe_kind": "socket"'
expect_contains "server pid from the pid file" "$json" "\"server_pid\": $daemon_pid"
expect_contains "pipe directory from the env" "$json" "\"pipe_directory\": \"$CUDA_MPS_PIPE_DIRECTORY\""
expect_eq "nothing on stderr" "" "$(cat "$work/err")"
human=$("${probe_mps[@]}" --rank 1 --world-size 2)
expect_contains "human output: key: value lines" "$human" $'validated: true\nrank: 1\nworld_size: 2'
expect_contains "human output: unset facts are null" "$human" "ambient_server: false"

echo "== manifest"
m=$work/manifest.json
printf '{"producer": "trainer", "steps": 3}\n' >"$m"
"${probe_mps[@]}" --manifest "$m" >/dev/null; rc=$?
expect_eq "probe --manifest exits 0" 0 "$rc"
mj=$(cat "$m")
expect_contains "manifest keeps other keys" "$mj" '"producer": "trainer"'
expect_contains "manifest keeps other keys (2)" "$mj" '"steps": 3'
expect_contains "manifest has the section" "$mj" '"cuda_process_sharing": {'
expect_contains "manifest has rank 0" "$mj" '"0": {'
expect_contains "manifest entry is validated" "$mj" '"validated": true'
"${probe_mps[@]}" --manifest "$m" >/dev/null; rc=$?
expect_eq "identical re-record exits 0" 0 "$rc"
"${probe_mps[@]}" --rank 1 --world-size 2 --manifest "$m" >/dev/null; rc=$?
expect_eq "second rank records" 0 "$rc"
expect_contains "manifest has rank 1" "$(cat "$m")" '"1": {'
expect_contains "rank 0 still there" "$(cat "$m")" '"0": {'
expect_eq "manifest mode kept" "$(stat -c %a "$m")" "644"
before=$(cat "$m")
err=$("${probe_none[@]}" --manifest "$m" 2>&1 >/dev/null); rc=$?
expect_eq "conflicting entry for rank 0 exits 1" 1 "$rc"
expect_contains "conflict is named" "$err" "different cuda_process_sharing evidence for rank 0"
expect_eq "conflict leaves the manifest alone" "$before" "$(cat "$m")"
"${probe_none[@]}" --manifest "$work/new.json" >/dev/null; rc=$?
expect_eq "missing manifest is created" 0 "$rc"
expect_eq "new manifest is 0644" "644" "$(stat -c %a "$work/new.json")"

echo "== explicit mps failures while the daemon runs"
err=$(CUDA_VISIBLE_DEVICES=0 "${probe_mps[@]}" 2>&1 >/dev/null); rc=$?
expect_eq "learner on another GPU exits 1" 1 "$rc"
expect_contains "names the GPU prerequisite" "$err" "unilab-mps: cuda_process_sharing=mps needs a daemon serving the learner's GPU"
err=$(CUDA_VISIBLE_DEVICES="$GPU1,0" "$B" probe --requested mps --learner-device cuda:0 --collector-device cuda:1 --backend test 2>&1); rc=$?
expect_eq "learner and collector apart exits 1" 1 "$rc"
expect_contains "names the one-GPU prerequisite" "$err" "needs learner and collector on one GPU"
err=$(CUDA_VISIBLE_DEVICES=3C8A1D5E94B24F7E8A610B2C9D4E5F60 "$B" probe --requested mps --learner-device cuda --collector-device cuda:0 --backend test --json 2>&1); rc=$?
expect_eq "other UUID spelling still validates" 0 "$rc"
err=$("$B" probe --requested mps --learner-device cuda:0 --backend test 2>&1); rc=$?
expect_eq "no collector device exits 1" 1 "$rc"
expect_contains "names the collector prerequisite" "$err" "needs a CUDA collector device"
err=$("${probe_mps[@]}" --rank 2 --world-size 2 2>&1); rc=$?
expect_eq "rank outside the world exits 1" 1 "$rc"
expect_contains "names the rank prerequisite" "$err" "needs a valid rank and world size"

echo "== null request with a running daemon"
json=$("${probe_none[@]}" --json); rc=$?
expect_eq "null probe exits 0" 0 "$rc"
expect_contains "ambient server seen" "$json" '"ambient_server": true'
expect_contains "null: configured is null" "$json" '"configured": null'
expect_contains "null: not validated" "$json" '"validated": false'
expect_contains "null: server pid" "$json" "\"server_pid\": $daemon_pid"

echo "== after stop"
$B stop >/dev/null; rc=$?
expect_eq "stop exits 0" 0 "$rc"
out=$("${probe_mps[@]}" 2>"$work/err"); rc=$?
expect_eq "mps probe after stop exits 1" 1 "$rc"
expect_eq "nothing on stdout" "" "$out"
expect_contains "reason on stderr" "$(cat "$work/err")" "unilab-mps: cuda_process_sharing=mps needs an MPS control pipe"
expect_eq "reason is one line" 1 "$(wc -l <"$work/err")"
json=$("${probe_none[@]}" --json); rc=$?
expect_eq "null probe after stop exits 0" 0 "$rc"
expect_contains "null after stop: no ambient server" "$json" '"ambient_server": false'
expect_contains "null after stop: control missing" "$json" '"control_pipe_kind": "missing"'
expect_contains "null after stop: no server pid" "$json" '"server_pid": null'

echo "== a killed daemon leaves a stale socket"
$B start 1 >/dev/null 2>&1
eval "$($B env)"
dead_pid=$(tr -dc '0-9' <"$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid")
kill -9 "$dead_pid"
for _ in $(seq 50); do proc_running "$dead_pid" || break; sleep 0.1; done
check "stale socket remains" test -S "$CUDA_MPS_PIPE_DIRECTORY/control"
err=$("${probe_mps[@]}" 2>&1); rc=$?
expect_eq "mps probe on a stale socket exits 1" 1 "$rc"
expect_contains "names the answering prerequisite" "$err" "needs an answering MPS control daemon"
json=$("${probe_none[@]}" --json); rc=$?
expect_eq "null probe on a stale socket exits 0" 0 "$rc"
expect_contains "stale: kind socket" "$json" '"control_pipe_kind": "socket"'
expect_contains "stale: no ambient server" "$json" '"ambient_server": false'
expect_contains "stale: dead pid not reported" "$json" '"server_pid": null'
$B stop >/dev/null 2>&1
unset CUDA_VISIBLE_DEVICES CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY

echo "== usage errors"
for args in "--rank x" "--world-size 1.5" "--requested maybe" "--requested"; do
  # shellcheck disable=SC2086
  "$B" probe --requested mps --learner-device cuda:0 --backend test $args >/dev/null 2>&1; rc=$?
  expect_eq "usage error: $args" 2 "$rc"
done
"$B" probe --requested mps --learner-device cuda:0 >/dev/null 2>&1; rc=$?
expect_eq "usage error: no --backend" 2 "$rc"
"$B" probe --learner-device cuda:0 --backend test >/dev/null 2>&1; rc=$?
expect_eq "usage error: no --requested" 2 "$rc"

echo "== none: a rank outside the world is a usage error, nothing recorded"
for rw in "-1 1" "2 2" "0 0"; do
  read -r r w <<<"$rw"
  err=$("${probe_none[@]}" --rank "$r" --world-size "$w" --manifest "$work/badrank.json" 2>&1 >/dev/null); rc=$?
  expect_eq "none with rank $r of $w exits 2" 2 "$rc"
  expect_contains "none with rank $r of $w: says why" "$err" "0 <= rank < world size"
done
check_not "no manifest written for a bad rank" test -e "$work/badrank.json"
finish
