#!/usr/bin/env bash
# Rehearses scripts/gpu_check.sh on a development machine as the GPU machine will see it: in a private
# mount namespace whose /usr is an overlay in which every file of the Debian packages CMake could
# otherwise find (OpenBLAS and its Fortran runtime, OpenMP, Oniguruma, nlohmann-json, GoogleTest, pkg-config, MPI,
# oneDNN: optional, the carried build has none)
# is whited out, so the build can only succeed from the carried folder (scripts/prepare_gpu_carry.sh).
# Needs root (unshare -m, mount). Arguments and environment go to gpu_check.sh.
#   sudo bash scripts/gpu_check_hidden_deps.sh [BUILD_DIR]      (default build-hidden)
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "gpu_check_hidden_deps: needs root (unshare -m and mount)" >&2; exit 1; }

packages=(libopenblas0 libopenblas0-pthread libopenblas-dev libopenblas-pthread-dev libgfortran5 libquadmath0
          libgomp1 libomp-dev libomp-14-dev libomp5-14 nlohmann-json3-dev libgtest-dev libgmock-dev googletest
          libonig5 libonig-dev pkg-config pkgconf pkgconf-bin libopenmpi-dev libopenmpi3 openmpi-bin libdnnl2 libdnnl-dev)
installed=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" && installed+=("$package")
done
# Files and folders to hide: the packages' own, GCC's OpenMP files, and every symlink that leads into a
# hidden path.
hidden=$(mktemp)
python3 - "$hidden" "${installed[@]}" <<'PY'
import glob, os, re, sys
out, packages = sys.argv[1], set(sys.argv[2:])
owners = {}  # path → the packages that list it (dpkg's file lists)
for listing in glob.glob("/var/lib/dpkg/info/*.list"):
    package = os.path.basename(listing)[: -len(".list")].split(":")[0]
    for line in open(listing, errors="replace"):
        owners.setdefault(line.rstrip("\n"), set()).add(package)
paths = set()
for path, listed_by in owners.items():
    if not path.startswith("/usr/") or not listed_by & packages:
        continue
    if os.path.isdir(path) and not os.path.islink(path):
        if listed_by <= packages:  # a folder only when no other package has files in it
            paths.add(path)
    elif os.path.lexists(path):
        paths.add(path)
for root, dirs, files in os.walk("/usr/lib/gcc"):  # GCC's OpenMP: libgcc-*-dev holds the rest of GCC too
    for name in files:
        if re.fullmatch(r"omp\.h|libgomp\..*|openacc.*\.h|acc_prof\.h", name):
            paths.add(os.path.join(root, name))
def under(path, roots):  # path is one of roots or inside one
    while path not in ("", "/"):
        if path in roots:
            return True
        path = os.path.dirname(path)
    return False
links = set()
for root, dirs, files in os.walk("/usr"):  # symlinks into hidden paths (update-alternatives's)
    for name in dirs + files:
        link = os.path.join(root, name)
        if os.path.islink(link) and under(os.path.realpath(link), paths):
            links.add(link)
paths |= links
kept = sorted(p for p in paths if not under(os.path.dirname(p), paths))  # a hidden folder hides its inside
open(out, "w").write("\n".join(kept) + "\n")
PY
echo "gpu_check_hidden_deps: hiding $(wc -l <"$hidden") paths of ${installed[*]} and GCC's OpenMP"

exec unshare -m bash -s "$hidden" "$@" <<'NAMESPACE'
set -euo pipefail
hidden=$1
shift
mount --make-rprivate /
layer=$(mktemp -d)
mount -t tmpfs tmpfs "$layer"
mkdir -p "$layer/upper" "$layer/work"
while read -r path; do  # the upper layer mirrors /usr: /usr/include/x is upper/include/x
  inside=${path#/usr}
  mkdir -p "$layer/upper$(dirname "$inside")"
  [ -e "$layer/upper$inside" ] || mknod "$layer/upper$inside" c 0 0  # an overlay whiteout
done <"$hidden"
mount -t overlay overlay -o "lowerdir=/usr,upperdir=$layer/upper,workdir=$layer/work" /usr
for probe in /usr/include/nlohmann /usr/include/gtest /usr/src/googletest /usr/bin/pkg-config \
             /usr/lib/x86_64-linux-gnu/libopenblas.so.0 /usr/lib/x86_64-linux-gnu/libgomp.so.1; do
  [ -e "$probe" ] && { echo "gpu_check_hidden_deps: $probe still visible" >&2; exit 1; }
done
gomp_spec=$(gcc -print-file-name=libgomp.spec)
[ "$gomp_spec" = libgomp.spec ] || { echo "gpu_check_hidden_deps: $gomp_spec still visible" >&2; exit 1; }
echo "gpu_check_hidden_deps: hidden (checked: nlohmann, gtest, googletest source, pkg-config, libopenblas, libgomp)"
bash scripts/gpu_check.sh "${@:-build-hidden}"
NAMESPACE
