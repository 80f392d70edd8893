#!/usr/bin/env bash
# shellcheck disable=SC2016 # backticks in strings are Markdown, not command substitution
# Regenerates docs/PERFORMANCE.md (and the table between the bench markers in
# README.md) from the raw samples scripts/bench wrote. Every number in those
# files comes from here: medians over the repeated runs, differences of
# medians, and least-squares fits for the growth.
#
# Usage: bench/report.sh RESULTS_CSV PERFORMANCE_MD [README_MD]
set -euo pipefail
csv=${1:?usage: $0 RESULTS_CSV PERFORMANCE_MD [README_MD]}
out=${2:?usage: $0 RESULTS_CSV PERFORMANCE_MD [README_MD]}
readme=${3:-}

# ---------------------------------------------------------------- statistics
# key (suite,case,param,latency,metric) -> "n median min max"
declare -A N MED MIN MAX META
while IFS=$'\t' read -r key n med mn mx; do
  N[$key]=$n MED[$key]=$med MIN[$key]=$mn MAX[$key]=$mx
done < <(awk -F, '
  /^#/ || NF < 6 { next }
  { k = $1 "," $2 "," $3 "," $4 "," $5; c = ++cnt[k]; v[k, c] = $6 + 0; if (!(k in seen)) { seen[k] = 1; keys[++nk] = k } }
  END {
    for (i = 1; i <= nk; i++) {
      k = keys[i]; n = cnt[k]
      for (a = 1; a <= n; a++) s[a] = v[k, a]
      for (a = 2; a <= n; a++) { x = s[a]; b = a - 1; while (b >= 1 && s[b] > x) { s[b + 1] = s[b]; b-- } s[b + 1] = x }
      med = (n % 2) ? s[(n + 1) / 2] : (s[n / 2] + s[n / 2 + 1]) / 2
      printf "%s\t%d\t%.10g\t%.10g\t%.10g\n", k, n, med, s[1], s[n]
    }
  }' "$csv")
while IFS='=' read -r k v; do META[$k]=$v; done < <(sed -n 's/^# \([a-z_]*\)=\(.*\)$/\1=\2/p' "$csv")

# med SUITE CASE PARAM LAT METRIC -> median, or "" when not measured
med() { printf '%s' "${MED[$1,$2,$3,$4,$5]:-}"; }
# fmt VALUE -> ms for humans: 1 decimal below 100, none above; "-" for none
fmt() {
  [[ ${1:-} =~ ^-?[0-9.]+$ ]] || { printf -- '-'; return; }
  awk -v x="$1" 'BEGIN { if (x < 0) { s = "-"; x = -x } else s = ""; if (x >= 100) printf "%s%.0f", s, x; else printf "%s%.1f", s, x }'
}
# minus A B / div A B -> A-B, A/B; empty when either is missing
minus() { if [ -n "${1:-}" ] && [ -n "${2:-}" ]; then awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a - b }'; fi; }
div() { if [ -n "${1:-}" ] && [ -n "${2:-}" ]; then awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; fi; }
# spread SUITE CASE PARAM LAT METRIC -> "min-max" of the samples
spread() {
  local k="$1,$2,$3,$4,$5"
  [ -n "${MED[$k]:-}" ] || { printf -- '-'; return; }
  printf '%s-%s' "$(fmt "${MIN[$k]}")" "$(fmt "${MAX[$k]}")"
}
reps() { printf '%s' "${N[$1,$2,$3,$4,$5]:-0}"; }

# fit "x1 y1" "x2 y2" ... -> "slope intercept verdict" where slope/intercept
# are the least-squares line and verdict compares the per-unit increments
# between the last two pairs of successive points: "linear" when the last one
# is at most twice the one before (a quadratic cost would grow about tenfold
# per decade), "superlinear" otherwise, "-" with fewer than three points.
fit() {
  printf '%s\n' "$@" | awk '
    NF == 2 { n++; x[n] = $1; y[n] = $2; sx += $1; sy += $2; sxx += $1 * $1; sxy += $1 * $2 }
    END {
      if (n < 2) { print "- - -"; exit }
      d = n * sxx - sx * sx; if (d == 0) { print "- - -"; exit }
      b = (n * sxy - sx * sy) / d; a = (sy - b * sx) / n; v = "-"
      if (n >= 3) {
        i1 = (y[n - 1] - y[n - 2]) / (x[n - 1] - x[n - 2]); i2 = (y[n] - y[n - 1]) / (x[n] - x[n - 1])
        # increments below 0.05 ms per unit are noise on this machine
        v = (i2 <= 2 * (i1 > 0.05 ? i1 : 0.05)) ? "linear" : "superlinear"
        v = v ":" sprintf("%.2f", i1) ":" sprintf("%.2f", i2)
      }
      printf "%.3f %.3f %s\n", b, a, v
    }'
}
# linear_words VERDICT -> words for the growth column
linear_words() {
  local kind i1 i2
  IFS=: read -r kind i1 i2 <<<"${1:--}"
  case $kind in
  linear) printf 'linear (per-unit cost %s → %s ms between successive points)' "$i1" "$i2" ;;
  superlinear) printf '**faster than linear** (per-unit cost %s → %s ms between successive points)' "$i1" "$i2" ;;
  *) printf 'two points only' ;;
  esac
}

# ---------------------------------------------------------------- helpers per table

added() { minus "$(med launch "$1" "$2" "$3" "srun_on_ms")" "$(med launch "$1" "$2" "$3" "srun_off_ms")"; }

launch_table() { # launch_table LAT
  local lat=$1 case n daemons off on add per
  printf '| job shape | tasks | daemons | srun without | srun with | added per job | added per task | prolog window without / with | epilog window without / with | runs |\n'
  printf '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n'
  for case in per-gpu multi; do
    for n in 1 4 16 32; do
      off=$(med launch "$case" "$n" "$lat" srun_off_ms)
      on=$(med launch "$case" "$n" "$lat" srun_on_ms)
      [ -n "$off$on" ] || continue
      if [ "$case" = per-gpu ]; then daemons=$n; shape="\`srun -n$n --gpus-per-task=1 [--unilab-mps]\`"; else daemons=1; shape="\`srun -n$n --gres=gpu:4 [--unilab-mps=multi]\`"; fi
      add=$(minus "$on" "$off")
      per=$(div "$add" "$n")
      printf '| %s | %s | %s | %s | %s | **%s** | %s | %s / %s | %s / %s | %s |\n' "$shape" "$n" "$daemons" \
        "$(fmt "$off")" "$(fmt "$on")" "$(fmt "$add")" "$(fmt "$per")" \
        "$(fmt "$(med launch "$case" "$n" "$lat" prolog_off_ms)")" "$(fmt "$(med launch "$case" "$n" "$lat" prolog_on_ms)")" \
        "$(fmt "$(med launch "$case" "$n" "$lat" epilog_off_ms)")" "$(fmt "$(med launch "$case" "$n" "$lat" epilog_on_ms)")" \
        "$(reps launch "$case" "$n" "$lat" srun_on_ms)"
    done
  done
}

