#!/usr/bin/env bash
# End-to-end, for the site admin: the Debian package that CPack builds from
# BUILD_DIR, unpacked into a temporary root (`dpkg-deb -x`: the machine stays
# clean), runs a real local Slurm cluster whose plugstack.conf names the
# *installed* unilab_mps.so and whose plugin arguments name the fake NVIDIA
# tools. Checked there: the package's metadata, dependencies and man page;
# `unilab-mps doctor --node` on a ready node (exit 0) and on broken ones
# (exit 4 naming the problem); per-job MPS limits applied before any client,
# rejected at submit time over the site maximum or malformed, visible in
# `unilab-mps status --job`; a failed job's daemon log copied into the slurmd log.
# With ADMIN_E2E_DPKG_INSTALL=1 it also installs the package for real
# (`dpkg -i`), runs a job against /usr, and removes it again (`dpkg -r`).
# Usage: tests/e2e/admin_e2e.sh BUILD_DIR     (root; prints "N passed, M failed")
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/e2e_lib.sh"  # with tests/lib.sh and cluster.sh
MIN_CHECKS=60
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
export CLUSTER_PORT_BASE=${CLUSTER_PORT_BASE:-18500}
require_root

WORK=$(mktemp -d /tmp/uadm.XXXXXX)  # short: run_dir/.../pipe/control_privileged must fit 107 bytes
chmod 755 "$WORK"
ROOT=$WORK/root
STAGE=$WORK/stage
DPKG_INSTALLED=0

teardown() {
  cluster_down
  for pid in $(mps_daemons_under "$WORK"); do kill -9 "$pid" 2>/dev/null; done
  # purge: the postrm keeps a removed package in dpkg's "config-files" state
  if [ "$DPKG_INSTALLED" = 1 ]; then dpkg --purge unilab-mps >/dev/null 2>&1; fi
  rm -rf "$WORK"
}
trap teardown EXIT

# Line number of the first line of FILE matching REGEX (0 when none).
first_line() { local n; n=$(grep -n -m1 -E "$2" "$1" 2>/dev/null | cut -d: -f1); echo "${n:-0}"; }

# ------------------------------------------------------------------ the package
echo "== package"
PKG_OUT=$WORK/pkg
if ! (cd "$build" && cpack -G DEB -B "$PKG_OUT" >"$WORK/cpack.log" 2>&1); then
  fail "cpack builds the .deb" "$(tail -5 "$WORK/cpack.log")"
  finish
  exit 1
fi
DEB=$(ls "$PKG_OUT"/unilab-mps_*_amd64.deb 2>/dev/null | head -n1)
check "cpack builds unilab-mps_VERSION-1_amd64.deb" test -f "$DEB"
expect_eq "package name" "unilab-mps" "$(dpkg-deb -f "$DEB" Package)"
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
expect_eq "package version is the project's" "$version-1" "$(dpkg-deb -f "$DEB" Version)"
depends=$(dpkg-deb -f "$DEB" Depends)
slurm_series=$(dpkg-query -W -f='${Version}' slurm-wlm-basic-plugins 2>/dev/null | cut -d. -f1,2)
expect_contains "depends on this Slurm series ($slurm_series)" "$depends" "slurm-wlm-basic-plugins (>= $slurm_series~)"
for lib in libc6 libstdc++6 libgcc-s1; do expect_contains "depends on $lib" "$depends" "$lib"; done
expect_not_contains "no build-only dependency (fmt, nlohmann-json are header-only)" "$depends" "fmt"

# Every dependency is satisfied by what this machine has installed.
unsat=""
IFS=',' read -r -a clauses <<<"$depends"
for clause in "${clauses[@]}"; do
  clause=$(echo "$clause" | xargs)
  pkg=${clause%% *}
  have=$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null) || { unsat+=" $clause"; continue; }
  if [[ $clause =~ \((\>=|\<\<|=|\<=|\>\>)\ ([^\)]*)\) ]]; then
    op=${BASH_REMATCH[1]}
    case $op in '>=') op=ge ;; '<<') op=lt ;; '=') op=eq ;; '<=') op=le ;; '>>') op=gt ;; esac
    dpkg --compare-versions "$have" "$op" "${BASH_REMATCH[2]}" || unsat+=" $clause (have $have)"
  fi
