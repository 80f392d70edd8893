#!/usr/bin/env bash
# Run HERE (Debian 12, packages installed) before a real-GPU check on a
# machine that has CUDA, PyTorch, CMake and a compiler but no Debian packages
# and no network. Fills tests/gpu/bundle/ (git-ignored; it travels with the
# checkout, e.g. as `carry: ["tests/gpu/bundle"]`):
#   include/nlohmann/, include/fmt/   headers the build needs (fmt header-only),
#                                     used via -DUNILAB_MPS_THIRD_PARTY_INCLUDE
#   bin/unilab-mps, unilab-mps-prolog, unilab-mps-epilog
#                                     built here with libstdc++/libgcc linked
#                                     statically: they need only glibc >= the
#                                     version in MANIFEST (Debian 12: 2.36), so
#                                     they run on newer systems as they are
#   fakes/                            the fake nvidia-smi / nvidia-cuda-mps-control
#                                     / fake-cuda-client, for run_gpu_check.sh --dry-run
#   MANIFEST                          what was bundled, from which commit
# The bundle build itself uses the bundled headers with the system copies
# hidden (a private mount namespace), which proves they are sufficient.
#
# Usage: tests/gpu/prepare.sh [BUILD_DIR]   (default /tmp/unilab-gpu-bundle-build)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-/tmp/unilab-gpu-bundle-build}
bundle=$here/bundle

for h in /usr/include/nlohmann/json.hpp /usr/include/fmt/format.h; do
  [ -f "$h" ] || { echo "prepare.sh: $h missing: run scripts/setup (nlohmann-json3-dev, libfmt-dev) first" >&2; exit 1; }
done
rm -rf "$bundle"
mkdir -p "$bundle/include" "$bundle/bin" "$bundle/fakes"
cp -a /usr/include/nlohmann /usr/include/fmt "$bundle/include/"

configure_and_build() {
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DUNILAB_MPS_BUILD_PLUGIN=OFF -DUNILAB_MPS_UNIT_TESTS=OFF -DUNILAB_MPS_BUILD_TESTS=ON \
    -DUNILAB_MPS_THIRD_PARTY_INCLUDE="$bundle/include" \
    "-DCMAKE_EXE_LINKER_FLAGS=-static-libstdc++ -static-libgcc" >/dev/null
  ninja -C "$build" unilab-mps unilab-mps-prolog unilab-mps-epilog fake_nvidia_smi fake_mps_control fake_cuda_client fake_driver_proc
}
export -f configure_and_build
export root build bundle
hidden=no
if [ "$(id -u)" -eq 0 ] && command -v unshare >/dev/null &&
  unshare -m true 2>/dev/null; then
  # Hide the system's copies so that only the bundle can satisfy the build.
  # shellcheck disable=SC2016 # expanded by the inner shell
  unshare -m bash -c 'set -e
    mount --make-rprivate / 2>/dev/null || true
    for d in /usr/include/nlohmann /usr/include/fmt /usr/lib/x86_64-linux-gnu/cmake/fmt /usr/share/cmake/nlohmann_json; do
      [ -d "$d" ] && mount -t tmpfs -o size=1m,mode=755 none "$d"
    done
    configure_and_build'
  hidden=yes
else
  echo "prepare.sh: cannot hide the system headers (needs root and unshare -m); building with the bundle anyway" >&2
  configure_and_build
fi

install -m 755 "$build/cli/unilab-mps" "$build/prolog/unilab-mps-prolog" "$build/prolog/unilab-mps-epilog" "$bundle/bin/"
strip --strip-debug "$bundle"/bin/*
install -m 755 "$build/fakes/bin/nvidia-smi" "$build/fakes/bin/nvidia-cuda-mps-control" "$build/fakes/bin/fake-cuda-client" \
  "$build/fakes/bin/fake-driver-proc" "$bundle/fakes/"
strip --strip-debug "$bundle"/fakes/*
install -m 644 "$build/fakes/bin/gpus.csv" "$bundle/fakes/"

glibc_needed=$(objdump -T "$bundle"/bin/* | sed -n 's/.*GLIBC_\([0-9][0-9.]*\).*/\1/p' | sort -t. -k1,1n -k2,2n -k3,3n -u | tail -n1)
{
  echo "commit=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet 2>/dev/null || echo '+local-changes')"
  echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ) on $(sed -n 's/^PRETTY_NAME="\(.*\)"$/\1/p' /etc/os-release), $(c++ --version | head -n1)"
  echo "nlohmann_json=$(dpkg-query -W -f='${Version}' nlohmann-json3-dev 2>/dev/null || echo unknown)"
  echo "fmt=$(dpkg-query -W -f='${Version}' libfmt-dev 2>/dev/null || echo unknown)"
  echo "glibc_needed=$glibc_needed"
  echo "libstdcxx=static"
  echo "system_headers_hidden_during_build=$hidden"
} >"$bundle/MANIFEST"
ldd "$bundle/bin/unilab-mps" | sed 's/^/  ldd: /' >>"$bundle/MANIFEST"
du -sh "$bundle"
cat "$bundle/MANIFEST"
