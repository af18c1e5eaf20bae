#!/usr/bin/env bash
# Prepares the folder a GPU machine's call carries (it has nvcc, its host compiler, CMake and ninja,
# but no Debian packages beyond them and no network): the .deb files of the libraries CMakeLists.txt
# needs (OpenBLAS, GCC's OpenMP, nlohmann_json) and GoogleTest's source, fetched here with
# `apt-get download`; scripts/gpu_check.sh unpacks them with `dpkg -x` and configures with
# -DFPDT_DEPS_PREFIX. Prints the `carry` list to name and checks the 64 MiB the call may move.
#   bash scripts/prepare_gpu_carry.sh [DIR]        (default .gpu-carry, ignored by git)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-.gpu-carry}
LIMIT_MIB=64  # the working tree and the carried paths together (the device tool's limit)

gcc_major=$(gcc -dumpversion | cut -d. -f1)
packages=(
  libopenblas0-pthread libopenblas-pthread-dev  # libopenblas.so, cblas.h (openblas-pthread folders)
  libgfortran5 libquadmath0                     # what libopenblas.so.0 loads
  libgomp1 "libgcc-${gcc_major}-dev"            # OpenMP where the compiler has none: libgomp.so.1, omp.h
  libonig5 libonig-dev                          # Oniguruma: the tokenizer's pre-tokenizer patterns
  nlohmann-json3-dev                            # headers and its CMake config
  googletest                                    # GoogleTest's source (/usr/src/googletest)
)

rm -rf "$DIR"
mkdir -p "$DIR"
if ! (cd "$DIR" && apt-get download "${packages[@]}" 2>"download.err"); then
  cat "$DIR/download.err" >&2
  echo "prepare_gpu_carry: apt-get download failed; hint: run apt-get update (as root) and try again" >&2
  exit 1
fi
rm -f "$DIR/download.err"
(cd "$DIR" && sha256sum ./*.deb >MANIFEST.sha256)

carry_bytes=$(du -cb "$DIR" | tail -1 | cut -f1)
tree_bytes=$(git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null | awk '/\ttotal$/ {s += $1} END {print s + 0}')
total_mib=$(( (carry_bytes + tree_bytes) / 1048576 ))
echo "prepare_gpu_carry: $(ls "$DIR"/*.deb | wc -l) packages, $(( carry_bytes / 1024 )) KiB in $DIR;" \
     "with the working tree $total_mib MiB of the call's $LIMIT_MIB MiB"
if [ "$total_mib" -ge "$LIMIT_MIB" ]; then
  echo "prepare_gpu_carry: over the $LIMIT_MIB MiB a call may carry; hint: leave untracked files out of the tree" >&2
  exit 1
fi
echo "carry: [\"$DIR\"]"
echo "run:   bash scripts/gpu_check.sh      (on the GPU machine; logs under \$OUT)"