done
expect_eq "every Depends clause is satisfied here" "" "$unsat"
check "dpkg accepts the package (dpkg --dry-run -i)" dpkg --dry-run -i "$DEB"

mkdir -p "$ROOT" && chmod 755 "$ROOT"
dpkg-deb -x "$DEB" "$ROOT"
PLUGIN=$ROOT/usr/lib/x86_64-linux-gnu/slurm-wlm/unilab_mps.so
CLI=$ROOT/usr/bin/unilab-mps
MAN=$ROOT/usr/share/man/man1/unilab-mps.1
for f in "$PLUGIN" "$CLI" "$ROOT/usr/sbin/unilab-mps-prolog" "$ROOT/usr/sbin/unilab-mps-epilog" "$MAN" \
  "$ROOT/usr/share/doc/unilab-mps/ADMIN.md" "$ROOT/usr/share/doc/unilab-mps/README.md" \
  "$ROOT/usr/share/doc/unilab-mps/examples/plugstack.conf.d/unilab-mps.conf" \
  "$ROOT/usr/share/doc/unilab-mps/examples/slurm.conf.snippet" "$ROOT/usr/share/doc/unilab-mps/examples/gres.conf.snippet"; do
  check "installs ${f#"$ROOT"}" test -f "$f"
done
check_not "installs nothing under /etc (the plugin is switched on by the admin)" test -e "$ROOT/etc"
check "the installed plugin exports the SPANK entry points" bash -c "nm -D --defined-only '$PLUGIN' | grep -q ' slurm_spank_job_prolog$'"
check "the installed CLI runs" "$CLI" --help

# The man page comes from the --help table: every command is a section.
commands=$("$CLI" --help | sed -n '/^commands:/,/^$/p' | sed -n 's/^  \([a-z-]*\).*/\1/p')
check "--help lists commands" test -n "$commands"
for c in $commands; do
  section=".SS $(printf '%s' "$c" | sed 's/-/\\-/g')"   # roff spells '-' as '\-'
  check "man page has a section for '$c'" grep -qxF -- "$section" "$MAN"
done
check "man page renders without groff warnings" bash -c "groff -man -ww -z '$MAN' 2>&1 | (! grep -q .)"
expect_contains "man -l shows the doctor --node option" "$(MANWIDTH=200 man -l "$MAN" 2>/dev/null)" "doctor --node"

# ------------------------------------------------------------------ the cluster
stage_binaries "$build" "$STAGE"   # the fakes; the product comes from $ROOT
FAKES=$STAGE/fakes
FAKE_CLIENT=$FAKES/fake-cuda-client
UUID_BY_GRES=(GPU-a1b2c3d4-e5f6-4718-9a0b-1c2d3e4f5a6b GPU-0f1e2d3c-4b5a-4697-8877-66554433aa10
              GPU-3c8a1d5e-94b2-4f7e-8a61-0b2c9d4e5f60 GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16)

ensure_test_users
CLUSTER_DIR=$WORK/cluster
STATE_DIR=$CLUSTER_DIR/mps-state
RUN_DIR=$CLUSTER_DIR/mps-run
GOOD_ARGS="state_dir=$STATE_DIR run_dir=$RUN_DIR nvidia_smi=$FAKES/nvidia-smi driver_proc=$FAKES/driver-proc mps_control=$FAKES/nvidia-cuda-mps-control max_threads=50 max_mem=4G start_timeout=10 stop_timeout=5"
if ! CLUSTER_MODE=plain CLUSTER_NODES=1 PLUGIN_SO=$PLUGIN PLUGIN_ARGS=$GOOD_ARGS cluster_up; then
  fail "cluster up with the installed plugin"
  finish
  exit 1
