# shellcheck shell=bash
# tests/e2e/cluster.sh: a throwaway, real Slurm cluster on this machine (the
# host's Slurm 22.05, or Slurm 24.11 inside scripts/slurm-root's Debian 13 root).
#
# Source it (`source tests/e2e/cluster.sh`), then call cluster_up / cluster_down.
# Everything (config, state, spool, pid and log files, fake GPU device nodes)
# lives in CLUSTER_DIR; the daemons are started with absolute -f paths and
# stopped by the PIDs this library recorded, never by name.
#
# Inputs (environment / shell variables read by cluster_up):
#   CLUSTER_DIR        temp dir to create (default: mktemp -d /tmp/unilab-e2e.XXXXXX)
#   CLUSTER_MODE       plain (linuxproc, task/none) | cgroup (cgroup v1, ConstrainDevices)
#                      | cgroup2 (cgroup v2, ConstrainDevices, IgnoreSystemd; Slurm
#                      23.11+ only, with cgroup2 mounted at /sys/fs/cgroup:
#                      tests/e2e/cgroup2/README.md)
#   CLUSTER_CGROUP2_SHIM  cgroup2 mode: LD_PRELOAD for the Slurm daemons (the
#                      test-only shim of tests/e2e/cgroup2 on a hybrid host)
#   CLUSTER_NODES      1 or 2 (nodes n1[, n2] on this host, distinct slurmd ports)
#   CLUSTER_PORT_BASE  slurmctld port; slurmd of node i gets base+i (default 16817)
#   GPU_MINORS         fake GPU minors in GRES order (default "3 1 0 2")
#   CLUSTER_MIG        MIG slices besides those whole GPUs (a node whose GPUs
#                      are partly MIG): "PARENT:GI_CAP:CI_CAP:TYPE:UUID ...",
#                      PARENT the minor of a MIG-enabled GPU, the caps the
#                      minors of its GPU and compute instance's capability
#                      files (made with mknod, char major 241, in
#                      dev/nvidia-caps), TYPE its GRES type. The whole GPUs
#                      are then type h200. gres.conf lists each slice with
#                      MultipleFiles= after them, or, with
#                      CLUSTER_MIG_FAKE_GPUS=1, holds only AutoDetect=nvml
#                      and slurmd reads the node's GPUs from a fake_gpus.conf
#                      next to slurm.conf (Slurm's test-only stand-in for
#                      gpu/nvml, read by gres_gpu.so without NVML), each slice
#                      with its UUID as gpu/nvml gives it: the prolog then has
#                      CUDA_VISIBLE_DEVICES=MIG-<uuid>. There the whole GPUs'
#                      files sort first and PARENT 1's slices before PARENT 0's
#                      (dev/fake/{a,b,c}), as Slurm 22.05 can order MIG GRES
#                      other than the driver's GI order
#   CLUSTER_CPUS       CPUs declared per node (default 8; config_overrides lets
#                      it exceed the machine's cores, e.g. 32 for -n32 jobs)
#   PLUGIN_SO          absolute path of unilab_mps.so; unset/empty: plugstack.conf
#                      without any plugin (PlugStackConfig always points at ours)
#   PLUGIN_ARGS        key=value plugin arguments (one string, split on blanks);
#                      history= defaults to $CLUSTER_DIR/history/history.jsonl
#   PLUGIN_REQUIRED=1  `required` instead of `optional` in plugstack.conf
#   CLUSTER_PROLOG_FLAGS  PrologFlags= value; default Contain in cgroup mode (the
#                      job's extern step cgroup, which unilab-mps moves its
#                      daemons into, exists only then), none in plain mode;
#                      "none" omits the line
#   CLUSTER_PROLOG_HELPERS  absolute dir holding unilab-mps-prolog/-epilog: slurm.conf
#                      gets Prolog=/Epilog= wrappers (CLUSTER_DIR/etc, root-owned)
#                      running them with PLUGIN_ARGS as their --config file.
#                      Needed with PrologFlags=RunInJob, where Slurm calls no
#                      SPANK job_prolog/job_epilog (docs/DESIGN.md "Slurm series")
#   CLUSTER_CGROUP_EXTRA  cgroup and cgroup2 modes: extra cgroup.conf lines
#                      appended verbatim (e.g. CgroupJobIdPaths=yes, 26.05.2+)
#   CLUSTER_EXTRA_CONF extra slurm.conf lines appended verbatim; a
#                      SlurmctldParameters= line there is merged with the one
#                      CLUSTER_CONFIGLESS writes
#   CLUSTER_CONFIGLESS=1  configless Slurm: SlurmctldParameters=enable_configless,
#                      no PlugStackConfig line (slurmctld ships only files named
#                      plugstack.conf next to slurm.conf; an absolute
#                      PlugStackConfig is read on the node as it is), and slurmd
#                      started with --conf-server 127.0.0.1:<ctld port>, without
#                      -f and without SLURM_CONF: it fetches the files into
#                      <spool>/conf-cache and points /run/slurm/conf at it (a
#                      host-wide link; cluster_down removes it only while it
#                      points into this cluster's dir). Client commands keep
#                      SLURM_CONF=<dir>/etc/slurm.conf.
#   CLUSTER_DEBUG      SlurmdDebug/SlurmctldDebug level (default debug)
#   CLUSTER_WAIT_S     bound for every wait in this file (default 60)
#   KEEP_CLUSTER_LOGS=1  cluster_down keeps CLUSTER_DIR instead of removing it
# Outputs after cluster_up: exported SLURM_CONF, CLUSTER_DIR, CLUSTER_NODE_NAMES.

_UE2E_REGISTRY=${UNILAB_E2E_REGISTRY:-/tmp/unilab-e2e-registry}
_UE2E_MARKER=.unilab-e2e-cluster
_UE2E_SBIN=/usr/sbin

_ue2e_log() { printf '[cluster] %s\n' "$*" >&2; }
_ue2e_err() { printf '[cluster] ERROR: %s\n' "$*" >&2; }

_ue2e_wait_s() { printf '%s' "${CLUSTER_WAIT_S:-60}"; }

