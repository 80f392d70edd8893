#!/usr/bin/env bash
# Build time: clean builds of this checkout (its committed HEAD, from `git
# archive`) the way scripts/test makes them, as they were before the build
# work ("before": header-only fmt, no precompiled headers:
# -DUNILAB_MPS_FMT_HEADER_ONLY=ON -DUNILAB_MPS_PCH=OFF, still the default)
# and with both build options ("after": libfmt and precompiled headers), one
# after the other on an otherwise idle machine. Appends one row per build to docs/build-times.csv and the
# slowest translation units of each build (ninja's log) to
# docs/build-times-units.csv; bench/report.sh renders both in
# docs/PERFORMANCE.md ("Build time"). A measurement, never an assertion.
#
# Usage: bench/build_time.sh [CONFIG...]
#   CONFIG: test (scripts/setup's build: everything, RelWithDebInfo),
#           asan (scripts/test's sanitizer step: the unit tests, Debug),
#           package (scripts/setup --build-only: no tests)
#   default: test asan
# About 12 minutes for the default on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
configs=("$@")
((${#configs[@]})) || configs=(test asan)
csv=docs/build-times.csv units=docs/build-times-units.csv
[ -f "$csv" ] || echo "date,commit,config,variant,wall_s,user_s,sys_s,units,load_at_start" >"$csv"
[ -f "$units" ] || echo "date,commit,config,variant,unit,seconds" >"$units"
commit=$(git rev-parse --short HEAD)
src=$(mktemp -d /tmp/unilab-build-time.XXXXXX)
trap 'rm -rf "$src"' EXIT
git archive HEAD | tar -x -C "$src"
date=$(date -u +%Y-%m-%dT%H:%M:%SZ)

configure() { # configure CONFIG before|after DIR
  local v=(-DUNILAB_MPS_FMT_HEADER_ONLY=OFF -DUNILAB_MPS_PCH=ON)
  [ "$2" = before ] && v=(-DUNILAB_MPS_FMT_HEADER_ONLY=ON -DUNILAB_MPS_PCH=OFF)
  case $1 in
  test) cmake -S "$src" -B "$3" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUNILAB_MPS_BUILD_TESTS=ON \
    -DUNILAB_MPS_UNIT_TESTS=ON -DUNILAB_MPS_BUILD_PLUGIN=ON "${v[@]}" >/dev/null ;;
  asan) cmake -S "$src" -B "$3" -G Ninja -DUNILAB_MPS_SANITIZE=ON -DUNILAB_MPS_BUILD_PLUGIN=OFF \
    -DCMAKE_BUILD_TYPE=Debug "${v[@]}" >/dev/null ;;
  package) cmake -S "$src" -B "$3" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUNILAB_MPS_BUILD_TESTS=OFF \
    "${v[@]}" >/dev/null ;;
  *) echo "bench/build_time.sh: unknown config '$1' (test, asan, package)" >&2; exit 2 ;;
  esac
}
target() { [ "$1" = asan ] && echo unilab_mps_core_test || echo all; }

for config in "${configs[@]}"; do
  for variant in before after; do
    dir=$src/build-$config-$variant
    configure "$config" "$variant" "$dir"
    load=$(cut -d' ' -f1 /proc/loadavg)
    /usr/bin/time -f '%e %U %S' -o "$src/time" ninja -C "$dir" "$(target "$config")" >"$src/ninja.log" 2>&1 ||
      { tail -20 "$src/ninja.log"; exit 1; }
    read -r wall user sys <"$src/time"
    n=$(awk -F'\t' 'NR > 1 && $4 ~ /\.o$/' "$dir/.ninja_log" | wc -l)
    echo "$date,$commit,$config,$variant,$wall,$user,$sys,$n,$load" >>"$csv"
    awk -F'\t' -v p="$date,$commit,$config,$variant" 'NR > 1 && $4 ~ /\.(o|gch)$/ {
        u = $4; sub(/.*CMakeFiles\/[^\/]*\.dir\//, "", u); printf "%s,%s,%.1f\n", p, u, ($2 - $1) / 1000 }' "$dir/.ninja_log" |
      sort -t, -k6 -rn | head -n 8 >>"$units"
    echo "$config, $variant: ${wall} s wall, ${user} s user, $n translation units (load at start $load)"
    rm -rf "$dir"
  done
done