fi
LOG=$(slurmd_log n1)

echo "== doctor --node on a ready node"
out=$("$CLI" doctor --node 2>&1); rc=$?
expect_eq "doctor --node (root): exit 0 on a ready node" 0 "$rc"
expect_contains "doctor --node: ready" "$out" $'\nready'
expect_contains "doctor --node: finds the plugin line" "$out" "$CLUSTER_DIR/etc/plugstack.conf:1: optional $PLUGIN"
expect_contains "doctor --node: node n1 from slurm.conf" "$out" "node n1"
# GRES 0 = dev/nvidia3 (minor 3) = nvidia-smi index 2 in tests/fakes/gpus.csv
expect_contains "doctor --node: GRES 0 -> nvidia3 -> minor 3 -> smi 2 -> UUID" \
  "$(printf '%s\n' "$out" | grep -E "^0 +$CLUSTER_DIR/dev/nvidia3 +3 +2 ")" "${UUID_BY_GRES[0]}"
expect_contains "doctor --node: GRES 3 -> nvidia2 -> UUID" "$(printf '%s\n' "$out" | grep -E "^3 +$CLUSTER_DIR/dev/nvidia2 ")" "${UUID_BY_GRES[3]}"
json=$(as_user unimps1 "$CLI" doctor --node --json 2>&1); rc=$?
expect_eq "doctor --node --json as a user: exit 0" 0 "$rc"
expect_contains "doctor --node --json: ok" "$json" '"ok": true'
expect_contains "doctor --node --json: gpu table" "$json" '"nvidia_smi_index": 2'
printf '%s\n' "$out" >"$WORK/doctor-ready.txt"

echo "== per-job limits"
# Limits before any client: the control log of the job's daemon.
out=$(as_user unimps1 sbatch --unilab-mps --unilab-mps-threads=25 --unilab-mps-mem=2G --unilab-mps-priority=below-normal --gres=gpu:1 -o /dev/null \
  --wrap "$FAKE_CLIENT --hold 0; sleep 120" 2>&1)
job=$(job_of "$out")
check "sbatch with limits accepted ($out)" test -n "$job"
clog=$RUN_DIR/$(run_entry "$job" n1 0)/log/control.log
wait_for 30 grep -qs '_client_connect' "$clog"
t=$(first_line "$clog" 'Cmd: set_default_active_thread_percentage 25 ')
m=$(first_line "$clog" 'Cmd: set_default_device_pinned_mem_limit 0 2048M ')
c=$(first_line "$clog" 'Cmd: _client_connect')
check "daemon was told set_default_active_thread_percentage 25" test "$t" -gt 0
check "daemon was told set_default_device_pinned_mem_limit 0 2048M (2G, per GPU)" test "$m" -gt 0
check "a client connected" test "$c" -gt 0
check "both limits came before the first client" test "$t" -gt 0 -a "$m" -gt 0 -a "$t" -lt "$c" -a "$m" -lt "$c"
check "the daemon reports the thread percentage" bash -c "echo get_default_active_thread_percentage | \
  su unimps1 -s /bin/sh -c 'CUDA_MPS_PIPE_DIRECTORY=$RUN_DIR/$(run_entry "$job" n1 0)/pipe $FAKES/nvidia-cuda-mps-control' | grep -qx 25.0"
check "the daemon reports the pinned memory limit of its device 0" bash -c "echo get_default_device_pinned_mem_limit 0 | \
  su unimps1 -s /bin/sh -c 'CUDA_MPS_PIPE_DIRECTORY=$RUN_DIR/$(run_entry "$job" n1 0)/pipe $FAKES/nvidia-cuda-mps-control' | grep -qx 2048M"