# growth of (x, metric) points: prints "slope intercept verdict"
growth() { # growth SUITE CASE LAT METRIC X...
  local s=$1 c=$2 l=$3 m=$4 x pts=()
  shift 4
  for x in "$@"; do pts+=("$x $(med "$s" "$c" "$x" "$l" "$m")"); done
  fit "${pts[@]}"
}
added_growth() { # added_growth CASE LAT N... : fit of the added srun time over N
  local c=$1 l=$2 n pts=()
  shift 2
  for n in "$@"; do pts+=("$n $(added "$c" "$n" "$l")"); done
  fit "${pts[@]}"
}

# first_check MS -> when the start loop (asks at once, then waits 1 ms,
# doubling to 32 ms) first finds a daemon that starts answering after MS
first_check() {
  local t=0 step=1
  while ((t < $1)); do t=$((t + step)); step=$((step * 2 > 32 ? 32 : step * 2)); done
  printf '%s' "$t"
}

# ratio_ok VALUE LIMIT -> "yes" when VALUE <= LIMIT, "no", or "-" when unmeasured
ratio_ok() {
  if [ -z "${1:-}" ] || [ -z "${2:-}" ]; then printf -- '-'; return; fi
  awk -v a="$1" -v b="$2" 'BEGIN { print (a <= b) ? "yes" : "**no**" }'
}

# ---------------------------------------------------------------- numbers used twice

lat_desc="nvidia-smi ${META[lat_smi_ms]:-50} ms, daemon start ${META[lat_start_ms]:-200} ms"
a1_0=$(added per-gpu 1 0)
a1_t=$(added per-gpu 1 tools)
a16m_0=$(added multi 16 0)
read -r pg_slope0 pg_icpt0 pg_dev0 <<<"$(added_growth per-gpu 0 1 4 16 32)"
read -r pgt_slope pgt_icpt pgt_dev <<<"$(added_growth per-gpu tools 1 4 16)"
read -r mt_slope0 mt_icpt0 mt_dev0 <<<"$(added_growth multi 0 1 4 16)"
noplug_off=$(minus "$(med launch per-gpu 1 0 srun_off_ms)" "$(med launch per-gpu 1 0 srun_noplugin_ms)")
noplug_prolog=$(minus "$(med launch per-gpu 1 0 prolog_off_ms)" "$(med launch per-gpu 1 0 prolog_noplugin_ms)")
pro1=$(med prolog per-gpu 1 0 prolog_ms)
epi1=$(med prolog per-gpu 1 0 epilog_ms)
read -r dp_slope dp_icpt dp_dev <<<"$(growth prolog per-gpu 0 prolog_ms 1 8 32)"
read -r de_slope de_icpt de_dev <<<"$(growth prolog per-gpu 0 epilog_ms 1 8 32)"
read -r dpt_slope _ dpt_dev <<<"$(growth prolog per-gpu tools prolog_ms 1 8 32)"
# per-daemon prolog cost = tool's own start + unilab-mps's own work + waiting
# between readiness checks (the rest)
read -r rp_slope _ rp_dev <<<"$(growth records per-gpu 0 prolog_ms 1 10 100 1000)"
read -r re_slope _ re_dev <<<"$(growth records per-gpu 0 epilog_ms 1 10 100 1000)"
read -r st_slope _ st_dev <<<"$(growth status json 0 status_ms 1 10 100 1000)"
shell_pe_sleep=$(awk -v a="$(med shell sleep 1 0 prolog_ms)" -v b="$(med shell sleep 1 0 epilog_ms)" 'BEGIN { if (a != "" && b != "") printf "%.3f", a + b }')
shell_pe_poll=$(awk -v a="$(med shell poll 1 0 prolog_ms)" -v b="$(med shell poll 1 0 epilog_ms)" 'BEGIN { if (a != "" && b != "") printf "%.3f", a + b }')
ours_pe=$(awk -v a="$pro1" -v b="$epi1" 'BEGIN { if (a != "" && b != "") printf "%.3f", a + b }')
calls() { med calls "$1" "$2" 0 "$3"; }
# A node's daemons at once (daemon start 300 ms): prolog added over a job
# without the option, per job size; the shell's prolog for comparison.
conc_base=$(med concurrent no-option 1 start300 prolog_ms)
conc_add1=$(minus "$(med concurrent per-gpu 1 start300 prolog_ms)" "$conc_base")
conc_add4=$(minus "$(med concurrent per-gpu 4 start300 prolog_ms)" "$conc_base")
conc_add8=$(minus "$(med concurrent per-gpu 8 start300 prolog_ms)" "$conc_base")
pro8=$(med prolog per-gpu 8 0 prolog_ms)
# The shell's 8-GPU prolog the goals compare with: one daemon per GPU,
# started one after another (MPS_PER_GPU=1), as a site's per-GPU script
# would; the one-daemon-for-all rows are kept for reference.
shell_pro8=$(med shell sleep-per-gpu 8 0 prolog_ms)
shell_pro8_poll=$(med shell poll-per-gpu 8 0 prolog_ms)
shell_pro8_one=$(med shell sleep 8 0 prolog_ms)
shell_pro8_one_poll=$(med shell poll 8 0 prolog_ms)
smi_per_job=$(calls per-gpu-on 4 prolog_nvidia-smi_calls)
smi_steps=$(calls per-gpu-on 4 steps_nvidia-smi_calls)
ctl_steps=$(calls per-gpu-on 4 steps_nvidia-cuda-mps-control_calls)
off_total=$(awk -v a="$(calls per-gpu-off 4 prolog_nvidia-smi_calls)" -v b="$(calls per-gpu-off 4 prolog_nvidia-cuda-mps-control_calls)" \
  -v c="$(calls per-gpu-off 4 epilog_nvidia-cuda-mps-control_calls)" -v d="$(calls per-gpu-off 4 epilog_nvidia-smi_calls)" 'BEGIN { print a + b + c + d }')

