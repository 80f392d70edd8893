#!/usr/bin/env bash
# End-to-end on a configless Slurm cluster (SlurmctldParameters=
# enable_configless, slurmd --conf-server, no -f, no SLURM_CONF; cluster.sh
# CLUSTER_CONFIGLESS=1): slurmd fetches slurm.conf, gres.conf, plugstack.conf
# (and, in the cgroup part, cgroup.conf) into <spool>/conf-cache and links
# /run/slurm/conf to it. The plugin (job prolog, task path) finds the job's
# GPUs through the cached gres.conf and a non-default state_dir= from the
# cached plugstack.conf; `status --job` as the job's user and `doctor --node`
# as root, both without SLURM_CONF, find the same files through
# /run/slurm/conf. No /etc/slurm/slurm.conf is read: where the host has one,
# the commands run in a private mount namespace without it.
# Usage: tests/e2e/configless_e2e.sh BUILD_DIR [plain] [cgroup]   (root)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/e2e_lib.sh"  # with tests/lib.sh and cluster.sh
build=$(cd "${1:?usage: $0 BUILD_DIR [plain] [cgroup]}" && pwd)
shift
parts=("$@")
((${#parts[@]})) || parts=(plain cgroup)
MIN_CHECKS=0
for p in "${parts[@]}"; do
  case $p in plain) MIN_CHECKS=$((MIN_CHECKS + 47)) ;; cgroup) MIN_CHECKS=$((MIN_CHECKS + 13)) ;;
  *) echo "configless_e2e: unknown part '$p' (plain, cgroup)" >&2; exit 2 ;; esac
done
export CLUSTER_PORT_BASE=${CLUSTER_PORT_BASE:-19400}
require_root
make_stage ucl "$build"
install -m 755 "$here/task_report.sh" "$STAGE/bin/"
# task_report.sh plus the devices cgroup of the task's daemon.
cat >"$STAGE/bin/daemon_cgroup.sh" <<'EOS'
#!/bin/bash
"$(dirname "$0")/task_report.sh"
p=$(cat "$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid" 2>/dev/null)
echo "T${SLURM_PROCID:-0}@${SLURMD_NODENAME:-?} DAEMON_DEVICES=$(sed -n 's/^[0-9]*:devices://p' "/proc/$p/cgroup" 2>/dev/null)"
EOS
chmod 755 "$STAGE/bin/daemon_cgroup.sh"
ensure_test_users
CLI=$STAGE/bin/unilab-mps
REPORT=$STAGE/bin/task_report.sh
export FAKE_CLIENT=$FAKES/fake-cuda-client
EMPTY=$STAGE/empty   # stands in for /etc/slurm where the host has a slurm.conf
mkdir -p "$EMPTY"
chmod 755 "$EMPTY"
# GRES index -> minor ("3 1 0 2") -> nvidia-smi GPU (tests/fakes/gpus.csv), as in run_e2e.sh.
UUID_BY_GRES=(GPU-a1b2c3d4-e5f6-4718-9a0b-1c2d3e4f5a6b GPU-0f1e2d3c-4b5a-4697-8877-66554433aa10
              GPU-3c8a1d5e-94b2-4f7e-8a61-0b2c9d4e5f60 GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16)