st=$("$CLI" status --job "$job" --node n1 --state-dir "$STATE_DIR" --nvidia-smi "$FAKES/nvidia-smi" 2>&1)
expect_contains "status --job (root) lists the job's daemon" "$st" "job$job.n1.gpu0"
expect_contains "status --job (root) shows the limits" "$st" "limits active threads 25%, pinned memory 2048M per GPU"
expect_contains "status --job (root) shows the client priority" "$st" "client priority below-normal (CUDA_MPS_CLIENT_PRIORITY=1)"
st=$(as_user unimps1 "$CLI" status --job "$job" --node n1 --state-dir "$STATE_DIR" --nvidia-smi "$FAKES/nvidia-smi" 2>&1)
expect_contains "status --job (the job's user) shows the limits" "$st" "limits active threads 25%"
st=$(as_user unimps2 "$CLI" status --job "$job" --node n1 --state-dir "$STATE_DIR" --nvidia-smi "$FAKES/nvidia-smi" 2>&1)
expect_contains "status --job (another user) does not list it" "$st" "job $job has no unilab-mps daemon of uid"
st=$("$CLI" status --job "$job" --node n1 --state-dir "$STATE_DIR" --nvidia-smi "$FAKES/nvidia-smi" --json 2>&1)
expect_contains "status --job --json carries the limits" "$(printf '%s' "$st" | tr -d ' \n')" '"limits":{"active_thread_percentage":25.0,"client_priority":"below-normal","pinned_mem_limit":"2048M"}'
printf '%s\n' "$("$CLI" status --job "$job" --node n1 --state-dir "$STATE_DIR" --nvidia-smi "$FAKES/nvidia-smi")" >"$WORK/status.txt"
scancel "$job"
wait_job_gone "$job" 60 >/dev/null 2>&1

# multi: one daemon, the memory limit for each of its GPUs (indices as the daemon sees them)
out=$(as_user unimps2 sbatch --unilab-mps=multi --unilab-mps-mem=1G --gres=gpu:2 -o /dev/null \
  --wrap "$FAKE_CLIENT --hold 0; sleep 120" 2>&1)
job=$(job_of "$out")
clog=$RUN_DIR/$(run_entry "$job" n1 m)/log/control.log
wait_for 30 grep -qs '_client_connect' "$clog"
c=$(first_line "$clog" 'Cmd: _client_connect')
m0=$(first_line "$clog" 'Cmd: set_default_device_pinned_mem_limit 0 1024M ')
m1=$(first_line "$clog" 'Cmd: set_default_device_pinned_mem_limit 1 1024M ')
check "multi: pinned memory limit for daemon device 0 and 1 before the client" test "$m0" -gt 0 -a "$m1" -gt 0 -a "$m0" -lt "$c" -a "$m1" -lt "$c"
check_not "multi: no thread percentage without --unilab-mps-threads" grep -q 'set_default_active_thread_percentage' "$clog"
scancel "$job"
wait_job_gone "$job" 60 >/dev/null 2>&1

# srun: the limit reaches the prolog the same way
out=$(as_user unimps1 srun --unilab-mps --unilab-mps-threads=12.5 --gres=gpu:1 \
  bash -c 'cat "$CUDA_MPS_LOG_DIRECTORY/control.log"' 2>&1)
expect_contains "srun --unilab-mps-threads=12.5 reaches the daemon" "$out" "Cmd: set_default_active_thread_percentage 12.5 "
# threads=auto: no daemon default; each task's share of its GPU (this site's max_threads=50 caps it).
out=$(as_user unimps1 srun --unilab-mps --unilab-mps-threads=auto -n3 --gres=gpu:1 \
  bash -c 'echo "T=${CUDA_MPS_ACTIVE_THREAD_PERCENTAGE-unset} D=$(grep -c set_default_active_thread "$CUDA_MPS_LOG_DIRECTORY/control.log")"' 2>&1)
