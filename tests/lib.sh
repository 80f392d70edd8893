# Shared helpers for the shell tests (source it). Assertions count passes and
# failures; `finish` prints the closing "N passed, M failed" line and fails
# when a check failed or when fewer checks ran than the suite's declared
# floor (MIN_CHECKS, set by each suite after sourcing this file; never 0).
PASS=0
FAIL=0
SKIP=0
MIN_CHECKS=1

pass() { PASS=$((PASS + 1)); printf '  ok   %s\n' "$1"; }
FAILED_NAMES=()
fail() { FAIL=$((FAIL + 1)); FAILED_NAMES+=("$1"); printf '  FAIL %s\n' "$1"; [ -n "${2:-}" ] && printf '       %s\n' "$2"; return 0; }
check() { # check NAME CMD...: passes when CMD succeeds
  local name=$1; shift
  if "$@" >/tmp/unilab-check.$$ 2>&1; then pass "$name"; else fail "$name" "$(head -c 600 /tmp/unilab-check.$$)"; fi
  rm -f /tmp/unilab-check.$$
}
check_not() { # check_not NAME CMD...: passes when CMD fails
  local name=$1; shift
  if "$@" >/dev/null 2>&1; then fail "$name" "command unexpectedly succeeded: $*"; else pass "$name"; fi
}
expect_eq() { # expect_eq NAME EXPECTED ACTUAL
  if [ "$2" = "$3" ]; then pass "$1"; else fail "$1" "expected '$2', got '$3'"; fi
}
expect_contains() { # expect_contains NAME HAYSTACK NEEDLE
  case "$2" in *"$3"*) pass "$1" ;; *) fail "$1" "'$3' not in: $(printf '%s' "$2" | head -c 600)" ;; esac
}
expect_not_contains() {
  case "$2" in *"$3"*) fail "$1" "'$3' unexpectedly in: $(printf '%s' "$2" | head -c 600)" ;; *) pass "$1" ;; esac
}
# skip NAME REASON: a check that cannot run here because the environment
# lacks something (never for a product failure); counted and printed.
skip() { SKIP=$((SKIP + 1)); printf '  SKIP %s: %s\n' "$1" "$2"; }
# check_gone NAME PID: PID must be a number and no longer a running process
# (an empty or garbled pid is a failure, not a pass).
check_gone() {
  if [[ ! ${2:-} =~ ^[1-9][0-9]*$ ]]; then fail "$1" "no pid to check (got '${2:-}')"; return 0; fi
  check_not "$1" proc_running "$2"
}
finish() {
  local ran=$((PASS + FAIL)) floor=$((MIN_CHECKS > 0 ? MIN_CHECKS : 1))
  # Repeated at the end, where a truncated log (CI keeps its tail) still shows them.
  [ "$FAIL" -gt 0 ] && printf 'failed: %s\n' "${FAILED_NAMES[@]}"
  echo "$PASS passed, $FAIL failed, $SKIP skipped ($ran checks ran; this suite declares at least $floor)"
  if [ "$ran" -lt "$floor" ]; then
    echo "FAIL: only $ran checks ran, fewer than the $floor this suite declares: a part of it did not run"
    return 1
  fi
  [ "$FAIL" -eq 0 ]
}

ensure_test_users() {
  local u
  for u in unimps1 unimps2; do
    id "$u" >/dev/null 2>&1 || useradd -m -s /bin/bash "$u"
  done
}

# stage_binaries BUILD_DIR DEST: copies the built programs, plugin and fakes
# into DEST (world-readable, 0755), so non-root users and slurmd can run them
# whatever the permissions of the checkout.
stage_binaries() {
  local build=$1 dest=$2
  mkdir -p "$dest/bin" "$dest/fakes"
  chmod 755 "$dest" "$dest/bin" "$dest/fakes"
  install -m 755 "$build/cli/unilab-mps" "$build/prolog/unilab-mps-prolog" "$build/prolog/unilab-mps-epilog" "$dest/bin/"
  [ -f "$build/spank/unilab_mps.so" ] && install -m 755 "$build/spank/unilab_mps.so" "$dest/"
  install -m 755 "$build/fakes/bin/nvidia-smi" "$build/fakes/bin/nvidia-cuda-mps-control" \
    "$build/fakes/bin/fake-cuda-client" "$build/fakes/bin/fake-driver-proc" "$dest/fakes/"
  install -m 644 "$build/fakes/bin/gpus.csv" "$dest/fakes/gpus.csv"
  # The fake driver's /proc/driver (driver_proc=): device minors, MIG capability minors.
  rm -rf "$dest/fakes/driver-proc"
  cp -r "$build/fakes/bin/driver-proc" "$dest/fakes/driver-proc"
  chmod -R a+rX "$dest/fakes/driver-proc"
}

# Runs a command as USER with a clean login-like environment plus the
# variables named in KEEP_VARS (space separated), without any shell string
# built from the arguments: they travel as a NUL-separated file.
as_user_env() {
  local user=$1; shift
  local argf; argf=$(mktemp /tmp/unilab-args.XXXXXX)
  printf '%s\0' "$@" >"$argf"
  chmod 644 "$argf"
  local envs=() v
  for v in ${KEEP_VARS:-}; do
    [ -n "${!v+x}" ] && envs+=("$v=${!v}")
  done
  local rc=0
  su "$user" -s /bin/bash -c 'mapfile -d "" -t a <"$0"; exec env "${@}" "${a[@]}"' "$argf" "${envs[@]}" || rc=$?
  rm -f "$argf"
  return $rc
}

# Processes of the fake MPS daemon whose environment names PIPE_PREFIX.
mps_daemons_under() {
  local prefix=$1 pid
  for pid in $(pgrep -f 'nvidia-cuda-mps-control' || true); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -q "^CUDA_MPS_PIPE_DIRECTORY=$prefix"; then echo "$pid"; fi
  done
}

# True when PID exists and is not a zombie (a killed daemon reparented to a
# PID 1 that reaps late stays a zombie for a moment).
# run_entry JOB NODE GPU|m: a Slurm job's daemon directory under run_dir
# (common/slurm/job.cpp job_run_entry: <job>.<GRES index or m>.<node tag>).
# The tags of the node names the suites use are spelled out, not computed:
# a change of the hash would strand the entries of jobs running at an
# upgrade, and must fail the suites.
run_entry() {
  local tag
  case $2 in
  n1) tag=8KO ;;
  n2) tag=PCa ;;
  *) echo "run_entry: no tag known for node '$2' (tests/lib.sh)" >&2; return 1 ;;
  esac
  printf '%s.%s.%s\n' "$1" "$3" "$tag"
}

proc_running() {
  local st
  st=$(awk '{sub(/.*\) /, ""); print $1}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}