# node_cmd CMD...: CMD as a node program sees the machine, with an
# environment of PATH and LANG only (no SLURM_CONF). Where the host has an
# /etc/slurm/slurm.conf, CMD runs in a private mount namespace with an empty
# directory over /etc/slurm, so that only the configless cache can be found.
node_cmd() {
  if [ -e /etc/slurm/slurm.conf ]; then
    # shellcheck disable=SC2016 # expanded by the inner shell, from its argv
    unshare -m --propagation private -- /bin/bash -c 'mount --bind "$0" /etc/slurm && exec "$@"' "$EMPTY" \
      env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "$@"
  else
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "$@"
  fi
}
# node_cmd_as USER CMD...: the same as USER (setpriv: argv, no shell string).
node_cmd_as() {
  local user=$1 home
  shift
  home=$(getent passwd "$user" | cut -d: -f6)
  node_cmd setpriv --reuid="$user" --regid="$user" --init-groups \
    env HOME="$home" USER="$user" LOGNAME="$user" "$@"
}
u() { # u USER CMD... : submit as USER (as_user: SLURM_CONF of the controller's file, for the client commands)
  as_user "$1" env FAKE_CLIENT="$FAKE_CLIENT" "${@:2}"
}
field() { printf '%s\n' "$1" | sed -n "s/^$2 $3=//p" | head -n1; }
gres_uuids() {
  local out=() i
  for i in ${1//,/ }; do out+=("${UUID_BY_GRES[$i]}"); done
  (IFS=,; echo "${out[*]}")
}
# expect_uuids NAME GRES_INDICES CVD: CVD is exactly those GPUs' UUIDs (and
# a task that printed nothing does not pass as "" = "").
expect_uuids() {
  if [ -z "$2" ] || [ -z "$3" ]; then fail "$1" "no GRES indices ('$2') or no CUDA_VISIBLE_DEVICES ('$3') reported"; return; fi
  expect_eq "$1" "$(gres_uuids "$2")" "$3"
}

start_cluster() { # start_cluster MODE
  CLUSTER_DIR=$STAGE/c-$1
  STATE_DIR=$CLUSTER_DIR/st   # not /run/unilab-mps (short: pipe paths must fit a socket address)
  RUN_DIR=$CLUSTER_DIR/r
  CACHE=$CLUSTER_DIR/spool/n1/conf-cache
  CLUSTER_MODE=$1 CLUSTER_NODES=1 CLUSTER_CONFIGLESS=1 PLUGIN_SO=$STAGE/unilab_mps.so \
    PLUGIN_ARGS="state_dir=$STATE_DIR run_dir=$RUN_DIR nvidia_smi=$FAKES/nvidia-smi driver_proc=$FAKES/driver-proc mps_control=$FAKES/nvidia-cuda-mps-control" \
    cluster_up
}

# What configless slurmd did: no -f, no SLURM_CONF, the files in its cache.
check_configless_node() {
  local tag=$1 pid cmd
  pid=$(cat "$CLUSTER_DIR/state/slurmd-n1.pid")
  cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline")
  expect_contains "$tag: slurmd runs with --conf-server" "$cmd" "--conf-server 127.0.0.1:$CLUSTER_PORT_BASE"
  expect_not_contains "$tag: slurmd has no -f" " $cmd " " -f "
  expect_eq "$tag: slurmd started without SLURM_CONF" "" "$(tr '\0' '\n' <"/proc/$pid/environ" | grep '^SLURM_CONF=' || true)"
  expect_contains "$tag: slurm.conf enables configless" "$(cat "$SLURM_CONF")" "SlurmctldParameters=enable_configless"
  expect_not_contains "$tag: slurm.conf has no PlugStackConfig" "$(cat "$SLURM_CONF")" "PlugStackConfig"
  expect_eq "$tag: /run/slurm/conf links to the cache" "$CACHE" "$(readlink /run/slurm/conf)"
  expect_eq "$tag: the link is root's" "0" "$(stat -c %u /run/slurm/conf)"
  expect_contains "$tag: the cache holds the plugin line" "$(cat "$CACHE/plugstack.conf" 2>&1)" "state_dir=$STATE_DIR"
  check "$tag: the cache holds gres.conf" test -f "$CACHE/gres.conf"
  expect_contains "$tag: slurmd's SPANK stack is the cached plugstack.conf" "$(cat "$(slurmd_log)")" \
    "spank: opening plugin stack $CACHE/plugstack.conf"
  check_not "$tag: the commands see no /etc/slurm/slurm.conf" node_cmd test -e /etc/slurm/slurm.conf
}

# Doctor as root without SLURM_CONF: it reads the cache and passes.
check_doctor() {
  local tag=$1 out rc
  out=$(node_cmd "$CLI" doctor --node 2>&1); rc=$?
  expect_eq "$tag: doctor --node (root, no SLURM_CONF) exits 0" 0 "$rc"
  expect_contains "$tag: doctor --node: ready" "$out" $'\nready'
  expect_contains "$tag: doctor names the configless slurm.conf" "$out" \
    "slurm.conf /run/slurm/conf/slurm.conf (configless cache: /run/slurm/conf -> $CACHE)"
  expect_contains "$tag: doctor reads the cached plugstack.conf" "$out" "/run/slurm/conf/plugstack.conf:1: optional $STAGE/unilab_mps.so"
  expect_contains "$tag: doctor reads the cached gres.conf" "$out" "/run/slurm/conf/gres.conf: 4 GPU GRES for node n1, in slurm.conf's Gres= order"
  printf '%s\n' "$out" >"$STAGE/doctor-$tag.txt"
}

# A /run/slurm/conf link that is not root's is not followed (this cluster's
# own link, handed to a user for the check and given back).
check_untrusted_link() {
  local tag=$1 out rc
  chown -h unimps1 /run/slurm/conf || { fail "$tag: chown -h the link"; return; }
  out=$(node_cmd "$CLI" doctor --node 2>&1); rc=$?
  chown -h root /run/slurm/conf
  expect_eq "$tag: a user's /run/slurm/conf link: doctor --node exits 4" 4 "$rc"
  expect_contains "$tag: doctor says why the cache is not used" "$out" \
    "the configless cache /run/slurm/conf is not used: the symlink /run/slurm/conf belongs to uid $(id -u unimps1), not root"
}

plain_part() {
  local tag=plain out job res rc
  check_configless_node "$tag"
  check_doctor "$tag"
  check_untrusted_link "$tag"
  # A per-GPU batch job with srun steps; it waits for $go while we look.
  local script=$STAGE/batch.sh outf=$STAGE/batch.out go=$STAGE/go
  : >"$outf"
  chmod 666 "$outf"
  cat >"$script" <<EOS
#!/bin/bash
#SBATCH --unilab-mps
#SBATCH --gres=gpu:2
#SBATCH -n2
#SBATCH -o $outf
echo "BATCH CVD=\$CUDA_VISIBLE_DEVICES"
srun -n2 --gpus-per-task=1 -l $REPORT | sed 's/^[0-9]*: //'
echo STEPS-DONE
for _ in \$(seq 1 600); do [ -e $go ] && break; sleep 0.1; done
EOS
  chmod 755 "$script"
  out=$(u unimps1 sbatch "$script" 2>&1)
  job=$(printf '%s' "$out" | sed -n 's/^Submitted batch job \([0-9]*\)$/\1/p')
  check "$tag: sbatch --unilab-mps accepted ($out)" test -n "$job"
  for _ in $(seq 1 600); do grep -qs '^STEPS-DONE' "$outf" && break; sleep 0.1; done
  res=$(cat "$outf")
  expect_contains "$tag: batch script sees UUIDs" "$(printf '%s' "$res" | sed -n 's/^BATCH CVD=//p')" "GPU-"
  local c0 c1 t
  c0=$(field "$res" T0@n1 CVD); c1=$(field "$res" T1@n1 CVD)
  check "$tag: the two tasks see different single GPUs" test -n "$c0" -a -n "$c1" -a "$c0" != "$c1" -a "${c0//,/}" = "$c0"
  for t in T0@n1 T1@n1; do
    expect_uuids "$tag: $t CUDA_VISIBLE_DEVICES is its GRES GPU's UUID (cached gres.conf)" \
      "$(field "$res" $t STEP_GPUS)" "$(field "$res" $t CVD)"
    expect_contains "$tag: $t CUDA_MPS_PIPE_DIRECTORY is the job's daemon's" "$(field "$res" $t PIPE)" "$RUN_DIR/$job."
    expect_eq "$tag: $t daemon runs as unimps1" unimps1 "$(field "$res" $t DAEMON_USER)"
    expect_contains "$tag: $t client joined the daemon" "$(field "$res" $t CLIENT)" "connected to MPS server"
  done
  expect_eq "$tag: records in the cached state_dir=" 2 "$(ls "$STATE_DIR" 2>/dev/null | grep -c "^job$job\.n1\.gpu.*\.json$")"
  # status --job as the job's user, no SLURM_CONF: through /run/slurm/conf.
  out=$(node_cmd_as unimps1 "$CLI" status --job "$job" 2>&1); rc=$?
  expect_eq "$tag: status --job as unimps1 (no SLURM_CONF) exits 0" 0 "$rc"
  expect_contains "$tag: status --job uses the cached plugin line" "$out" "records from /run/slurm/conf/plugstack.conf:1"
  expect_contains "$tag: status --job finds both daemons in state_dir=" "$out" "daemons (2) in $STATE_DIR"
  out=$(node_cmd_as unimps2 "$CLI" status --job "$job" 2>&1); rc=$?
  expect_eq "$tag: status --job as another user: exit 1" 1 "$rc"
  out=$(node_cmd "$CLI" status --job "$job" 2>&1); rc=$?
  expect_eq "$tag: status --job as root (no SLURM_CONF) exits 0" 0 "$rc"
  check_doctor "$tag-running"
  : >"$go"
  assert_clean "$tag per-GPU" "$job"

  out=$(u unimps2 srun --unilab-mps=multi --gres=gpu:2 -n1 "$REPORT" 2>&1)
  job=$(last_job)
  expect_contains "$tag multi: one daemon for both GPUs" "$(field "$out" T0@n1 PIPE)" "$RUN_DIR/$(run_entry "$job" n1 m)/pipe"
  expect_uuids "$tag multi: both GPUs' UUIDs" "$(field "$out" T0@n1 STEP_GPUS)" "$(field "$out" T0@n1 CVD)"
  expect_eq "$tag multi: daemon runs as unimps2" unimps2 "$(field "$out" T0@n1 DAEMON_USER)"
  assert_clean "$tag multi" "$job"

  : >"$CALL_LOG"
  local before; before=$(ls -A "$STATE_DIR" "$RUN_DIR" 2>/dev/null | wc -l)
  out=$(u unimps1 srun --gres=gpu:1 -n1 "$REPORT" 2>&1)
  job=$(last_job)
  expect_not_contains "$tag no-option: CUDA_VISIBLE_DEVICES untouched" "$(field "$out" T0@n1 CVD)" "GPU-"
  expect_eq "$tag no-option: no MPS pipe variable" unset "$(field "$out" T0@n1 PIPE)"
  wait_job_gone "$job" 60 >/dev/null 2>&1
  expect_eq "$tag no-option: no NVIDIA tool was run" "" "$(cat "$CALL_LOG")"
  expect_eq "$tag no-option: no file was created" "$before" "$(ls -A "$STATE_DIR" "$RUN_DIR" 2>/dev/null | wc -l)"
}

# cgroup v1 + ConstrainDevices: cgroup.conf too comes from the cache, for
# the doctor and for the plugin's containment plan.
cgroup_part() {
  local tag=cgroup out job
  expect_eq "$tag: the cache holds cgroup.conf" "ConstrainDevices=yes" "$(grep -x 'ConstrainDevices=yes' "$CACHE/cgroup.conf" 2>&1)"
  check_doctor "$tag"
  expect_contains "$tag: doctor reads the cached cgroup.conf" "$(cat "$STAGE/doctor-$tag.txt")" "from /run/slurm/conf/cgroup.conf"
  out=$(u unimps1 srun --unilab-mps --gres=gpu:1 -n1 "$STAGE/bin/daemon_cgroup.sh" 2>&1)
  job=$(last_job)
  expect_contains "$tag: the task got its daemon" "$(field "$out" T0@n1 PIPE)" "$RUN_DIR/$job."
  expect_contains "$tag: client joined the daemon" "$(field "$out" T0@n1 CLIENT)" "connected to MPS server"
  # ConstrainDevices=yes is only in the cached cgroup.conf: the plugin moved
  # the daemon into the job's devices cgroup because it read that file.
  expect_contains "$tag: the daemon is in the job's devices cgroup (cached cgroup.conf)" \
    "$(field "$out" T0@n1 DAEMON_DEVICES)" "/job_$job/step_extern"
  assert_clean "$tag" "$job"
}

for part in "${parts[@]}"; do
  echo "== configless: $part"
  t0=$SECONDS
  if ! start_cluster "$part"; then
    fail "$part: configless cluster up"
    cluster_down
    continue
  fi
  "${part}_part"
  dir=$CLUSTER_DIR
  cluster_down
  check "$part: cluster_down removed the /run/slurm/conf link into its dir" \
    bash -c '! [ -L /run/slurm/conf ] || [[ $(readlink /run/slurm/conf) != "$1"/* ]]' _ "$dir"
  echo "== configless: $part took $((SECONDS - t0)) s"
done
finish