expect_eq "threads=auto: three tasks on one GPU get 33 each, no daemon default" "T=33 D=0
T=33 D=0
T=33 D=0" "$(printf '%s\n' "$out" | grep '^T=' | sort)"
out=$(as_user unimps1 srun --unilab-mps --unilab-mps-threads=auto -n1 --gres=gpu:1 bash -c 'echo "T=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"' 2>&1)
expect_contains "threads=auto: a task alone on its GPU gets 100, capped at max_threads=50" "$out" "T=50"
# The client priority is the tasks' (CUDA_MPS_CLIENT_PRIORITY), not a daemon command.
out=$(as_user unimps1 srun --unilab-mps --unilab-mps-priority=1 --gres=gpu:1 bash -c 'echo "PRIO=${CUDA_MPS_CLIENT_PRIORITY-unset}"' 2>&1)
expect_contains "srun --unilab-mps-priority=1: the task gets CUDA_MPS_CLIENT_PRIORITY=1" "$out" "PRIO=1"
out=$(as_user unimps1 srun --unilab-mps --gres=gpu:1 bash -c 'echo "PRIO=${CUDA_MPS_CLIENT_PRIORITY-unset}"' 2>&1)
expect_contains "without --unilab-mps-priority the task's variable is left unset" "$out" "PRIO=unset"

echo "== limits rejected at submit time"
before=$(last_job)
out=$(as_user unimps1 srun --unilab-mps --unilab-mps-threads=75 --gres=gpu:1 true 2>&1); rc=$?
check "srun over max_threads fails" test "$rc" -ne 0
expect_contains "srun over max_threads: the message" "$out" "MPS thread percentage 75 exceeds this site's maximum 50"
out=$(as_user unimps1 sbatch --unilab-mps --unilab-mps-mem=8G --gres=gpu:1 --wrap true 2>&1); rc=$?
check "sbatch over max_mem fails" test "$rc" -ne 0
expect_contains "sbatch over max_mem: the message" "$out" "MPS memory limit 8G exceeds this site's maximum of 4096 MiB"
out=$(as_user unimps1 srun --unilab-mps --unilab-mps-threads=abc --gres=gpu:1 true 2>&1); rc=$?
check "srun --unilab-mps-threads=abc fails" test "$rc" -ne 0
expect_contains "bad thread value: the message" "$out" "invalid MPS thread percentage 'abc'"
out=$(as_user unimps1 srun --unilab-mps --unilab-mps-threads=0 --gres=gpu:1 true 2>&1); rc=$?
check "srun --unilab-mps-threads=0 fails" test "$rc" -ne 0
out=$(as_user unimps1 sbatch --unilab-mps --unilab-mps-mem=12Q --gres=gpu:1 --wrap true 2>&1); rc=$?
check "sbatch --unilab-mps-mem=12Q fails" test "$rc" -ne 0
expect_contains "bad memory value: the message" "$out" "invalid memory size '12Q'"
out=$(as_user unimps1 srun --unilab-mps --unilab-mps-priority=2 --gres=gpu:1 true 2>&1); rc=$?
check "srun --unilab-mps-priority=2 fails" test "$rc" -ne 0
expect_contains "bad priority: the message" "$out" "invalid MPS client priority '2': give 0 (normal, the default) or 1 (below-normal)"
expect_eq "nothing was allocated for a rejected limit" "$before" "$(last_job)"

echo "== a failed job's daemon log reaches the slurmd log"
as_user unimps1 srun --unilab-mps --gres=gpu:1 bash -c 'exit 3' >/dev/null 2>&1
job=$(last_job)
wait_job_gone "$job" 60 >/dev/null 2>&1
expect_contains "epilog names the failure and the log" "$(grep "unilab-mps: job $job: MPS daemon" "$LOG")" \
  "job$job.n1.gpu0: last"
expect_contains "epilog says why" "$(grep "unilab-mps: job $job: MPS daemon" "$LOG")" "(the job failed: exit code 3)"
expect_contains "the daemon's control.log lines are in the slurmd log" "$(grep "unilab-mps: job $job: job$job.n1.gpu0| " "$LOG")" \
  "Cmd: get_server_list"