headline() {
  printf '| measured (median of repeated runs on a 2-core VM, fake GPUs) | value |\n'
  printf '|---|---:|\n'
  printf '| added to `srun -n1 --gres=gpu:1 true` by `--unilab-mps` (NVIDIA tools instant: the plugin'"'"'s own cost) | %s ms |\n' "$(fmt "$a1_0")"
  printf '| the same with slow NVIDIA tools (%s) | %s ms |\n' "$lat_desc" "$(fmt "$a1_t")"
  printf '| one daemon for 16 tasks (`srun -n16 --gres=gpu:4 --unilab-mps=multi`): added per job / per task, tools instant | %s / %s ms |\n' \
    "$(fmt "$a16m_0")" "$(fmt "$(div "$a16m_0" 16)")"
  printf '| each extra task of a job (slope over 1, 4, 16 tasks, one daemon, tools instant) | %s ms |\n' "$(fmt "$mt_slope0")"
  printf '| added per extra per-GPU daemon (slope over 1-32 tasks, tools instant / slow) | %s / %s ms |\n' "$(fmt "$pg_slope0")" "$(fmt "$pgt_slope")"
  printf '| job without the option, plugin loaded vs not installed: slurmd prolog window / `srun -n1` wall time | %s / %s ms |\n' "$(fmt "$noplug_prolog")" "$(fmt "$noplug_off")"
  printf '| `nvidia-smi` runs per node per job / in the task path / NVIDIA tool runs for a job without the option | %s / %s / %s |\n' \
    "${smi_per_job:--}" "$(awk -v a="$smi_steps" -v b="$ctl_steps" 'BEGIN { if (a != "" && b != "") print a + b; else print "-" }')" "${off_total:--}"
  printf '| prolog / epilog for one daemon (helpers run directly, tools instant) | %s / %s ms |\n' "$(fmt "$pro1")" "$(fmt "$epi1")"
  printf '| prolog per additional daemon, 1 → 32 GPUs on a node | %s ms, %s |\n' "$(fmt "$dp_slope")" "$(linear_words "$dp_dev")"
  printf '| prolog / epilog per record of other jobs on the node (1 → 1,000 records) | %s / %s ms |\n' "$(fmt "$rp_slope")" "$(fmt "$re_slope")"
  printf '| `unilab-mps status` with 1,000 records (per record: %s ms) | %s ms |\n' "$(fmt "$st_slope")" "$(fmt "$(med status json 1000 0 status_ms)")"
  printf '| prolog + epilog, one daemon: unilab-mps / shell script after Slurm'"'"'s `prolog.example` (its `sleep 1`) / same script polling instead | %s / %s / %s ms |\n' \
    "$(fmt "$ours_pe")" "$(fmt "$shell_pe_sleep")" "$(fmt "$shell_pe_poll")"
  printf '| prolog added by a per-GPU job of 1 / 4 / 8 GPUs, each daemon taking 300 ms to answer (daemons start at once) | %s / %s / %s ms |\n' \
    "$(fmt "$conc_add1")" "$(fmt "$conc_add4")" "$(fmt "$conc_add8")"
  printf '| prolog of an 8-GPU per-GPU job, tools instant: unilab-mps (8 daemons at once) / shell script (8 daemons one by one, `sleep 1` / polling) | %s / %s / %s ms |\n' \
    "$(fmt "$pro8")" "$(fmt "$shell_pro8")" "$(fmt "$shell_pro8_poll")"
}

concurrent_section() {
  local g p e a
  printf '| GPUs (per-GPU daemons) | prolog | added over a job without the option | × the 1-GPU job | epilog | runs |\n'
  printf '|---:|---:|---:|---:|---:|---:|\n'
  for g in 1 4 8; do
    p=$(med concurrent per-gpu "$g" start300 prolog_ms)
    [ -n "$p" ] || continue
    e=$(med concurrent per-gpu "$g" start300 epilog_ms)
    a=$(minus "$p" "$conc_base")
    printf '| %s | %s | %s | %s | %s | %s |\n' "$g" "$(fmt "$p")" "$(fmt "$a")" "$(div "$a" "$conc_add1" | awk '{ if ($1 != "") printf "%.2f", $1 }')" \
      "$(fmt "$e")" "$(reps concurrent per-gpu "$g" start300 prolog_ms)"
  done
  printf '\nA job without the option, same rounds: prolog %s ms (the helper'"'"'s own start-up).\n\n' "$(fmt "$conc_base")"
  printf '| goal | measured | met |\n|---|---|---|\n'
  printf '| 4-GPU job'"'"'s added prolog within 1.5× the 1-GPU job'"'"'s (300 ms starts) | %s vs %s ms | %s |\n' \
    "$(fmt "$conc_add4")" "$(fmt "$conc_add1")" "$(ratio_ok "$conc_add4" "$(awk -v a="$conc_add1" 'BEGIN { if (a != "") print a * 1.5 }')")"
  printf '| 8-GPU job'"'"'s added prolog within 1.5× the 1-GPU job'"'"'s (300 ms starts) | %s vs %s ms | %s |\n' \
    "$(fmt "$conc_add8")" "$(fmt "$conc_add1")" "$(ratio_ok "$conc_add8" "$(awk -v a="$conc_add1" 'BEGIN { if (a != "") print a * 1.5 }')")"
  printf '| prolog + epilog for one daemon at or below the shell script'"'"'s (`sleep 1`; tools instant) | %s vs %s ms | %s |\n' \
    "$(fmt "$ours_pe")" "$(fmt "$shell_pe_sleep")" "$(ratio_ok "$ours_pe" "$shell_pe_sleep")"
  printf '| the same against the script polling instead of `sleep 1` | %s vs %s ms | %s |\n' \
    "$(fmt "$ours_pe")" "$(fmt "$shell_pe_poll")" "$(ratio_ok "$ours_pe" "$shell_pe_poll")"
  printf '| 8-GPU prolog at or below a third of the shell'"'"'s 8-GPU prolog (8 daemons one by one, `sleep 1`; tools instant) | %s vs %s / 3 ms | %s |\n' \
    "$(fmt "$pro8")" "$(fmt "$shell_pro8")" "$(ratio_ok "$pro8" "$(awk -v a="$shell_pro8" 'BEGIN { if (a != "") print a / 3 }')")"
  printf '| the same against the polling script'"'"'s 8-GPU prolog (8 daemons one by one) | %s vs %s / 3 ms | %s |\n' \
    "$(fmt "$pro8")" "$(fmt "$shell_pro8_poll")" "$(ratio_ok "$pro8" "$(awk -v a="$shell_pro8_poll" 'BEGIN { if (a != "") print a / 3 }')")"
  printf '| (reference, no goal) the polling script starting one daemon for all 8 GPUs / a third of it | %s / %s ms | - |\n' \
    "$(fmt "$shell_pro8_one_poll")" "$(fmt "$(awk -v a="$shell_pro8_one_poll" 'BEGIN { if (a != "") print a / 3 }')")"
  printf '| `nvidia-smi` runs in the prolog of the 8-GPU job / NVIDIA tool runs for a job without the option (prolog + epilog) | %s / %s | %s |\n' \
    "$(med concurrent per-gpu 8 start300 prolog_smi_calls)" \
    "$(awk -v a="$(med concurrent no-option 1 start300 prolog_smi_calls)" -v b="$(med concurrent no-option 1 start300 prolog_ctl_calls)" \
      -v c="$(med concurrent no-option 1 start300 epilog_smi_calls)" -v d="$(med concurrent no-option 1 start300 epilog_ctl_calls)" \
      'BEGIN { if (a != "") print a + b + c + d; else print "-" }')" \
    "$( [ "$(med concurrent per-gpu 8 start300 prolog_smi_calls)" = 1 ] && echo yes || echo '**no**')"
}

