#!/usr/bin/env bash
# The attacks on root's own process that unit tests reproduce (issue #22),
# as rows of the reliability matrix: each case runs its GoogleTest test alone
# (root needed: they change credentials) and prints `-- <id>: expect: ...` and
# `CASE <id> PASS|FAIL <observed>` for scripts/reliability-report. A skipped
# test is a FAIL: the row says what was proved, and a skip proves nothing.
# Usage: tests/unit/attack_cases.sh BUILD_DIR
set -uo pipefail
bin=${1:?usage: tests/unit/attack_cases.sh BUILD_DIR}/tests/unit/unilab_mps_core_test
[ -x "$bin" ] || { echo "attack_cases.sh: no test binary $bin (build with tests)" >&2; exit 1; }
PASS=0 FAIL=0
row() { # row ID TEST EXPECTED
  echo "-- $1: expect: $3"
  local out line st=FAIL
  out=$("$bin" --gtest_filter="$2" 2>&1)
  line=$(printf '%s\n' "$out" | grep -E '^\[ +(OK|FAILED|SKIPPED) +\] ' | grep -v ' tests\?,' | head -n1)
  [[ $line == "[       OK ]"* ]] && st=PASS
  if [ "$st" = PASS ]; then PASS=$((PASS + 1)); else FAIL=$((FAIL + 1)); printf '%s\n' "$out" | tail -n 20; fi
  line=${line#\[*\] }
  echo "CASE $1 $st ${st/PASS/OK}: ${line:-$2: no result line}"
}
echo "== attacks on root's own process (unit tests)"
row attack-runner-sigstop-before-exec SystemRunner.AUserStoppingTheChildBeforeItsExecCannotHoldTheCaller \
  "the user SIGSTOPs a tool's child after its drop to the user and before its exec: the root caller is not held (the 300 ms timeout ends the run; before the fix clone(CLONE_VFORK) held it until the child was killed)"
row attack-runner-dumpable-window SystemRunner.TheChildIsNotDumpableBetweenItsDropAndItsExec \
  "with fs.suid_dumpable=1, a tool's child is not dumpable (not the user's to trace or read) between its drop and its exec"
row attack-runner-mixed-credentials SystemRunner.RefusesToRunAToolFromMixedCredentials \
  "a caller with real uid 0 and the user's effective uid asks for a user tool: refused naming the mixed uids (before: the tool ran as uid 0 U U)"
row attack-log-line-forgery PrologHook.EveryLogLineIsOnePrintableLine \
  "a message holding a newline and an escape sequence reaches the slurmd log as one printable line (\\xNN), forging no line of its own"
row attack-daemon-decoy-pid-file DaemonTest.APidFileNamingADecoyOfTheUserIsRefusedAndTheLaunchedDaemonEnds \
  "a process of the user renames a pid file naming its decoy over the daemon's during the start: refused (the daemon is the child this start adopted, not what the pid file says), the launched daemon ended, no record (before: the record named the decoy)"
row attack-daemon-launcher-twin DaemonTest.TwoProcessesLaunchedForOnePipeDirectoryAreRefusedAndBothEnd \
  "a traced launcher forks a second daemon for the same pipe directory: the start is refused and both end"
row attack-daemon-not-adopted DaemonTest.ADaemonThisProcessDidNotAdoptIsNotTheDaemon \
  "a process that is not a child of the starting process (say, init's) answers for the daemon: never taken for it, never signalled"
echo "$PASS passed, $FAIL failed ($((PASS + FAIL)) cases ran)"
[ "$FAIL" -eq 0 ]