as_user unimps1 srun --unilab-mps --gres=gpu:1 true >/dev/null 2>&1
job=$(last_job)
wait_job_gone "$job" 60 >/dev/null 2>&1
expect_eq "a successful job's log is not copied" "" "$(grep "unilab-mps: job $job: MPS daemon" "$LOG")"
grep "unilab-mps: job" "$LOG" | grep -E "MPS daemon|\| " | head -n 8 >"$WORK/slurmd-log-sample.txt"

echo "== doctor --node on broken nodes"
# plugstack.conf without the plugin (and not yet restarted): exit 4, both named
PLUGIN_SO= write_plugstack_conf
out=$("$CLI" doctor --node 2>&1); rc=$?
expect_eq "plugstack without the plugin: exit 4" 4 "$rc"
expect_contains "names the missing plugin line" "$out" "[fail] plugin-listed  no \`optional .../unilab_mps.so\` line in $CLUSTER_DIR/etc/plugstack.conf"
expect_contains "says slurmd must restart after plugstack.conf changed" "$out" "restart slurmd"
expect_contains "ends with not ready" "$out" $'\nnot ready'
printf '%s\n' "$out" >"$WORK/doctor-broken.txt"
# the plugin back, but slurmd still runs with the old stack: exit 4 until restarted
sleep 1
PLUGIN_SO=$PLUGIN PLUGIN_ARGS=$GOOD_ARGS write_plugstack_conf
out=$("$CLI" doctor --node 2>&1); rc=$?
expect_eq "plugin back, slurmd not restarted: exit 4" 4 "$rc"
expect_contains "names the restart" "$out" "[fail] slurmd"
cluster_restart_slurmd
out=$("$CLI" doctor --node 2>&1); rc=$?
expect_eq "after restarting slurmd: exit 0" 0 "$rc"
# slurmd's own start checks the plugin's arguments (the slurmd context of
# slurm_spank_init): an optional line is logged and slurmd runs on, a
# required one stops slurmd from starting.
echo "== slurmd checks the plugin's arguments when it starts"
slurmd_says() { cat "$LOG" "$CLUSTER_DIR/log/slurmd-n1.out" 2>/dev/null | tail -n +"$1"; }
from=$(($(slurmd_says 1 | wc -l) + 1))
PLUGIN_SO=$PLUGIN PLUGIN_ARGS="$GOOD_ARGS colour=blue" write_plugstack_conf
check "optional line, bad argument: slurmd starts and registers" cluster_restart_slurmd
expect_contains "optional line, bad argument: slurmd logs why the plugin refuses to load" "$(slurmd_says "$from")" \
  "unilab-mps: refusing to load: unknown plugin argument 'colour'"
from=$(($(slurmd_says 1 | wc -l) + 1))
PLUGIN_REQUIRED=1 PLUGIN_SO=$PLUGIN PLUGIN_ARGS="$GOOD_ARGS colour=blue" write_plugstack_conf
_ue2e_kill_recorded "$CLUSTER_DIR/state/slurmd-n1.pid" "$_UE2E_SBIN/slurmd" "$(_ue2e_slurmd_id)"
_ue2e_daemon_env setsid "$_UE2E_SBIN/slurmd" -N n1 -f "$SLURM_CONF" </dev/null >>"$CLUSTER_DIR/log/slurmd-n1.out" 2>&1
up=1
for _ in $(seq 1 75); do
  pgrep -f "slurmd -N n1 -f $SLURM_CONF" >/dev/null || { up=0; break; }
  sleep 0.2
done
expect_eq "required line, bad argument: slurmd does not stay up" 0 "$up"
# (Its last lines may reach the files a moment after it exits: looked for
# up to 10 s. A CI run on 24.11 once saw only the old slurmd's shutdown.)
says_refusal() { slurmd_says "$from" | grep -qF "unilab-mps: refusing to load: unknown plugin argument 'colour'"; }
wait_for 10 says_refusal
expect_contains "required line, bad argument: the slurmd log names the argument" "$(slurmd_says "$from" | grep -v 'debug')" \
  "unilab-mps: refusing to load: unknown plugin argument 'colour'"