# Build time (bench/build_time.sh): the newest run of each configuration,
# without and with the precompiled headers, and where its time went.
# The cost of forking the user's tools instead of clone(CLONE_VM|CLONE_VFORK):
# two bench/direct.sh runs back to back, one with each (docs/bench-runner-fork.csv).
runner_fork_note() {
  local f=${csv%/*}/bench-runner-fork.csv
  [ -f "$f" ] || return 0
  local line
  line=$(awk -F, 'NR > 1 && $3 == "per-gpu" && $4 == 8 { v[$1 "," $5] = v[$1 "," $5] " " $6 }
    function med(s,   a, n, i, j, t) { n = split(s, a, " "); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
    END { printf "%.0f ms and %.0f ms (epilog %.0f and %.0f ms)", med(v["clone-all,prolog_ms"]), med(v["fork-user-tools,prolog_ms"]),
          med(v["clone-all,epilog_ms"]), med(v["fork-user-tools,epilog_ms"]) }' "$f")
  printf ' Measured back to back on a loaded machine (its fake tools ran about 3x slower than in this run; docs/bench-runner-fork.csv), an 8-daemon prolog took %s with clone for every tool and with fork for the user'"'"'s: about 2 ms per daemon.' "$line"
}

# The real GPU: docs/gpu-check-results.json, the gpu-results.json of the last
# tests/gpu/run_gpu_check.sh on a real GPU (its report: docs/GPU-CHECK.md).
GPU_RESULTS=${GPU_RESULTS:-$(dirname "$0")/../docs/gpu-check-results.json}
real_gpu_note() {
  if [ -f "$GPU_RESULTS" ]; then
    printf '**Real GPU**: section [Real GPU](#real-gpu), from its own run (`tests/gpu/run_gpu_check.sh`).\n'
  else
    printf '**Real GPU numbers are pending a GPU machine**: this run had none. The script\nthat produces them is ready: see [Real GPU](#real-gpu).\n'
  fi
}
real_gpu_section() {
  printf '## Real GPU\n\n'
  if [ ! -f "$GPU_RESULTS" ]; then
    printf 'No real-GPU run yet: `tests/gpu/run_gpu_check.sh` (see `tests/gpu/README.md`) is ready for a\n'
    printf 'machine with one NVIDIA GPU, CUDA and PyTorch; put its `gpu-results.json` at\n'
    printf '`docs/gpu-check-results.json` and its `gpu-report.md` at `docs/GPU-CHECK.md`.\n'
    return
  fi
  python3 - "$GPU_RESULTS" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
m = d.get("machine", {})
print("`tests/gpu/run_gpu_check.sh` on %s (%s; driver tools %s), %s: %d checks ok, %d failed,"
      % (m.get("uname", "?"), m.get("date", "?"), m.get("nvidia_smi", "?"), m.get("python", "?"), d.get("ok", 0), d.get("failed", 0)))
print("every fact in [GPU-CHECK.md](GPU-CHECK.md). What MPS is for, measured there: one and two processes,")
print("each replaying a CUDA graph of tiny kernels for a fixed time from a common start, with every")
print("kernel verified through the tensor's value; aggregate kernels/s, median of the runs.")
print()
print("| processes | MPS | kernels/s | runs | every kernel verified |")
print("|---:|---|---:|---:|---|")
for key in ("nomps-1", "nomps-2", "mps-1", "mps-2"):
    r = d.get("throughput", {}).get(key)
    if not r:
        continue
    ok = {True: "yes", False: "no", None: "not checked"}[r.get("value_checks_ok")]
    print("| %d | %s | %.0f | %d | %s |" % (r["procs"], "yes" if r["mps"] else "no (time slicing)", r["median_kernels_per_s"], r["runs"], ok))
ratio = d.get("mps_vs_time_slicing_2_procs")
if ratio:
    print()
    print("Two processes under one MPS daemon: **%.2fx** the aggregate throughput of the same two" % ratio)
    print("processes time-sliced. One run each (the device time of a check is short); the figure is")
    print("an order of magnitude, not a benchmark of the GPU.")
PYEOF
}

build_time_section() {
  local times=${csv%/*}/build-times.csv units=${csv%/*}/build-times-units.csv
  [ -f "$times" ] || return 0
  cat <<EOT
## 7. Build time

Clean builds, one after the other on an otherwise idle machine, the way
scripts/test makes them: "before" as the build is by default (\`-DUNILAB_MPS_FMT_HEADER_ONLY=ON
-DUNILAB_MPS_PCH=OFF\`), "after" with both options (\`-DUNILAB_MPS_FMT_HEADER_ONLY=OFF
-DUNILAB_MPS_PCH=ON\`; not the default yet: in the Debian 13 root's GCC 14 they
turned std::string false positives of -Warray-bounds into errors, so they stay
opt-in until every series has built with them): the system's libfmt instead of
header-only fmt (which compiled fmt's implementation into every file: 3.4 s of each
file at -O2 here) and precompiled headers (nlohmann/json, fmt, GoogleTest for the
test binary, the standard headers: parsing nlohmann/json alone took 2.3 s a file).
\`test\` is scripts/setup's build (everything, RelWithDebInfo: the host's, the
24.11 root's; the RPM check builds the same without tests), \`asan\` the sanitizer
step's. \`bench/build_time.sh\` measures them and appends to
\`docs/build-times.csv\`; the rows of 2026-12-02 were timed by hand with the same
cmake and ninja commands (\`/usr/bin/time\`) before the script existed. What is left
is the test binary's own files (GoogleTest and JSON templates instantiated in each
of 34 files), which a unity build would share.

| build | date, commit | before: wall / CPU | after: wall / CPU | wall saved |
|---|---|---:|---:|---:|
EOT
  awk -F, 'NR > 1 { k = $3; d[k] = d[k] == "" ? $1 ", " $2 : d[k] " / " $2; if ($4 == "before") { off[k] = $5; offu[k] = $6 } else { on[k] = $5; onu[k] = $6 } }
    END { for (k in d) if ((k in off) && (k in on))
      printf "| %s | %s | %.0f / %.0f s | %.0f / %.0f s | %.0f%% |\n", k, d[k], off[k], offu[k], on[k], onu[k], 100 * (off[k] - on[k]) / off[k] }' "$times" | sort
  local ci=${csv%/*}/ci-times.csv
  if [ -f "$ci" ]; then
    echo
    echo "CI on a fresh 2-core machine (\`.ci/run\` on a clean clone; step times as scripts/test printed them in"
    echo "\`docs/ci-times.csv\`; \"before\" is the clean run issue #21 cites, about 50 minutes in all; each"
    echo "later column is one run, named in the csv's first field):"
    echo
    # One column per run, in the order the csv names them.
    awk -F, 'NR > 1 { if (!($4 in seen)) { seen[$4] = 1; order[++n] = $4 } if (!($1 in rs)) { rs[$1] = 1; runs[++m] = $1 } v[$1, $4] = $5 }
      END { h = "| step"; u = "|---"; for (j = 1; j <= m; j++) { h = h " | " runs[j]; u = u "|---:" } print h " |"; print u "|"
            for (i = 1; i <= n; i++) { s = order[i]; line = "| " s
              for (j = 1; j <= m; j++) line = line " | " (((runs[j], s) in v) ? v[runs[j], s] " s" : "-")
              print line " |" } }' "$ci"
  fi
  [ -f "$units" ] || return 0
  echo
  echo "The slowest translation units of the newest \`test\` builds (seconds, ninja's log):"
  echo
  echo "| build | unit | s |"
  echo "|---|---|---:|"
  local v last
  for v in before after; do
    last=$(awk -F, -v v="$v" 'NR > 1 && $3 == "test" && $4 == v { d = $1 } END { print d }' "$units")
    awk -F, -v d="$last" -v v="$v" 'NR > 1 && $1 == d && $3 == "test" && $4 == v { printf "| %s | `%s` | %s |\n", $4, $5, $6 }' "$units"
  done
  echo
}

# ---------------------------------------------------------------- the document
{
cat <<EOF
# Performance

Generated by \`scripts/bench\` from \`docs/bench-results.csv\` (raw samples) with
\`bench/report.sh\`: do not edit by hand, rerun \`scripts/bench\` (or
\`bench/report.sh docs/bench-results.csv docs/PERFORMANCE.md README.md\` to
re-render the same samples).

Run: ${META[date]:-?}, ${META[mode]:-?} mode, ${META[reps]:-?} repetitions, ${META[runtime_s]:-?} s in all, on
\`${META[host]:-?}\` (${META[cpus]:-?} CPUs, load average at start ${META[load]:-?}), Slurm ${META[slurm]:-?},
commit \`${META[commit]:-?}\`. Every figure is the **median** of its repeated runs;
"added" is a difference of medians (with minus without, measured interleaved
in the same run). Growth is a least-squares line through the medians.
$( [ -n "${META[cluster_rows_from]:-}" ] && printf '\n**Sections 1 and 2 and the cluster columns of section 5 come from an earlier run** (%s): this run measured the helpers directly only.\n' "${META[cluster_rows_from]}")

$(real_gpu_note)

## Headline

$(headline)

What it means:
- **A job pays for the daemons it asks for.** The added time is the prolog
  starting daemons (one \`nvidia-smi\` call, then per daemon one
  \`nvidia-cuda-mps-control -d\` and \`get_server_list\` until it answers); the task
  path only reads the job's records and sets three variables.
- **Per task**: with one daemon for the job, going from 1 to 16 tasks adds
  $(fmt "$mt_slope0") ms per task (least squares over 1, 4, 16 tasks; growth
  $(linear_words "$mt_dev0")).
- **Per daemon**: $(fmt "$pg_slope0") ms per per-GPU daemon with instant tools,
  $(fmt "$pgt_slope") ms with slow ones; growth $(linear_words "$pg_dev0"). The daemons
  of one job start at once (a thread each, one deadline), so a slow daemon
  start is paid once per job, not once per GPU (section 6); what still grows
  with the GPUs is unilab-mps's own work per daemon on a 2-core machine.
- **Jobs without \`--unilab-mps\`** run no NVIDIA tool and create no file; with the
  plugin installed they pay Slurm's own fork of \`slurmstepd spank prolog\` /
  \`spank epilog\` (slurmd runs it for every job once a plugin defines
  job_prolog/job_epilog): $(fmt "$noplug_prolog") ms more in slurmd's prolog window,
  $(fmt "$noplug_off") ms on \`srun -n1\` wall time here (section 1; noisy).
- **Slow tools**: a daemon that takes ${META[lat_start_ms]:-200} ms to answer costs its job
  that plus the polling granularity of the start loop (it asks at once, then
  after 1, 2, 4 .. ms, capped at 32 ms), once for all of a job's daemons.

## 1. Job launch on a local Slurm cluster

\`srun -n N true\` as a non-root user on one node with 32 simulated GPUs (fake
\`nvidia-smi\` / \`nvidia-cuda-mps-control\`, \`bench/launch.sh\`), with and without the
option, interleaved. "srun" is wall time measured in the user's shell. The
prolog window is the slurmd log span from the launch request to the step's
first line (slurmstepd start-up included, so "without" is Slurm's own cost);
the epilog window runs from the terminate request to "completed epilog" (after
\`srun\` has returned: it delays the next job on those GPUs, not this one).
Times in ms.

### NVIDIA tools instant (the plugin's own cost)

$(launch_table 0)

Added time over tasks, per-GPU daemons (1 → 32): $(fmt "$pg_slope0") ms per daemon + $(fmt "$pg_icpt0") ms, $(linear_words "$pg_dev0").
One daemon, 1 → 16 tasks: $(fmt "$mt_slope0") ms per task + $(fmt "$mt_icpt0") ms, $(linear_words "$mt_dev0").

### Slow NVIDIA tools ($lat_desc)

$(launch_table tools)

Added time over tasks, per-GPU daemons (1 → 16): $(fmt "$pgt_slope") ms per daemon + $(fmt "$pgt_icpt") ms, $(linear_words "$pgt_dev").

### Jobs without the option: plugin loaded vs not installed

| job shape | plugin not installed | plugin loaded, no option | difference | prolog window not installed / loaded |
|---|---:|---:|---:|---:|
EOF
for n in 1 4 16; do
  np=$(med launch per-gpu "$n" 0 srun_noplugin_ms)
  lo=$(med launch per-gpu "$n" 0 srun_off_ms)
  [ -n "$np" ] || continue
  printf '| `srun -n%s --gpus-per-task=1 true` | %s | %s | %s | %s / %s |\n' "$n" "$(fmt "$np")" "$(fmt "$lo")" "$(fmt "$(minus "$lo" "$np")")" \
    "$(fmt "$(med launch per-gpu "$n" 0 prolog_noplugin_ms)")" "$(fmt "$(med launch per-gpu "$n" 0 prolog_off_ms)")"
done
cat <<EOF

(The "not installed" runs come after a slurmd restart, later in the same run,
not interleaved: read differences of a few ms as noise.)

## 2. Subprocesses the plugin spawns

Counted by the fakes' \`call_log\` for \`sbatch\` jobs whose batch script marks the
log before and after two \`srun\` steps of the same shape: "prolog" is everything
before the first mark (the job prolog and the batch script's own task_init),
"steps" the two steps' tasks, "epilog" the rest. \`nvidia-cuda-mps-control\`
counts every front-end run (\`-d\` included); "daemons" the daemon processes.

| job | tasks per step | nvidia-smi prolog / steps / epilog | mps-control prolog / steps / epilog | daemons started |
|---|---:|---:|---:|---:|
EOF
for c in per-gpu-on multi-on per-gpu-off; do
  for n in 1 4 16; do
    v=$(calls "$c" "$n" prolog_nvidia-smi_calls)
    [ -n "$v" ] || continue
    case $c in per-gpu-on) label='`--unilab-mps`, one GPU per task' ;; multi-on) label='`--unilab-mps=multi`, 4 GPUs' ;; *) label='no option, one GPU per task' ;; esac
    printf '| %s | %s | %s / %s / %s | %s / %s / %s | %s |\n' "$label" "$n" \
      "$v" "$(calls "$c" "$n" steps_nvidia-smi_calls)" "$(calls "$c" "$n" epilog_nvidia-smi_calls)" \
      "$(calls "$c" "$n" prolog_nvidia-cuda-mps-control_calls)" "$(calls "$c" "$n" steps_nvidia-cuda-mps-control_calls)" \
      "$(calls "$c" "$n" epilog_nvidia-cuda-mps-control_calls)" "$(calls "$c" "$n" prolog_mps-daemon_calls)"
  done
done
cat <<EOF

Goal met when: one \`nvidia-smi\` per node per job in the prolog, none in the
steps, none at all without the option. Per daemon the prolog runs the control
tool twice (\`-d\`, then \`get_server_list\` until it answers; more often when the
daemon is slow to answer) and the epilog once (\`quit\`).

## 3. Prolog and epilog per daemon (helpers run directly)

\`unilab-mps-prolog\` / \`unilab-mps-epilog\` driven with the environment slurmd gives
them (\`SLURM_JOB_ID\`, \`SLURM_JOB_UID\`, \`SLURM_JOB_GID\`, \`SLURM_JOB_GPUS\`,
\`SLURMD_NODENAME\`, \`SLURM_CONF\`, \`SPANK__SLURM_SPANK_OPTION_unilab_mps_unilab_mps\`)
on a simulated node with 32 GPUs (\`bench/direct.sh\`): no Slurm noise, process
start-up of the helper included. The state and run directories (and the shell
script's pipe directories) are on a tmpfs, as under \`/run\` on a real node, so
a record's fsync does not wait for this VM's disk; the stopwatch forks nothing
(a fork here costs milliseconds), and the helper's command line is built
before it starts, as the shell script's is. ms.

| tools | mode | GPUs | daemons | prolog | per daemon | epilog | per daemon | runs |
|---|---|---:|---:|---:|---:|---:|---:|---:|
EOF
for lat in 0 tools; do
  for mode in per-gpu multi no-option; do
    for g in 1 8 32; do
      p=$(med prolog "$mode" "$g" "$lat" prolog_ms)
      [ -n "$p" ] || continue
      e=$(med prolog "$mode" "$g" "$lat" epilog_ms)
      d=$(med prolog "$mode" "$g" "$lat" prolog_daemons)
      [ "$lat" = 0 ] && lname=instant || lname=slow
      printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$lname" "$mode" "$g" "${d:-0}" "$(fmt "$p")" \
        "$( [ "${d:-0}" != 0 ] && fmt "$(div "$p" "$d")" || printf -- '-')" "$(fmt "$e")" \
        "$( [ "${d:-0}" != 0 ] && fmt "$(div "$e" "$d")" || printf -- '-')" "$(reps prolog "$mode" "$g" "$lat" prolog_ms)"
    done
  done
done
cat <<EOF

Growth over 1 → 8 → 32 per-GPU daemons on one node: prolog $(fmt "$dp_slope") ms per
daemon + $(fmt "$dp_icpt") ms fixed, $(linear_words "$dp_dev"); epilog $(fmt "$de_slope") ms per daemon + $(fmt "$de_icpt") ms,
$(linear_words "$de_dev"). With slow tools: prolog $(fmt "$dpt_slope") ms per daemon, $(linear_words "$dpt_dev").
One daemon for all GPUs (multi) stays flat in the number of GPUs.

The fake tools alone (run directly, no unilab-mps): one \`nvidia-smi\` query
$(fmt "$(med floor tools 1 0 smi_ms)") ms, \`-d\` until a front end gets an answer $(fmt "$(med floor tools 1 0 start_ms)") ms, \`quit\` until the
daemon is gone $(fmt "$(med floor tools 1 0 quit_ms)") ms (slow profile: $(fmt "$(med floor tools 1 tools smi_ms)"), $(fmt "$(med floor tools 1 tools start_ms)"), $(fmt "$(med floor tools 1 tools quit_ms)") ms). The rest of the
per-daemon prolog time is unilab-mps itself: creating the private directories,
two atomic record writes (\`starting\`, then \`running\`, each with fsync), running
the tools as the job's user, polling until the daemon answers (at once, then 1
ms, doubling up to 32 ms) and checking the pid file against \`/proc\`. Root's own
tools start with \`clone(CLONE_VM | CLONE_VFORK)\`, as \`posix_spawn\` does; the
tools run as the job's user are forked, so that the user cannot hold the root
thread by stopping the child before its exec (docs/DESIGN.md, "Running
programs").$(runner_fork_note)

The daemons of a job start in parallel (a thread each), so the per-daemon slope
is not one start's wall time: with instant tools it is what each daemon adds
of CPU work on 2 shared cores, the fake tools' processes and unilab-mps's own
($(fmt "$dp_slope") ms per daemon, against $(fmt "$(med floor tools 1 0 start_ms)") ms for one daemon's tools alone, run on
their own); with slow tools the tools' waiting overlaps as well. A single
daemon's start waits for its readiness checks: the start loop's back-off (at
once, then 1, 2, 4, ... 32 ms) first finds a ${META[lat_start_ms]:-200} ms daemon at
$(first_check "${META[lat_start_ms]:-200}") ms (section 6).

### A daemon that ignores \`quit\`

The epilog waits 60 % of \`stop_timeout\` for \`quit\`, then sends SIGTERM (90 %),
then SIGKILL, re-verifying the daemon's identity before each signal; a job's
daemons are stopped at once, within one \`stop_timeout\`. Measured with \`stop_timeout=2\`:

| daemon ignores | daemons | epilog | bound per daemon | runs |
|---|---:|---:|---:|---:|
EOF
for c in ignore-quit ignore-quit-term; do
  for g in 1 4; do
    e=$(med stuck "$c" "$g" 0 epilog_ms)
    [ -n "$e" ] || continue
    if [ "$c" = ignore-quit ]; then
      what='`quit`' bound='1.2 s (quit wait), then SIGTERM'
    else
      what='`quit` and SIGTERM' bound='1.8 s (quit + SIGTERM waits), then SIGKILL'
    fi
    printf '| %s | %s | %s | %s | %s |\n' "$what" "$g" "$(fmt "$e")" "$bound" "$(reps stuck "$c" "$g" 0 epilog_ms)"
  done
done
cat <<EOF

So a job's epilog is bounded by one \`stop_timeout\` (plus up to a second for
SIGKILL to take effect) and the normal cost, however many of its daemons
hang: with the default \`stop_timeout=10\` a per-GPU job on an 8-GPU node whose
daemons all hang holds its node in COMPLETING for about 10 s, not 80 s.

### Each ended task: the task_exit hook

What slurmstepd does when a task of an MPS job ends, to say a failed MPS
server or a gone daemon once (docs/DESIGN.md): \`task_exit_faults\`, the
function the hook calls, timed in a process of its own
(\`tests/tools/task_exit_cost\`) on a job whose daemons the prolog started: the
job's records, both logs of each daemon read (at most their last 1 MiB) and
scanned, each daemon's identity in /proc. slurmstepd runs it once per ended
task; tasks still running are not touched (no thread, no polling), and the
step's end waits for it. ms per ended task, median (min-max).

| daemons of the job | logs as started | each log +64 KiB | each log +4 MiB | logs at the end | calls |
|---:|---:|---:|---:|---:|---:|
EOF
for g in 1 8; do
  a=$(med task_exit log-plus-0KiB "$g" 0 call_ms)
  [ -n "$a" ] || continue
  printf '| %s | %s (%s) | %s (%s) | %s (%s) | %s MiB | %s |\n' "$g" \
    "$(fmt "$a")" "$(spread task_exit log-plus-0KiB "$g" 0 call_ms)" \
    "$(fmt "$(med task_exit log-plus-64KiB "$g" 0 call_ms)")" "$(spread task_exit log-plus-64KiB "$g" 0 call_ms)" \
    "$(fmt "$(med task_exit log-plus-4096KiB "$g" 0 call_ms)")" "$(spread task_exit log-plus-4096KiB "$g" 0 call_ms)" \
    "$(fmt "$(div "$(med task_exit size "$g" 0 log_kib)" 1024)")" "$(reps task_exit log-plus-0KiB "$g" 0 call_ms)"
done
[ -n "$(med task_exit log-plus-0KiB 1 0 call_ms)" ] || echo '| (not measured in this run) | | | | | |'
cat <<EOF

The cost grows with the job's daemons and the size of their logs up to the
1 MiB read from each, and a job sees it only as a later end of its step.

## 4. Scale: records of other jobs on the node, and \`unilab-mps status\`

Prolog and epilog of a one-GPU job while the state directory holds records of
other jobs on the same node (each $(fmt "$(div "$(med records size 1 0 record_bytes)" 1024)") KiB: a record carries the node's
32-GPU table). Every prolog, task and epilog lists the directory and parses
each record to find its job's. \`status --json\` with N records of the user (each
points at a live daemon, so every liveness check does its full work; each has
its own pipe directory). ms.

| records on the node | prolog | epilog | \`unilab-mps status --json\` |
|---:|---:|---:|---:|
EOF
for k in 1 10 100 1000; do
  p=$(med records per-gpu "$k" 0 prolog_ms)
  s=$(med status json "$k" 0 status_ms)
  [ -n "$p$s" ] || continue
  printf '| %s | %s | %s | %s |\n' "$k" "$(fmt "$p")" "$(fmt "$(med records per-gpu "$k" 0 epilog_ms)")" "$(fmt "$s")"
done
cat <<EOF

Per record: prolog $(fmt "$rp_slope") ms ($(linear_words "$rp_dev")), epilog $(fmt "$re_slope") ms
($(linear_words "$re_dev")), status $(fmt "$st_slope") ms ($(linear_words "$st_dev")). A node holds at most one record per
daemon of the jobs running on it (a few dozen at most), so this cost stays in
the noise for real nodes; 1,000 records is a stress test.

## 5. Against a shell prolog/epilog

What a site would otherwise write: \`bench/shell-prolog.sh\` / \`bench/shell-epilog.sh\`,
our own minimal scripts following the steps of Slurm's \`etc/prolog.example\`
(SchedMD/slurm, read at commit ${META[slurm_example_commit]:-284c3b9}): pipe/log directories
\`/tmp/nvidia-mps_<CUDA_VISIBLE_DEVICES>\`, \`nvidia-cuda-mps-control -d\` as root, a
fixed \`sleep 1\`, \`start_server -uid\`; the epilog sends \`quit\`, greps \`ps aux\` for a
leftover and runs \`nvidia-smi\` as a health check. "poll" replaces the \`sleep 1\`
with polling \`get_server_list\` every 10 ms (a tuned site script). Run as
\`Prolog=\`/\`Epilog=\` on a second cluster (jobs in a partition \`mps\` get a
daemon), and directly. With \`MPS_PER_GPU=1\` the same scripts start (and quit)
one daemon per GPU, one after another, as a site's per-GPU script would:
section 6's 8-GPU goals compare unilab-mps's 8 daemons with that. ms.

| approach | added to \`srun -n1 --gres=gpu:4 true\` | added to \`srun -n4 --gres=gpu:4 true\` | prolog + epilog, tools instant | prolog + epilog, tools slow | control-tool runs prolog / epilog | \`nvidia-smi\` runs prolog / epilog |
|---|---:|---:|---:|---:|---:|---:|
EOF
pe() { # pe SUITE CASE PARAM LAT -> prolog + epilog median
  awk -v a="$(med "$1" "$2" "$3" "$4" prolog_ms)" -v b="$(med "$1" "$2" "$3" "$4" epilog_ms)" 'BEGIN { if (a != "" && b != "") printf "%.3f", a + b }'
}
printf '| unilab-mps (`--unilab-mps=multi`: one daemon) | %s | %s | %s | %s | %s / %s | %s / %s |\n' \
  "$(fmt "$(added multi 1 0)")" "$(fmt "$(added multi 4 0)")" "$(fmt "$(pe prolog multi 1 0)")" "$(fmt "$(pe prolog multi 1 tools)")" \
  "$(med prolog multi 1 0 prolog_ctl_calls)" "$(med prolog multi 1 0 epilog_ctl_calls)" \
  "$(med prolog multi 1 0 prolog_smi_calls)" "$(med prolog multi 1 0 epilog_smi_calls)"
for w in sleep poll; do
  if [ "$w" = sleep ]; then label='shell script after `prolog.example` (`sleep 1`)'; else label='the same script, polling instead of `sleep 1`'; fi
  printf '| %s | %s | %s | %s | %s | %s / %s | %s / %s |\n' "$label" \
    "$(fmt "$(minus "$(med shell "$w" 1 0 srun_on_ms)" "$(med shell "$w" 1 0 srun_off_ms)")")" \
    "$(fmt "$(minus "$(med shell "$w" 4 0 srun_on_ms)" "$(med shell "$w" 4 0 srun_off_ms)")")" \
    "$(fmt "$(pe shell "$w" 1 0)")" "$(fmt "$(pe shell "$w" 1 tools)")" \
    "$(med shell "$w" 1 0 prolog_ctl_calls)" "$(med shell "$w" 1 0 epilog_ctl_calls)" \
    "$(med shell "$w" 1 0 prolog_smi_calls)" "$(med shell "$w" 1 0 epilog_smi_calls)"
done
cat <<EOF

"added" columns: the cluster runs (with minus without the daemon, same
cluster); prolog + epilog: the scripts and helpers run directly for a one-GPU
job. With its \`sleep 1\` the shell script costs every MPS job about a second;
polling instead, it costs $(fmt "$shell_pe_poll") ms against unilab-mps's $(fmt "$ours_pe") ms (prolog +
epilog, one daemon, instant tools), and it does less for that time:

| | shell prolog after \`prolog.example\` | unilab-mps |
|---|---|---|
| daemon runs as | root (\`start_server -uid\` for the job's user) | the job's user |
| pipe directory | \`/tmp/nvidia-mps_<indices>\`, shared by every job on those indices | private 0700 directory per job and daemon |
| a task finds its daemon | the user must export \`CUDA_MPS_PIPE_DIRECTORY\` (a Prolog cannot set task env) | task_init sets it, with UUID \`CUDA_VISIBLE_DEVICES\` |
| GPU identity | Slurm indices passed through | GRES index → device minor → nvidia-smi UUID |
| stop | \`echo quit\`, then \`ps aux \| grep\` | record (pid + start time + boot id), verified signals within \`stop_timeout\` |
| several daemons per job / per-task binding | no | yes |
| how \`start_server -uid\` is sent | the example passes the command as arguments; it must go on stdin (the copy here uses stdin) | n/a |

## 6. A node's daemons at once

A per-GPU job's daemons start at once (a thread each, within one
\`start_timeout\`; when any fails, all are stopped again) and stop at once
(within one \`stop_timeout\`). Measured with the helpers run directly and
every daemon taking 300 ms to answer (\`mps_start_delay_ms=300\`); rounds in the "runs" column. ms.

$(concurrent_section)

$(real_gpu_section)

$(build_time_section)

## Method and caveats

- Machine: a 2-core VM shared with other work (other sessions' builds, tests
  and fuzzers ran at the same time: see the load average above). Within one
  run, with/without pairs are interleaved and comparable; absolute times move
  with the load (two full runs here, at load averages 9 and 7.5, differed by
  up to 3x in ms, while the counts, the linear growth and the order of the
  approaches stayed the same). Medians over ${META[reps]:-?} runs; every sample is
  in \`docs/bench-results.csv\`.
- Between runs on different machines, compare the fake tools' own times
  (section 3, "The fake tools alone": they measure the machine, not
  unilab-mps) before comparing any other figure. The goals are stated
  against the shell scripts measured in the same run for that reason.
- The fake tools are C++ programs that answer at once ("instant") or after a
  configured sleep ("slow": \`smi_latency_ms\`, \`mps_start_delay_ms\` in
  \`fake.conf\`). A real \`nvidia-smi\` takes tens to hundreds of ms and a real
  control daemon answers after its own start-up: use the "slow" rows as the
  estimate for a real node, the "instant" rows as the plugin's own cost.
- Prolog/epilog windows come from slurmd's debug log (ms timestamps).
- Not measured here: cgroup device constraint (same code path; the cgroup
  setup is Slurm's cost), multi-node jobs (each node runs its own prolog in
  parallel: per-node cost as above).
EOF
} >"$out.tmp"
mv "$out.tmp" "$out"

# README: replace the table between the markers, if the markers are there.
if [ -n "$readme" ] && grep -q '<!-- bench:begin -->' "$readme" && grep -q '<!-- bench:end -->' "$readme"; then
  headline >"$readme.table"
  awk -v t="$readme.table" '
    /<!-- bench:begin -->/ { print; while ((getline l < t) > 0) print l; skip = 1; next }
    /<!-- bench:end -->/ { skip = 0 }
    !skip { print }' "$readme" >"$readme.tmp" && cat "$readme.tmp" >"$readme"
  rm -f "$readme.tmp" "$readme.table"
fi