# Print the last lines of every log this cluster wrote (for failure messages).
cluster_log_tails() {
    local dir=${1:-${CLUSTER_DIR:-}} f
    [[ -n $dir && -d $dir/log ]] || return 0
    for f in "$dir"/log/*; do
        [[ -s $f ]] || continue
        printf -- '----- tail of %s -----\n' "$f" >&2
        tail -n "${CLUSTER_LOG_TAIL_LINES:-25}" "$f" >&2
    done
}

# Node names of the running cluster (from CLUSTER_DIR when the variables of
# the shell that ran cluster_up are not at hand).
_ue2e_cluster_nodes() {
    if [[ -n ${CLUSTER_NODE_NAMES:-} ]]; then
        printf '%s' "$CLUSTER_NODE_NAMES"
        return
    fi
    local n
    n=$(sed -n 's/^CLUSTER_NODES=//p' "${CLUSTER_DIR:?no cluster}/state/params" 2>/dev/null)
    CLUSTER_NODES=${n:-1} _ue2e_node_names
}

_ue2e_node_names() {
    local n=${CLUSTER_NODES:-1} i
    for ((i = 1; i <= n; i++)); do printf 'n%d ' "$i"; done
}

# ---------------------------------------------------------------- processes

# True when the cluster in DIR (default CLUSTER_DIR) runs configless.
_ue2e_is_configless() {
    grep -qx 'CLUSTER_CONFIGLESS=1' "${1:-$CLUSTER_DIR}/state/params" 2>/dev/null
}

# The word that names this cluster in its slurmd's command line: the config
# path, or in configless mode (no -f) the conf server address with this
# cluster's unique port. DIR defaults to CLUSTER_DIR.
_ue2e_slurmd_id() {
    local dir=${1:-$CLUSTER_DIR} base
    if _ue2e_is_configless "$dir"; then
        base=$(sed -n 's/^CLUSTER_PORT_BASE=//p' "$dir/state/params")
        printf '127.0.0.1:%s' "$base"
    else
        printf '%s/etc/slurm.conf' "$dir"
    fi
}

# True when PID is alive and is the daemon EXE started with config CONF (a
# word of its command line: see _ue2e_slurmd_id).
_ue2e_pid_is() {
    local pid=$1 exe=$2 conf=$3 cmd
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    # /usr/sbin/slurmd is an alternatives symlink to slurmd-wlm: compare targets.
    [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == "$(readlink -f "$exe")" ]] || return 1
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
    [[ " $cmd " == *" $conf "* ]]
}

# PIDs of slurmstepd processes holding an open file inside DIR (their log file
# is the slurmd log in DIR/log), i.e. step daemons of this cluster only.
_ue2e_stepd_pids() {
    local dir=$1 p fd
    for p in /proc/[0-9]*; do
        [[ $(cat "$p/comm" 2>/dev/null) == slurmstepd ]] || continue
        for fd in "$p"/fd/*; do
            if [[ $(readlink "$fd" 2>/dev/null) == "$dir"/* ]]; then
                printf '%s\n' "${p#/proc/}"
                break
            fi
        done
    done
}

# Wait until none of the PIDs exists any more; return 1 after SECONDS.
_ue2e_wait_pids_gone() {
    local seconds=$1 p alive
    shift
    local deadline=$((SECONDS + seconds))
    while :; do
        alive=
        for p in "$@"; do
            [[ -e /proc/$p ]] && alive+=" $p"
        done
        [[ -z $alive ]] && return 0
        ((SECONDS >= deadline)) && { _ue2e_err "still alive after ${seconds}s:$alive"; return 1; }
        sleep 0.2
    done
}

# Kill the daemon recorded in RECORD_FILE (TERM, bounded wait, then KILL).
_ue2e_kill_recorded() {
    local record=$1 exe=$2 conf=$3 pid
    [[ -f $record ]] || return 0
    pid=$(<"$record")
    if _ue2e_pid_is "$pid" "$exe" "$conf"; then
        kill -TERM "$pid" 2>/dev/null || true
        if ! _ue2e_wait_pids_gone 15 "$pid" 2>/dev/null; then
            _ue2e_pid_is "$pid" "$exe" "$conf" && kill -KILL "$pid" 2>/dev/null
            _ue2e_wait_pids_gone 5 "$pid" || return 1
        fi
    fi
    rm -f "$record"
}

_ue2e_kill_stepds() {
    local dir=$1 pids
    mapfile -t pids < <(_ue2e_stepd_pids "$dir")
    ((${#pids[@]})) || return 0
    _ue2e_log "killing leftover slurmstepd: ${pids[*]}"
    kill -KILL "${pids[@]}" 2>/dev/null || true
    _ue2e_wait_pids_gone 10 "${pids[@]}"
}

# Cancel every job of the cluster at CONF and wait (bounded) until the queue
# is empty and no node is completing, so that epilogs (the plugin's cleanup)
# run before the daemons go away. Best effort: slurmctld may be dead already.
_ue2e_cancel_jobs() {
    local conf=$1 jobs
    jobs=$(SLURM_CONF=$conf timeout 10 squeue -h -o %i 2>/dev/null) || return 0
    [[ -n $jobs ]] || return 0
    # shellcheck disable=SC2086 # one word per job id
    SLURM_CONF=$conf timeout 10 scancel $jobs 2>/dev/null || true
    local deadline=$((SECONDS + 30))
    while ((SECONDS < deadline)); do
        # No `cmd | grep -q` under pipefail: an early grep exit can SIGPIPE cmd.
        if [[ -z $(SLURM_CONF=$conf timeout 10 squeue -h -o %i 2>/dev/null) &&
            $(SLURM_CONF=$conf timeout 10 sinfo -h -N -o %T 2>/dev/null) != *completing* ]]; then
            return 0
        fi
        sleep 0.3
    done
    _ue2e_err "jobs still present 30s after scancel: $(SLURM_CONF=$conf squeue -h -o '%i:%T' 2>&1 | tr '\n' ' ')"
}

# Last resort after the step daemons were killed: job processes whose
# environment names a config file in this cluster's DIR (srun propagates
# SLURM_CONF; configless slurmstepd sets its conf-cache one).
_ue2e_kill_job_tasks() {
    local dir=$1 p pids=()
    for p in /proc/[0-9]*; do
        [[ ${p#/proc/} == "$$" || ${p#/proc/} == "$BASHPID" ]] && continue
        if grep -qzF "SLURM_CONF=$dir/" "$p/environ" 2>/dev/null &&
            grep -qz '^SLURM_JOB_ID=' "$p/environ" 2>/dev/null; then
            pids+=("${p#/proc/}")
        fi
    done
    ((${#pids[@]})) || return 0
    _ue2e_log "killing leftover job processes: ${pids[*]}"
    kill -KILL "${pids[@]}" 2>/dev/null || true
    _ue2e_wait_pids_gone 10 "${pids[@]}"
}

# Stop every daemon recorded in DIR: cancel jobs, then slurmd, leftover
# slurmstepd and job processes, then slurmctld.
_ue2e_stop_dir() {
    local dir=$1 conf=$1/etc/slurm.conf rc=0 rec
    if _ue2e_pid_is "$(cat "$dir/state/slurmctld.pid" 2>/dev/null)" "$_UE2E_SBIN/slurmctld" "$conf"; then
        _ue2e_cancel_jobs "$conf"
    fi
    for rec in "$dir"/state/slurmd-*.pid; do
        [[ -e $rec ]] || continue
        _ue2e_kill_recorded "$rec" "$_UE2E_SBIN/slurmd" "$(_ue2e_slurmd_id "$dir")" || rc=1
    done
    _ue2e_kill_stepds "$dir" || rc=1
    _ue2e_kill_job_tasks "$dir" || rc=1
    _ue2e_kill_recorded "$dir/state/slurmctld.pid" "$_UE2E_SBIN/slurmctld" "$conf" || rc=1
    _ue2e_kill_unrecorded "$conf" "$(_ue2e_slurmd_id "$dir")" || rc=1
    _ue2e_unlink_run_conf "$dir"
    return "$rc"
}

# /run/slurm/conf is one host-wide link, made by the last configless slurmd
# started: remove it only when it is a root-owned link into DIR. /run/slurm
# goes too when this cluster made it and it is empty now.
_ue2e_unlink_run_conf() {
    local dir=$1 target
    if [[ -L /run/slurm/conf && $(stat -c %u /run/slurm/conf) == 0 ]]; then
        target=$(readlink /run/slurm/conf)
        [[ $target == "$dir"/* ]] && rm -f /run/slurm/conf
    fi
    if [[ -e $dir/state/made-run-slurm ]]; then
        rmdir /run/slurm 2>/dev/null || true
        rm -f "$dir/state/made-run-slurm"
    fi
    return 0
}

# Fallback for a start that failed before its PID was recorded: daemons whose
# command line names this cluster's (unique, temp-dir) config file.
# (SLURMD_ID: the slurmd's own word, _ue2e_slurmd_id; default CONF).
_ue2e_kill_unrecorded() {
    local conf=$1 slurmd_id=${2:-$1} p pids=()
    for p in /proc/[0-9]*; do
        p=${p#/proc/}
        if _ue2e_pid_is "$p" "$_UE2E_SBIN/slurmd" "$slurmd_id" || _ue2e_pid_is "$p" "$_UE2E_SBIN/slurmctld" "$conf"; then
            pids+=("$p")
        fi
    done
    ((${#pids[@]})) || return 0
    _ue2e_log "stopping unrecorded daemons of $conf: ${pids[*]}"
    kill -TERM "${pids[@]}" 2>/dev/null || true
    _ue2e_wait_pids_gone 15 "${pids[@]}" && return 0
    kill -KILL "${pids[@]}" 2>/dev/null || true
    _ue2e_wait_pids_gone 5 "${pids[@]}"
}

# ---------------------------------------------------------------- ports

# True when TCP PORT has a listener (IPv4 or IPv6), from /proc/net/tcp*.
_ue2e_port_listening() {
    local hex
    hex=$(printf '%04X' "$1")
    awk -v p=":$hex" 'NR > 1 && $4 == "0A" && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }' \
        /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

_ue2e_ports() {
    local base=${CLUSTER_PORT_BASE:-16817} i
    printf '%s ' "$base"
    for ((i = 1; i <= ${CLUSTER_NODES:-1}; i++)); do printf '%s ' "$((base + i))"; done
}

# Start time (clock ticks since boot, field 22 of /proc/PID/stat) of PID.
_ue2e_start_ticks() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) } # fields after the last ')': field 3 onwards
    local -a fields
    read -r -a fields <<<"$stat"
    printf '%s' "${fields[19]}"
}

# Registry entry for this port base: "DIR OWNER_PID OWNER_START_TICKS".
_ue2e_registry_file() { printf '%s/port-%s' "$_UE2E_REGISTRY" "${CLUSTER_PORT_BASE:-16817}"; }

_ue2e_register() {
    printf '%s %s %s\n' "$CLUSTER_DIR" "$$" "$(_ue2e_start_ticks "$$")" >"$(_ue2e_registry_file)"
}

# A cluster recorded on the same port base whose owner shell is gone is
# stale: stop it. One whose owner still runs belongs to someone: refuse.
_ue2e_reap_stale() {
    local reg old owner ticks
    reg=$(_ue2e_registry_file)
    [[ -f $reg ]] || return 0
    read -r old owner ticks <"$reg" || true
    if [[ -n $owner && $(_ue2e_start_ticks "$owner") == "$ticks" && -e $old/$_UE2E_MARKER ]]; then
        _ue2e_err "port base ${CLUSTER_PORT_BASE:-16817} is held by the cluster in $old, started by" \
            "live process $owner ($(tr '\0' ' ' <"/proc/$owner/cmdline" 2>/dev/null))." \
            "Stop it (CLUSTER_DIR=$old cluster_down) or set another CLUSTER_PORT_BASE."
        return 1
    fi
    if [[ -n $old && -e $old/$_UE2E_MARKER ]]; then
        _ue2e_log "stopping stale cluster recorded in $old (owner $owner is gone)"
        _ue2e_stop_dir "$old" || return 1
        _ue2e_cgroup_cleanup "$old"
        [[ ${KEEP_CLUSTER_LOGS:-0} == 1 ]] || rm -rf -- "$old"
    fi
    rm -f "$reg"
}

_ue2e_check_ports_free() {
    local p busy=
    for p in $(_ue2e_ports); do
        _ue2e_port_listening "$p" && busy+=" $p"
    done
    [[ -z $busy ]] && return 0
    _ue2e_err "TCP port(s)$busy already in use (another cluster?). Set CLUSTER_PORT_BASE or stop it:"
    ss -ltnp 2>/dev/null | grep -E ":($(_ue2e_ports | tr ' ' '|' | sed 's/|$//'))\b" >&2 || true
    return 1
}

# ---------------------------------------------------------------- munge

_ue2e_munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

ensure_munged() {
    _ue2e_munge_ok && return 0
    mkdir -p /run/munge && chown munge:munge /run/munge || return 1
    # fd 9 may hold the cgroup-mode lock (cluster_up): munged outlives this
    # cluster and must not keep it, or the next cgroup-mode cluster waits for it.
    su -s /bin/sh munge -c /usr/sbin/munged 9>&- || _ue2e_log "munged start returned $? (maybe already starting)"
    local deadline=$((SECONDS + 10))
    until _ue2e_munge_ok; do
        if ((SECONDS >= deadline)); then
            _ue2e_err "munged does not answer (munge -n | unmunge fails)"
            tail -n 20 /var/log/munge/munged.log >&2 2>/dev/null
            return 1
        fi
        sleep 0.2
    done
}

# ---------------------------------------------------------------- config

_ue2e_prepare_dir() {
    if [[ -z ${CLUSTER_DIR:-} ]]; then
        CLUSTER_DIR=$(mktemp -d /tmp/unilab-e2e.XXXXXX) || return 1
        _UE2E_GENERATED_DIR=1
    elif [[ -e $CLUSTER_DIR/$_UE2E_MARKER ]]; then
        _ue2e_log "reusing $CLUSTER_DIR: stopping what it recorded"
        _ue2e_stop_dir "$CLUSTER_DIR" || return 1
        find "$CLUSTER_DIR" -mindepth 1 -delete || return 1
    elif [[ -d $CLUSTER_DIR && -n $(ls -A "$CLUSTER_DIR") ]]; then
        _ue2e_err "CLUSTER_DIR=$CLUSTER_DIR exists, is not empty and is not a cluster dir"
        return 1
    fi
    [[ $CLUSTER_DIR == /* ]] || { _ue2e_err "CLUSTER_DIR must be absolute: $CLUSTER_DIR"; return 1; }
    mkdir -p "$CLUSTER_DIR"/{etc,dev,log,run,spool,state,ctld} || return 1
    chmod 755 "$CLUSTER_DIR" "$CLUSTER_DIR"/{etc,dev,log,run,spool} || return 1
    chmod 700 "$CLUSTER_DIR"/{state,ctld} || return 1
    : >"$CLUSTER_DIR/$_UE2E_MARKER"
    # A global the caller keeps after cluster_up (wait_job_gone, slurmd_log
    # read it), also when given as an assignment before the call: bash 5.2's
    # plain export kept such a one, bash 5.3 (Debian sid's) does not.
    declare -gx CLUSTER_DIR="$CLUSTER_DIR"
}

_ue2e_make_gpus() {
    local m slice p g c
    for m in ${GPU_MINORS:-3 1 0 2}; do
        [[ $m =~ ^[0-9]+$ ]] || { _ue2e_err "bad GPU minor '$m' in GPU_MINORS"; return 1; }
        mknod -m 666 "$CLUSTER_DIR/dev/nvidia$m" c 195 "$m" || return 1
    done
    [[ -n ${CLUSTER_MIG:-} ]] || return 0
    mkdir -p "$CLUSTER_DIR/dev/nvidia-caps" "$CLUSTER_DIR"/dev/fake/{a,b,c} || return 1
    for slice in $CLUSTER_MIG; do
        IFS=: read -r p g c _ _ <<<"$slice"
        [[ $p =~ ^[0-9]+$ && $g =~ ^[0-9]+$ && $c =~ ^[0-9]+$ ]] || { _ue2e_err "bad CLUSTER_MIG slice '$slice'"; return 1; }
        [[ -e $CLUSTER_DIR/dev/nvidia$p ]] || mknod -m 666 "$CLUSTER_DIR/dev/nvidia$p" c 195 "$p" || return 1
        for m in "$g" "$c"; do
            [[ -e $CLUSTER_DIR/dev/nvidia-caps/nvidia-cap$m ]] || mknod -m 444 "$CLUSTER_DIR/dev/nvidia-caps/nvidia-cap$m" c 241 "$m" || return 1
        done
    done
}

# The Gres= of a node: gpu:N, or with CLUSTER_MIG gpu:h200:N plus a count per slice type.
_ue2e_node_gres() {
    local -a minors
    read -r -a minors <<<"${GPU_MINORS:-3 1 0 2}"
    if [[ -z ${CLUSTER_MIG:-} ]]; then
        printf 'gpu:%d' "${#minors[@]}"
        return
    fi
    local slice t out="gpu:h200:${#minors[@]}"
    declare -A count=()
    for slice in $CLUSTER_MIG; do
        IFS=: read -r _ _ _ t _ <<<"$slice"
        count[$t]=$((${count[$t]:-0} + 1))
    done
    for t in $(printf '%s\n' "${!count[@]}" | sort); do out+=",gpu:$t:${count[$t]}"; done
    printf '%s' "$out"
}

_ue2e_write_slurm_conf() {
    local d=$CLUSTER_DIR base=${CLUSTER_PORT_BASE:-16817} host i ngpu
    local -a minors
    read -r -a minors <<<"${GPU_MINORS:-3 1 0 2}"
    ngpu=${#minors[@]}
    host=$(hostname)
    local proctrack=proctrack/linuxproc task=task/none
    case ${CLUSTER_MODE:-plain} in
    plain) ;;
    cgroup | cgroup2) proctrack=proctrack/cgroup task=task/cgroup ;;
    *) _ue2e_err "CLUSTER_MODE must be plain, cgroup or cgroup2, not '${CLUSTER_MODE}'"; return 1 ;;
    esac
    {
        cat <<EOF
# generated by tests/e2e/cluster.sh
ClusterName=unilab-e2e
SlurmctldHost=${host}(127.0.0.1)
SlurmctldPort=${base}
SlurmdPort=$((base + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=${proctrack}
TaskPlugin=${task}
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SwitchType=switch/none
MailProg=/bin/true
ReturnToService=2
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
KillWait=2
MessageTimeout=10
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
MinJobAge=5
Waittime=0
TCPTimeout=5
StateSaveLocation=${d}/ctld
SlurmdSpoolDir=${d}/spool/%n
SlurmctldPidFile=${d}/run/slurmctld.pid
SlurmdPidFile=${d}/run/slurmd-%n.pid
SlurmctldLogFile=${d}/log/slurmctld.log
SlurmdLogFile=${d}/log/slurmd-%n.log
SlurmctldDebug=${CLUSTER_DEBUG:-debug}
SlurmdDebug=${CLUSTER_DEBUG:-debug}
EOF
        # Always our own file (empty without PLUGIN_SO): never the system's
        # /etc/slurm/plugstack.conf, and write_plugstack_conf +
        # cluster_restart_slurmd can switch a plugin on later. Configless:
        # no line, so slurmd reads the plugstack.conf slurmctld shipped into
        # its conf-cache (next to the cached slurm.conf).
        [[ ${CLUSTER_CONFIGLESS:-0} == 1 ]] || printf 'PlugStackConfig=%s/etc/plugstack.conf\n' "$d"
        for ((i = 1; i <= ${CLUSTER_NODES:-1}; i++)); do
            printf 'NodeName=n%d NodeHostname=%s NodeAddr=127.0.0.1 Port=%d CPUs=%d RealMemory=1000 Gres=%s State=UNKNOWN\n' \
                "$i" "$host" "$((base + i))" "${CLUSTER_CPUS:-8}" "$(_ue2e_node_gres)"
        done
        printf 'PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n'
        local flags=${CLUSTER_PROLOG_FLAGS:-}
        # cgroup v2: the prolog must run in the job (RunInJob, 23.11+).
        [[ -n $flags ]] || case ${CLUSTER_MODE:-plain} in cgroup) flags=Contain ;; cgroup2) flags=RunInJob ;; esac
        [[ -z $flags || $flags == none ]] || printf 'PrologFlags=%s\n' "$flags"
        if [[ -n ${CLUSTER_PROLOG_HELPERS:-} ]]; then
            printf 'Prolog=%s/etc/unilab-mps-prolog.sh\nEpilog=%s/etc/unilab-mps-epilog.sh\n' "$d" "$d"
        fi
        _ue2e_extra_conf
    } >"$d/etc/slurm.conf"
}

# CLUSTER_EXTRA_CONF, with configless mode's enable_configless merged into
# its SlurmctldParameters= line (or added as one).
_ue2e_extra_conf() {
    local line merged=0
    if [[ -n ${CLUSTER_EXTRA_CONF:-} ]]; then
        while IFS= read -r line; do
            if [[ ${CLUSTER_CONFIGLESS:-0} == 1 && ${line,,} == slurmctldparameters=* ]]; then
                line+=,enable_configless
                merged=1
            fi
            printf '%s\n' "$line"
        done <<<"$CLUSTER_EXTRA_CONF"
    fi
    if [[ ${CLUSTER_CONFIGLESS:-0} == 1 && $merged == 0 ]]; then
        printf 'SlurmctldParameters=enable_configless\n'
    fi
    return 0
}

_ue2e_write_gres_conf() {
    local i m slice p g c t u d=$CLUSTER_DIR/dev
    if [[ -n ${CLUSTER_MIG:-} && ${CLUSTER_MIG_FAKE_GPUS:-0} == 1 ]]; then
        _ue2e_write_fake_gpus || return 1
        printf 'AutoDetect=nvml\n' >"$CLUSTER_DIR/etc/gres.conf"
        return 0
    fi
    {
        printf 'AutoDetect=off\n'
        for ((i = 1; i <= ${CLUSTER_NODES:-1}; i++)); do
            for m in ${GPU_MINORS:-3 1 0 2}; do
                printf 'NodeName=n%d Name=gpu%s File=%s/nvidia%s\n' "$i" "${CLUSTER_MIG:+ Type=h200}" "$d" "$m"
            done
            for slice in ${CLUSTER_MIG:-}; do
                IFS=: read -r p g c t _ <<<"$slice"
                printf 'NodeName=n%d Name=gpu Type=%s MultipleFiles=%s/nvidia%s,%s/nvidia-caps/nvidia-cap%s,%s/nvidia-caps/nvidia-cap%s\n' \
                    "$i" "$t" "$d" "$p" "$d" "$g" "$d" "$c"
            done
        done
    } >"$CLUSTER_DIR/etc/gres.conf"
}

# fake_gpus.conf (CLUSTER_MIG_FAKE_GPUS): type|cpus|cpu range|links|files|unique_id|flags,
# "(null)" for an empty field (slurm's strtok drops empty ones); nvidia_gpu_env
# makes it set CUDA_VISIBLE_DEVICES. Each file must be a device node:
# symlinks into dev/ under the sort-order directories a, b, c.
_ue2e_write_fake_gpus() {
    local m slice p g c t u d=$CLUSTER_DIR/dev/fake dir
    {
        for m in ${GPU_MINORS:-3 1 0 2}; do
            ln -sf "$CLUSTER_DIR/dev/nvidia$m" "$d/a/nvidia$m" || return 1
            printf 'h200|8|0-7|(null)|%s/a/nvidia%s|(null)|nvidia_gpu_env\n' "$d" "$m"
        done
        for slice in $CLUSTER_MIG; do
            IFS=: read -r p g c t u <<<"$slice"
            dir=c
            [[ $p == 1 ]] && dir=b
            for m in "nvidia$p" "nvidia-cap$g" "nvidia-cap$c"; do
                if [[ $m == nvidia-cap* ]]; then ln -sf "$CLUSTER_DIR/dev/nvidia-caps/$m" "$d/$dir/$m"; else ln -sf "$CLUSTER_DIR/dev/$m" "$d/$dir/$m"; fi || return 1
            done
            printf '%s|8|0-7|(null)|%s/%s/nvidia%s,%s/%s/nvidia-cap%s,%s/%s/nvidia-cap%s|%s|nvidia_gpu_env\n' \
                "$t" "$d" "$dir" "$p" "$d" "$dir" "$g" "$d" "$dir" "$c" "$u"
        done
    } >"$CLUSTER_DIR/etc/fake_gpus.conf"
}

_ue2e_write_cgroup_conf() {
    # Only in cgroup mode: with linuxproc + task/none no cgroup plugin loads.
    if [[ ${CLUSTER_MODE:-plain} == cgroup ]]; then
        cat >"$CLUSTER_DIR/etc/cgroup.conf" <<'EOF'
CgroupPlugin=cgroup/v1
CgroupMountpoint=/sys/fs/cgroup
ConstrainDevices=yes
ConstrainCores=no
ConstrainRAMSpace=no
EOF
    elif [[ ${CLUSTER_MODE:-plain} == cgroup2 ]]; then
        # No systemd (and no dbus) here: slurmd makes its own scope.
        cat >"$CLUSTER_DIR/etc/cgroup.conf" <<'EOF'
CgroupPlugin=cgroup/v2
CgroupMountpoint=/sys/fs/cgroup
IgnoreSystemd=yes
ConstrainDevices=yes
ConstrainCores=no
ConstrainRAMSpace=no
EOF
    fi
    if [[ ${CLUSTER_MODE:-plain} == cgroup* && -n ${CLUSTER_CGROUP_EXTRA:-} ]]; then
        printf '%s\n' "$CLUSTER_CGROUP_EXTRA" >>"$CLUSTER_DIR/etc/cgroup.conf"
    fi
}

# PLUGIN_ARGS, with the history journal in the cluster's own directory unless
# they name one: a test cluster never writes the host's /var/log.
_ue2e_plugin_args() {
    local args=${PLUGIN_ARGS:-}
    [[ " $args" == *" history="* ]] || args+="${args:+ }history=$CLUSTER_DIR/history/history.jsonl"
    printf '%s' "$args"
}

# (Re)write plugstack.conf from PLUGIN_SO / PLUGIN_ARGS / PLUGIN_REQUIRED.
# After changing it on a running cluster, call cluster_restart_slurmd.
write_plugstack_conf() {
    local f=$CLUSTER_DIR/etc/plugstack.conf kind=optional
    if [[ -z ${PLUGIN_SO:-} ]]; then
        printf '# no SPANK plugin (PLUGIN_SO unset)\n' >"$f"
        chmod 644 "$f"
        return 0
    fi
    [[ $PLUGIN_SO == /* ]] || { _ue2e_err "PLUGIN_SO must be an absolute path: $PLUGIN_SO"; return 1; }
    [[ -f $PLUGIN_SO ]] || { _ue2e_err "PLUGIN_SO does not exist: $PLUGIN_SO"; return 1; }
    [[ ${PLUGIN_REQUIRED:-0} == 1 ]] && kind=required
    printf '%s %s %s\n' "$kind" "$PLUGIN_SO" "$(_ue2e_plugin_args)" >"$f"
    chmod 644 "$f"
    _ue2e_write_prolog_helpers
}

# The Prolog=/Epilog= wrappers (CLUSTER_PROLOG_HELPERS): slurmd runs them
# without arguments, so each execs its helper with the plugin's arguments as
# a --config file, the way docs/ADMIN.md section 6 tells admins to.
_ue2e_write_prolog_helpers() {
    [[ -n ${CLUSTER_PROLOG_HELPERS:-} ]] || return 0
    local etc=$CLUSTER_DIR/etc kind arg
    [[ $CLUSTER_PROLOG_HELPERS == /* && -x $CLUSTER_PROLOG_HELPERS/unilab-mps-prolog ]] ||
        { _ue2e_err "CLUSTER_PROLOG_HELPERS must be an absolute dir holding unilab-mps-prolog: $CLUSTER_PROLOG_HELPERS"; return 1; }
    : >"$etc/unilab-mps.args"
    for arg in $(_ue2e_plugin_args); do printf '%s\n' "$arg" >>"$etc/unilab-mps.args"; done
    for kind in prolog epilog; do
        printf '#!/bin/sh\nexec %s/unilab-mps-%s --config %s/unilab-mps.args\n' \
            "$CLUSTER_PROLOG_HELPERS" "$kind" "$etc" >"$etc/unilab-mps-$kind.sh"
        chmod 755 "$etc/unilab-mps-$kind.sh"
    done
    chmod 644 "$etc/unilab-mps.args"
}

_ue2e_write_config() {
    _ue2e_write_slurm_conf || return 1
    _ue2e_write_gres_conf || return 1
    _ue2e_write_cgroup_conf || return 1
    write_plugstack_conf || return 1
    find "$CLUSTER_DIR/etc" -maxdepth 1 -type f ! -name '*.sh' -exec chmod 644 {} + || return 1
}

# ---------------------------------------------------------------- daemons

# Wait for a pid file written by a daemonizing slurm daemon; record its PID
# (ID: the word its command line holds, default SLURM_CONF).
_ue2e_record_pid() {
    local pidfile=$1 record=$2 exe=$3 what=$4 id=${5:-$SLURM_CONF} pid
    local deadline=$((SECONDS + $(_ue2e_wait_s)))
    while :; do
        pid=$(cat "$pidfile" 2>/dev/null || true)
        if [[ -n $pid ]] && _ue2e_pid_is "$pid" "$exe" "$id"; then
            printf '%s\n' "$pid" >"$record"
            return 0
        fi
        if ((SECONDS >= deadline)); then
            _ue2e_err "$what did not come up (no live PID in $pidfile after $(_ue2e_wait_s)s)"
            cluster_log_tails "$CLUSTER_DIR"
            return 1
        fi
        sleep 0.2
    done
}

_ue2e_daemon_env() {
    local preload=()
    [[ ${CLUSTER_MODE:-plain} == cgroup2 && -n ${CLUSTER_CGROUP2_SHIM:-} ]] && preload=("LD_PRELOAD=$CLUSTER_CGROUP2_SHIM")
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "${preload[@]}" "$@"
}

_ue2e_start_slurmctld() {
    local d=$CLUSTER_DIR
    # -i: ignore state (fresh dir anyway); -f: absolute config path.
    _ue2e_daemon_env setsid "$_UE2E_SBIN/slurmctld" -i -f "$SLURM_CONF" \
        </dev/null >>"$d/log/slurmctld.out" 2>&1 || {
        _ue2e_err "slurmctld exited with $?"
        cluster_log_tails "$CLUSTER_DIR"
        return 1
    }
    _ue2e_record_pid "$d/run/slurmctld.pid" "$d/state/slurmctld.pid" "$_UE2E_SBIN/slurmctld" slurmctld || return 1
    local deadline=$((SECONDS + $(_ue2e_wait_s)))
    until [[ $(scontrol ping 2>/dev/null) == *'is UP'* ]]; do
        if ((SECONDS >= deadline)); then
            _ue2e_err "slurmctld does not answer scontrol ping"
            cluster_log_tails "$CLUSTER_DIR"
            return 1
        fi
        sleep 0.3
    done
}

_ue2e_start_slurmd() {
    local node=$1 d=$CLUSTER_DIR
    local -a source=(-f "$SLURM_CONF")
    mkdir -p "$d/spool/$node" || return 1
    if _ue2e_is_configless; then
        # No -f, no SLURM_CONF (env -i): slurmd fetches its files.
        source=(--conf-server "$(_ue2e_slurmd_id)")
        [[ -e /run/slurm ]] || : >"$d/state/made-run-slurm"
    fi
    _ue2e_daemon_env setsid "$_UE2E_SBIN/slurmd" -N "$node" "${source[@]}" \
        </dev/null >>"$d/log/slurmd-$node.out" 2>&1 || {
        _ue2e_err "slurmd -N $node exited with $?"
        cluster_log_tails "$CLUSTER_DIR"
        return 1
    }
    _ue2e_record_pid "$d/run/slurmd-$node.pid" "$d/state/slurmd-$node.pid" "$_UE2E_SBIN/slurmd" "slurmd $node" \
        "$(_ue2e_slurmd_id)"
}

# Print "NODE STATE" for every node of the cluster (sinfo's long state names).
cluster_node_states() {
    sinfo -h -N -o '%N %T' 2>/dev/null | sort -u
}

# Wait until every NODE given (default: all) is exactly idle.
wait_nodes_idle() {
    local nodes=("$@") n st ok
    ((${#nodes[@]})) || read -r -a nodes <<<"$(_ue2e_cluster_nodes)"
    local deadline=$((SECONDS + $(_ue2e_wait_s)))
    while :; do
        ok=1
        for n in "${nodes[@]}"; do
            # one line per partition the node is in: the same state on each
            st=$(sinfo -h -n "$n" -N -o '%T' 2>/dev/null | sort -u || true)
            [[ $st == idle ]] || { ok=0; break; }
        done
        ((ok)) && return 0
        if ((SECONDS >= deadline)); then
            _ue2e_err "nodes ${nodes[*]} not idle after $(_ue2e_wait_s)s; sinfo says:"
            cluster_node_states >&2
            scontrol show node "${nodes[@]}" 2>&1 | grep -E 'NodeName|State|Reason' >&2
            cluster_log_tails "$CLUSTER_DIR"
            return 1
        fi
        sleep 0.3
    done
}

# ---------------------------------------------------------------- public API

cluster_up() {
    local nnodes=${CLUSTER_NODES:-1}
    [[ $nnodes == 1 || $nnodes == 2 ]] || { _ue2e_err "CLUSTER_NODES must be 1 or 2, not '$nnodes'"; return 1; }
    [[ $(id -u) == 0 ]] || { _ue2e_err "cluster_up needs root"; return 1; }
    mkdir -p "$_UE2E_REGISTRY" || return 1
    if [[ ${CLUSTER_MODE:-plain} == cgroup2 && $(stat -f -c %T /sys/fs/cgroup 2>/dev/null) != cgroup2fs ]]; then
        _ue2e_err "CLUSTER_MODE=cgroup2 needs cgroup v2 mounted at /sys/fs/cgroup (SLURM_ROOT_CGROUP2=1 scripts/slurm-root run ...)"
        return 1
    fi
    if [[ ${CLUSTER_MODE:-plain} == cgroup* ]]; then
        # Every cgroup-mode slurmd on this machine uses the same v1 root
        # (slurm_<node>): one such cluster at a time. The lock lives as long
        # as this shell (fd 9), so waiting here serializes concurrent runs.
        exec 9>/tmp/unilab-e2e-cgroup.lock
        flock -w "${CLUSTER_CGROUP_LOCK_WAIT_S:-900}" 9 || { _ue2e_err "another cgroup-mode cluster holds /tmp/unilab-e2e-cgroup.lock"; return 1; }
    fi
    _ue2e_reap_stale || return 1
    _ue2e_check_ports_free || return 1
    ensure_munged || return 1
    _ue2e_prepare_dir || return 1
    export SLURM_CONF=$CLUSTER_DIR/etc/slurm.conf
    CLUSTER_NODE_NAMES=$(_ue2e_node_names)
    CLUSTER_NODE_NAMES=${CLUSTER_NODE_NAMES% }
    export CLUSTER_NODE_NAMES
    # Remember what this dir needs to be torn down without our shell variables.
    printf 'CLUSTER_MODE=%s\nCLUSTER_NODES=%s\nCLUSTER_PORT_BASE=%s\nCLUSTER_CONFIGLESS=%s\nCLUSTER_PROLOG_HELPERS=%s\n' \
        "${CLUSTER_MODE:-plain}" "$nnodes" "${CLUSTER_PORT_BASE:-16817}" "${CLUSTER_CONFIGLESS:-0}" \
        "${CLUSTER_PROLOG_HELPERS:-}" >"$CLUSTER_DIR/state/params"
    _ue2e_make_gpus || return 1
    _ue2e_write_config || return 1
    _ue2e_register || return 1
    local t0=$SECONDS n
    _ue2e_start_slurmctld || return 1
    for n in $CLUSTER_NODE_NAMES; do
        _ue2e_start_slurmd "$n" || return 1
    done
    wait_nodes_idle || return 1
    _ue2e_log "up in $((SECONDS - t0))s: mode=${CLUSTER_MODE:-plain}$([[ ${CLUSTER_CONFIGLESS:-0} == 1 ]] && printf ' configless') nodes=$CLUSTER_NODE_NAMES dir=$CLUSTER_DIR plugin=${PLUGIN_SO:-none}"
}

# Stop everything this cluster started; keep or remove CLUSTER_DIR.
# Safe to call twice and from an EXIT trap; never fails the caller's shell.
cluster_down() {
    local dir=${CLUSTER_DIR:-} rc=0
    [[ -n $dir && -e $dir/$_UE2E_MARKER ]] || return 0
    if [[ -s $dir/log/user-epilogs.log ]]; then
        _ue2e_log "Slurm started unilab-mps-epilog as the job's user $(wc -l <"$dir/log/user-epilogs.log") time(s) (RunInJob x11 race); each was finished as root:"
        sed 's/^/[cluster]   /' "$dir/log/user-epilogs.log" >&2
    fi
    _ue2e_stop_dir "$dir" || rc=1
    _ue2e_cgroup_cleanup "$dir"
    local reg regdir _rest base
    base=$(sed -n 's/^CLUSTER_PORT_BASE=//p' "$dir/state/params" 2>/dev/null)
    reg=$(CLUSTER_PORT_BASE=${base:-${CLUSTER_PORT_BASE:-16817}} _ue2e_registry_file)
    if [[ -f $reg ]] && read -r regdir _rest <"$reg" && [[ $regdir == "$dir" ]]; then
        rm -f "$reg"
    fi
    if grep -qx 'CLUSTER_MODE=cgroup2\{0,1\}' "$dir/state/params" 2>/dev/null; then exec 9>&-; fi  # the cgroup lock
    if ((rc)); then
        _ue2e_err "some daemons of $dir did not stop; keeping the dir"
    elif [[ ${KEEP_CLUSTER_LOGS:-0} == 1 ]]; then
        _ue2e_log "stopped; logs kept in $dir/log"
        rm -f "$dir/$_UE2E_MARKER"
    else
        rm -rf -- "$dir"
    fi
    if [[ ${_UE2E_GENERATED_DIR:-0} == 1 ]]; then
        CLUSTER_DIR=
        _UE2E_GENERATED_DIR=0
    fi
    return 0
}

# Remove the (empty) cgroups slurm left behind in cgroup mode. This slurmd
# build names its v1 root slurm_<node> (multiple-slurmd support), so only our
# node names are touched; rmdir fails harmlessly on a cgroup with tasks.
_ue2e_cgroup_cleanup() {
    local dir=$1 nodes d i pattern
    if grep -qx 'CLUSTER_MODE=cgroup' "$dir/state/params" 2>/dev/null; then
        pattern='/sys/fs/cgroup/*/slurm_n%d'
    elif grep -qx 'CLUSTER_MODE=cgroup2' "$dir/state/params" 2>/dev/null; then
        # cgroup v2 with IgnoreSystemd: slurmd's own scope per node.
        pattern='/sys/fs/cgroup/system.slice/n%d_slurmstepd.scope'
    else
        return 0
    fi
    nodes=$(sed -n 's/^CLUSTER_NODES=//p' "$dir/state/params")
    for ((i = 1; i <= ${nodes:-1}; i++)); do
        # shellcheck disable=SC2046 # the v1 pattern is a glob
        while IFS= read -r d; do
            rmdir "$d" 2>/dev/null || true
        done < <(find $(printf "$pattern" "$i") -depth -type d 2>/dev/null)
    done
}

