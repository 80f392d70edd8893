#!/usr/bin/env bash
# Reliability and security matrix (docs/RELIABILITY.md): faults survived,
# attacks refused, nothing leaked. Three parts:
#   helpers  the standalone prolog/epilog helpers driven with a Slurm-like
#            environment, as slurmd would run them: for the cases where a
#            whole cluster adds nothing (same run_job_prolog/run_job_epilog)
#   cli      the unilab-mps command as hostile users and as root
#   cluster  a real local Slurm cluster (plain mode) for what needs Slurm:
#            drain/requeue, a failed prolog seen by the job, slurmd restarted
#            mid-job, a daemon SIGKILLed mid-job, the job's environment,
#            option values given to srun/sbatch
# Every case states its expected outcome, checks it, and prints one line
# `CASE <id> PASS|FAIL <observed>` (scripts/reliability-report builds the
# table from them), then `N passed, M failed`.
# Usage: tests/e2e/faults_e2e.sh BUILD_DIR [helpers|cli|cluster ...]
# Env: CLUSTER_PORT_BASE (default 18100), KEEP_CLUSTER_LOGS=1.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/e2e_lib.sh"  # with tests/lib.sh and cluster.sh
require_root
build=$(cd "${1:?usage: $0 BUILD_DIR [helpers|cli|cluster ...]}" && pwd)
shift
parts=("$@")
((${#parts[@]})) || parts=(helpers cli cluster)
export CLUSTER_PORT_BASE=${CLUSTER_PORT_BASE:-18100}
T0=$SECONDS

make_stage ufl "$build"
MPS_OPT=SPANK__SLURM_SPANK_OPTION_unilab_mps_unilab_mps
HOST=$(hostname)
SLEEPERS=()
stage_teardown() {
  local p
  for p in "${SLEEPERS[@]}"; do kill -9 "$p" 2>/dev/null; done
}

# ---------------------------------------------------------------- cases
# A process that must survive: USER sleeps; prints its pid.
sleeper() {
  setpriv --reuid="$(id -u "$1")" --regid="$(id -g "$1")" --init-groups sleep 600 </dev/null >/dev/null 2>&1 &
  SLEEPERS+=($!)
  echo $!
}

ensure_test_users
U1=$(id -u unimps1) G1=$(id -g unimps1) U2=$(id -u unimps2) G2=$(id -g unimps2)

# An LD_PRELOAD probe and look-alike tools: whoever loads or runs them leaves
# a line in $STAGE/evil.log.
make_evil() {
  [ -e "$STAGE/evil.log" ] && return 0
  local tool
  mkdir -p "$STAGE/evil"
  printf '#include <stdio.h>\n#include <unistd.h>\n__attribute__((constructor)) static void evil(void) { char e[512] = {0}; if (readlink("/proc/self/exe", e, sizeof e - 1) < 0) return; FILE *f = fopen("%s/evil.log", "a"); if (f) { fprintf(f, "%%s uid=%%d\\n", e, (int)getuid()); fclose(f); } }\n' \
    "$STAGE" >"$STAGE/evil/evil.c"
  HAVE_SO=0
  gcc -shared -fPIC -o "$STAGE/evil/evil.so" "$STAGE/evil/evil.c" 2>/dev/null && HAVE_SO=1
  : >"$STAGE/evil.log"
  chmod 666 "$STAGE/evil.log"
  chmod 755 "$STAGE/evil" "$STAGE/evil/evil.so" 2>/dev/null
  for tool in nvidia-smi nvidia-cuda-mps-control; do
    printf '#!/bin/sh\necho "$0" >>%s/evil.log\n' "$STAGE" >"$STAGE/evil/$tool"
    chmod 755 "$STAGE/evil/$tool"
  done
  # Controls: both probes fire when a process does load/run them, so an
  # empty log below means "not reached", not "probe broken".
  env LD_PRELOAD="$STAGE/evil/evil.so" /bin/true 2>/dev/null
  env PATH="$STAGE/evil:/usr/bin:/bin" sh -c 'nvidia-smi' >/dev/null 2>&1
  PROBES_FIRE=0
  grep -q '^/usr/bin/true uid=\|^/bin/true uid=' "$STAGE/evil.log" && grep -qx "$STAGE/evil/nvidia-smi" "$STAGE/evil.log" && PROBES_FIRE=1
  : >"$STAGE/evil.log"
}

# The parts (each a file of its own), then the run.
for part_file in "$here"/faults/{helpers,cli,cluster}.sh; do . "$part_file"; done

# Each part's floor: cases, checks.
PART_FLOORS=([helpers]="26 78" [cli]="3 9" [cluster]="8 24")
run_parts "faults suite" "${parts[@]}"
finish
