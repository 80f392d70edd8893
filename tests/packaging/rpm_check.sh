#!/usr/bin/env bash
# The RPM spec (packaging/unilab-mps.spec) on this Debian machine: a release
# tarball made with `git archive` (as docs/ADMIN.md tells RHEL sites), then
# `rpmbuild -ts` and `rpmbuild -tb` with Debian's rpm tools, and checks of the
# binary RPM's files, dependencies and scripts.
#
# What it cannot check: the build on a RHEL-family system. rpmbuild runs with
# --nodeps (Debian has no slurm-devel, json-devel, fmt-devel RPMs; the build
# uses Debian's libslurm-dev, nlohmann-json3-dev and libfmt-dev headers
# instead), so the `Requires: slurm` series bounds (from `rpm -q slurm-devel`)
# are absent here and the BuildRequires are only listed, not resolved.
#
# Usage: tests/packaging/rpm_check.sh   (root; installs rpm and rpmlint)
# Each check prints ok/FAIL; exits non-zero when one fails or none ran.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"
cd "$here/../.."

MIN_CHECKS=20
need=()
command -v rpmbuild >/dev/null || need+=(rpm)
command -v rpmlint >/dev/null || need+=(rpmlint)
if ((${#need[@]})); then
  apt-get update -qq >/dev/null 2>&1
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null ||
    { echo "rpm_check: cannot install ${need[*]}" >&2; exit 1; }
fi

version=$(sed -n 's/^project(unilab-mps VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
spec_version=$(sed -n 's/^Version: *//p' packaging/unilab-mps.spec)
expect_eq "the spec's Version is CMakeLists.txt's project version" "$version" "$spec_version"

work=$(mktemp -d /tmp/unilab-rpm.XXXXXX)
trap 'rm -rf "$work"' EXIT
tarball=$work/unilab-mps-$version.tar.gz
# The working tree as it is (a stash-like commit when there are changes).
rev=$(git stash create 2>/dev/null)
git archive --prefix="unilab-mps-$version/" -o "$tarball" "${rev:-HEAD}" ||
  { fail "git archive makes the release tarball"; finish; exit 1; }
top=$work/top
rpmb() { rpmbuild --define "_topdir $top" --define "_smp_mflags -j$(nproc)" "$@"; }

out=$(rpmb -ts "$tarball" 2>&1)
check "rpmbuild -ts: the source RPM builds from the tarball" test -f "$top/SRPMS/unilab-mps-$version-1.src.rpm"
srpm=$top/SRPMS/unilab-mps-$version-1.src.rpm
for dep in slurm-devel json-devel fmt-devel gcc-c++ cmake ninja-build; do
  expect_contains "source RPM BuildRequires $dep" "$(rpm -qpR "$srpm" 2>&1)" "$dep"
done

t0=$SECONDS
out=$(rpmb -tb --nodeps "$tarball" 2>&1)
rc=$?
echo "rpmbuild -tb: exit $rc after $((SECONDS - t0)) s"
expect_eq "rpmbuild -tb --nodeps: exit 0" 0 "$rc"
[ "$rc" -eq 0 ] || printf '%s\n' "$out" | tail -n 20
rpm=$(ls "$top"/RPMS/*/unilab-mps-"$version"-1.*.rpm 2>/dev/null | grep -v -- -debug | head -n1)
check "a binary RPM was written" test -n "$rpm"
if [ -n "$rpm" ]; then
  files=$(rpm -qpl "$rpm" 2>&1)
  # Slurm's PluginDir on RHEL-family systems: %{_libdir}/slurm.
  for f in /usr/lib64/slurm/unilab_mps.so /usr/bin/unilab-mps /usr/sbin/unilab-mps-prolog /usr/sbin/unilab-mps-epilog \
    /usr/share/man/man1/unilab-mps.1 /usr/share/doc/unilab-mps/examples/plugstack.conf.d/unilab-mps.conf; do
    expect_contains "the RPM holds $f" "$files" "$f"
  done
  expect_not_contains "nothing under Debian's multiarch dirs" "$files" "x86_64-linux-gnu"
  expect_contains "the plugin is a SPANK plugin (exports slurm_spank_init)" \
    "$(rpm2cpio "$rpm" | (cd "$work" && cpio -idm --quiet ./usr/lib64/slurm/unilab_mps.so) && nm -D --defined-only "$work/usr/lib64/slurm/unilab_mps.so")" \
    "slurm_spank_init"
  expect_contains "%postun warns while a plugstack file still names the plugin" "$(rpm -qp --scripts "$rpm" 2>&1)" "unilab_mps.so"
  # Errors that say only that this is a local build checked on Debian:
  # unsigned, no Packager tag (a site's build system sets both), and
  # "no-dependency-on locales-mps" (rpmlint reads the name's "-mps" as a
  # language code). Everything rpmlint said is printed.
  lint=$(rpmlint "$rpm" "$srpm" 2>&1 | grep -E ': [EW]: ')
  printf 'rpmlint: %s\n' "${lint:-nothing}"
  expect_eq "rpmlint reports no error beyond a local, unsigned build" "" \
    "$(printf '%s\n' "$lint" | grep ': E: ' | grep -vE ': E: (no-signature|no-packager-tag|no-dependency-on locales-mps)$' || true)"
fi
finish