# SlurmdStartTime of NODE as slurmctld knows it (changes when a new slurmd
# registers).
_ue2e_slurmd_start_time() {
    local out
    out=$(scontrol -o show node "$1" 2>/dev/null) || true
    [[ $out =~ SlurmdStartTime=([^ ]+) ]] && printf '%s' "${BASH_REMATCH[1]}"
    return 0
}

# Restart slurmd on NODE (default: every node), then wait until slurmctld saw
# each new slurmd register (SlurmdStartTime changed) and the node is idle.
# Configless: `scontrol reconfigure` first, so that slurmctld rereads the
# files it ships (it loads them at start and at reconfigure).
cluster_restart_slurmd() {
    local nodes=("$@") n
    ((${#nodes[@]})) || read -r -a nodes <<<"$(_ue2e_cluster_nodes)"
    if _ue2e_is_configless; then
        scontrol reconfigure || return 1
    fi
    local -A before=()
    for n in "${nodes[@]}"; do
        before[$n]=$(_ue2e_slurmd_start_time "$n")
        _ue2e_kill_recorded "$CLUSTER_DIR/state/slurmd-$n.pid" "$_UE2E_SBIN/slurmd" "$(_ue2e_slurmd_id)" || return 1
        _ue2e_start_slurmd "$n" || return 1
    done
    local deadline=$((SECONDS + $(_ue2e_wait_s)))
    for n in "${nodes[@]}"; do
        while [[ $(_ue2e_slurmd_start_time "$n") == "${before[$n]}" ]]; do
            if ((SECONDS >= deadline)); then
                _ue2e_err "restarted slurmd $n did not register (SlurmdStartTime still ${before[$n]})"
                cluster_log_tails "$CLUSTER_DIR"
                return 1
            fi
            sleep 0.2
        done
    done
    wait_nodes_idle "${nodes[@]}"
}

# Run CMD ARGS... as USER with a clean, fixed environment (HOME, USER,
# LOGNAME, SHELL, PATH, LANG, SLURM_CONF: nothing leaks from the caller, which
# srun would otherwise pass on to the tasks), cwd = the user's home unless
# AS_USER_CWD is set, stdin passed through. Add variables with
# `as_user USER env VAR=value CMD...`. Bounded by AS_USER_TIMEOUT seconds
# (default 120; exit status 124 on timeout).
as_user() {
    local user=$1 home cwd script
    shift
    (($#)) || { _ue2e_err "as_user: no command"; return 2; }
    home=$(getent passwd "$user" | cut -d: -f6)
    [[ -n $home ]] || { _ue2e_err "as_user: unknown user '$user'"; return 2; }
    cwd=${AS_USER_CWD:-$home}
    script=$(printf 'cd %q || exit 125; exec env -i HOME=%q USER=%q LOGNAME=%q SHELL=/bin/bash PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 SLURM_CONF=%q' \
        "$cwd" "$home" "$user" "$user" "${SLURM_CONF:?SLURM_CONF unset: cluster_up first}")
    script+=$(printf ' %q' "$@")
    # --foreground: su keeps the terminal (srun may read stdin); on timeout
    # su passes SIGTERM on to the command, -k 5 SIGKILLs su if it lingers.
    timeout --foreground -k 5 "${AS_USER_TIMEOUT:-120}" su "$user" -s /bin/bash -c "$script"
}

ensure_test_users() {
    local u
    for u in unimps1 unimps2; do
        id -u "$u" >/dev/null 2>&1 || useradd -m -s /bin/bash "$u" || return 1
    done
}

# Resume NODE after a provoked prolog/epilog failure drained it; wait for idle.
node_resume() {
    local node=${1:?node_resume NODE}
    scontrol update nodename="$node" state=resume || return 1
    wait_nodes_idle "$node"
}

# Wait until JOBID has left the queue and its epilog has finished: the job is
# unknown to slurmctld (purged) or in a final state, squeue no longer lists it
# and no node of the cluster is COMPLETING. An unreachable slurmctld never
# counts as "gone".
wait_job_gone() {
    local job=${1:?wait_job_gone JOBID [timeout]} limit=${2:-$(_ue2e_wait_s)} out state
    local deadline=$((SECONDS + limit))
    while :; do
        state=unknown
        if out=$(scontrol -o show job "$job" 2>&1); then
            [[ $out =~ JobState=([A-Z_]+) ]] && state=${BASH_REMATCH[1]}
        elif [[ $out == *"Invalid job id"* ]]; then
            state=PURGED
        fi
        case $state in
        PURGED | COMPLETED | CANCELLED | FAILED | TIMEOUT | NODE_FAIL | PREEMPTED | BOOT_FAIL | DEADLINE | OUT_OF_MEMORY)
            if [[ -z $(squeue -h -j "$job" 2>/dev/null) &&
                $(sinfo -h -N -o '%T' 2>/dev/null) != *completing* ]]; then
                [[ ${CLUSTER_FINISH_USER_EPILOGS:-1} == 0 ]] || cluster_finish_user_epilog "$job"
                return
            fi
            ;;
        esac
        if ((SECONDS >= deadline)); then
            _ue2e_err "job $job still present after ${limit}s (state $state: ${out:0:200})"
            squeue -a 2>&1 | head -n 20 >&2
            cluster_node_states >&2
            cluster_log_tails "$CLUSTER_DIR"
            return 1
        fi
        sleep 0.3
    done
}

# Slurm 24.11.0 to 25.11.3 with RunInJob can start the Epilog= entirely as the
# job's user: its extern step forks it while its x11 cleanup has dropped
# privileges (fixed in 25.11.4; docs/DESIGN.md). unilab-mps-epilog then acts
# on nothing, fails with "runs as uid U (gid G), not root" and the node
# drains. Finish such an epilog as docs/ADMIN.md section 6 tells an admin:
# run unilab-mps-epilog again as root with the job's variables, then resume
# the node. wait_job_gone calls this (CLUSTER_FINISH_USER_EPILOGS=0: not).
# Each time is logged to $CLUSTER_DIR/log/user-epilogs.log, which
# cluster_down prints; a rerun that fails leaves the node drained.
cluster_finish_user_epilog() {
    local job=$1 log node line uid gid rc helpers done_list=$CLUSTER_DIR/log/user-epilogs.log
    helpers=$(sed -n 's/^CLUSTER_PROLOG_HELPERS=//p' "$CLUSTER_DIR/state/params" 2>/dev/null)
    [[ -n $helpers ]] || return 0
    for log in "$CLUSTER_DIR"/log/slurmd-*.log; do
        line=$(grep -o "unilab-mps-epilog: job $job epilog failed: runs as uid [0-9]* (gid [0-9]*), not root" "$log" 2>/dev/null | tail -n1)
        [[ $line =~ uid\ ([0-9]+)\ \(gid\ ([0-9]+)\) ]] || continue
        uid=${BASH_REMATCH[1]} gid=${BASH_REMATCH[2]}
        node=${log##*/slurmd-} node=${node%.log}
        grep -q "^job $job on $node:" "$done_list" 2>/dev/null && continue
        env -i SLURM_JOB_ID="$job" SLURM_JOB_UID="$uid" SLURM_JOB_GID="$gid" SLURMD_NODENAME="$node" \
            SLURM_CONF="$SLURM_CONF" "$helpers/unilab-mps-epilog" --config "$CLUSTER_DIR/etc/unilab-mps.args" \
            >>"$done_list.out" 2>&1
        rc=$?
        printf 'job %s on %s: Slurm ran unilab-mps-epilog as uid %s, which failed closed (node %s); rerun as root: exit %s\n' \
            "$job" "$node" "$uid" "$(sinfo -h -n "$node" -o %T 2>/dev/null)" "$rc" >>"$done_list"
        _ue2e_log "$(tail -n1 "$done_list")"
        ((rc == 0)) && { node_resume "$node" || return 1; }
    done
    return 0
}

# The user-run epilogs cluster_finish_user_epilog finished, one line each.
cluster_user_epilogs() {
    cat "${CLUSTER_DIR:?no cluster}/log/user-epilogs.log" 2>/dev/null
}

# Print the path of NODE's slurmd log (default n1).
slurmd_log() {
    printf '%s/log/slurmd-%s.log\n' "${CLUSTER_DIR:?no cluster}" "${1:-n1}"
}

slurmctld_log() {
    printf '%s/log/slurmctld.log\n' "${CLUSTER_DIR:?no cluster}"
}