pkill -f "slurmd -N n1 -f $SLURM_CONF" 2>/dev/null
PLUGIN_SO=$PLUGIN PLUGIN_ARGS=$GOOD_ARGS write_plugstack_conf
check "good arguments again: slurmd starts and registers" cluster_restart_slurmd
# nvidia_smi path missing
PLUGIN_SO=$PLUGIN PLUGIN_ARGS="${GOOD_ARGS/nvidia_smi=$FAKES\/nvidia-smi/nvidia_smi=/nonexistent/nvidia-smi}" write_plugstack_conf
out=$("$CLI" doctor --node 2>&1); rc=$?
expect_eq "nvidia_smi path missing: exit 4" 4 "$rc"
expect_contains "names the missing nvidia-smi" "$out" "[fail] nvidia-smi     /nonexistent/nvidia-smi is missing or not executable"
# unknown plugin argument
PLUGIN_SO=$PLUGIN PLUGIN_ARGS="$GOOD_ARGS colour=blue" write_plugstack_conf
out=$("$CLI" doctor --node --json 2>&1); rc=$?
expect_eq "bad plugin argument: exit 4" 4 "$rc"
expect_contains "names the bad argument" "$out" "unknown plugin argument 'colour'"
PLUGIN_SO=$PLUGIN PLUGIN_ARGS=$GOOD_ARGS write_plugstack_conf
# job_container/tmpfs: a private /dev/shm per job (a copy of the config, the node untouched)
mkdir -p "$WORK/etc2"
cp "$CLUSTER_DIR"/etc/* "$WORK/etc2/"
echo "JobContainerType=job_container/tmpfs" >>"$WORK/etc2/slurm.conf"
out=$("$CLI" doctor --node --slurm-conf "$WORK/etc2/slurm.conf" 2>&1); rc=$?
expect_eq "job_container/tmpfs: exit 4" 4 "$rc"
expect_contains "names the private /dev/shm" "$out" "gives every job a private /dev/shm"
# a GPU gres.conf maps to nothing nvidia-smi knows
mknod -m 666 "$CLUSTER_DIR/dev/nvidia9" c 195 9
sed -i "s#^NodeName=n1 Name=gpu File=$CLUSTER_DIR/dev/nvidia2\$#&\nNodeName=n1 Name=gpu File=$CLUSTER_DIR/dev/nvidia9#" "$WORK/etc2/gres.conf"
sed -i '/JobContainerType/d' "$WORK/etc2/slurm.conf"
# slurm.conf's Gres= counts it too (a fifth line beyond gpu:4 Slurm discards, and doctor says so).
sed -i -E '/^NodeName=n1 /s/Gres=gpu:4( |$)/Gres=gpu:5\1/' "$WORK/etc2/slurm.conf"
out=$("$CLI" doctor --node --slurm-conf "$WORK/etc2/slurm.conf" 2>&1); rc=$?
expect_eq "unmappable GPU: exit 4" 4 "$rc"
expect_contains "flags GRES 4 in the table" "$out" "NOT MAPPED: GRES gpu index 4 ($CLUSTER_DIR/dev/nvidia9, minor 9) matches no GPU"

echo "== the installed plugin still serves jobs"
out=$(as_user unimps1 env FAKE_CLIENT="$FAKE_CLIENT" srun --unilab-mps --gres=gpu:1 \
  bash -c 'echo "CVD=$CUDA_VISIBLE_DEVICES"; "$FAKE_CLIENT" --hold 0' 2>&1)
expect_contains "task sees a UUID" "$out" "CVD=GPU-"
expect_contains "task's client joins its daemon" "$out" "connected to MPS server"

if [ "${ADMIN_E2E_DPKG_INSTALL:-0}" = 1 ]; then
  echo "== dpkg -i / dpkg -r"
  if [ "$(dpkg-query -W -f='${Status}' unilab-mps 2>/dev/null)" = "install ok installed" ]; then
    fail "unilab-mps is already installed on this machine: not touching it"
  elif dpkg -i "$DEB" >"$WORK/dpkg.log" 2>&1; then
    DPKG_INSTALLED=1
    sys_plugin=/usr/lib/x86_64-linux-gnu/slurm-wlm/unilab_mps.so
    check "dpkg -i installs the plugin into Slurm's plugin dir" test -f "$sys_plugin"
    check "unilab-mps is on PATH" bash -c 'command -v unilab-mps | grep -qx /usr/bin/unilab-mps'
    check "man finds unilab-mps(1)" man -w unilab-mps
    # The shipped example's form: a bare name, looked up in Slurm's PluginDir.
    printf 'optional unilab_mps.so %s\n' "$GOOD_ARGS" >"$CLUSTER_DIR/etc/plugstack.conf"
    cluster_restart_slurmd
    out=$(unilab-mps doctor --node 2>&1); rc=$?
    expect_eq "doctor --node with the dpkg-installed plugin: exit 0" 0 "$rc"
    out=$(as_user unimps1 srun --unilab-mps --unilab-mps-threads=30 --gres=gpu:1 \
      bash -c 'echo "CVD=$CUDA_VISIBLE_DEVICES"; cat "$CUDA_MPS_LOG_DIRECTORY/control.log"' 2>&1)
    expect_contains "a job runs on the dpkg-installed plugin" "$out" "set_default_active_thread_percentage 30"
    PLUGIN_SO=$PLUGIN PLUGIN_ARGS=$GOOD_ARGS write_plugstack_conf
    cluster_restart_slurmd
    # Removal while a plugstack file still names the plugin warns (postrm);
    # only a file this test made is touched.
    conf_d=/etc/slurm/plugstack.conf.d made_conf=
    if [ ! -e "$conf_d/unilab-mps.conf" ] && mkdir -p "$conf_d" &&
      cp /usr/share/doc/unilab-mps/examples/plugstack.conf.d/unilab-mps.conf "$conf_d/"; then
      made_conf=$conf_d/unilab-mps.conf
    fi
    out=$(dpkg -r unilab-mps 2>&1) && DPKG_INSTALLED=0
    printf '%s\n' "$out" >>"$WORK/dpkg.log"
    check_not "dpkg -r removes the plugin" test -e "$sys_plugin"
    check_not "dpkg -r removes the CLI" test -e /usr/bin/unilab-mps
    if [ -n "$made_conf" ]; then
      expect_contains "dpkg -r warns that $made_conf still names the plugin" "$out" \
        "warning: $made_conf still names unilab_mps.so"
      rm -f "$made_conf"
      dpkg -i "$DEB" >>"$WORK/dpkg.log" 2>&1 && DPKG_INSTALLED=1
      out=$(dpkg -r unilab-mps 2>&1) && DPKG_INSTALLED=0
      expect_not_contains "no warning once no plugstack file names the plugin" "$out" "still names unilab_mps.so"
    else
      skip "dpkg -r warning" "$conf_d/unilab-mps.conf exists on this machine (not touched)"
    fi
    dpkg --purge unilab-mps >>"$WORK/dpkg.log" 2>&1
  else
    fail "dpkg -i" "$(tail -5 "$WORK/dpkg.log")"
  fi
fi

if grep "unilab-mps" "$LOG" | grep -i "error" | grep -v "exceeds this site\|invalid MPS thread\|invalid memory size\|unknown plugin argument 'colour'" >"$WORK/errors.txt"; then
  fail "slurmd log free of unexpected unilab-mps errors" "$(head -5 "$WORK/errors.txt")"
else
  pass "slurmd log free of unexpected unilab-mps errors"
fi
if [ -n "${ADMIN_E2E_SAMPLES:-}" ]; then
  mkdir -p "$ADMIN_E2E_SAMPLES" && cp "$WORK"/doctor-*.txt "$WORK"/status.txt "$WORK"/slurmd-log-sample.txt "$ADMIN_E2E_SAMPLES"/ 2>/dev/null
fi
finish
