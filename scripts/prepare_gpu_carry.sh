#!/usr/bin/env bash
# Prepares the folder a GPU machine's call carries (it has nvcc, its host compiler, CMake and ninja,
# but no Debian packages beyond them and no network): the .deb files of the libraries CMakeLists.txt
# needs (OpenBLAS, GCC's OpenMP, nlohmann_json) and GoogleTest's source, fetched here with
# `apt-get download`; scripts/gpu_check.sh unpacks them with `dpkg -x` and configures with
# -DFPDT_DEPS_PREFIX. And the headers of cuDNN's fused attention path (kernels/cuda/cudnn_sdpa.cpp):
# cudnn-frontend/include (scripts/get_cudnn_frontend.sh) and cudnn/include, cuDNN's own headers, copied
# from the first of FPDT_CUDNN_INCLUDE_DIR, the CUDA toolkit's include folder, this python's nvidia-cudnn
# package or the reference venv's (tools/reference_env.sh); libcudnn itself is the GPU machine's PyTorch's, opened at run time. Prints the
# `carry` list to name and checks the 64 MiB the call may move.
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

# cuDNN attention's headers: the frontend's, and cuDNN's (a missing one leaves the GPU build on its own
# attention kernels, said here and in the check's configure log).
bash scripts/get_cudnn_frontend.sh "$DIR/cudnn-frontend" >/dev/null ||
  echo "prepare_gpu_carry: no cuDNN frontend headers carried (see above)" >&2
cudnn_include=${FPDT_CUDNN_INCLUDE_DIR:-}
nvcc_path=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
toolkit_include="$(dirname "$(dirname "$nvcc_path")")/include"
[ -z "$cudnn_include" ] && [ -f "$toolkit_include/cudnn.h" ] && cudnn_include=$toolkit_include
if [ -z "$cudnn_include" ]; then
  for python in python3 "${FPDT_REF_VENV:-$HOME/.cache/fpdt/ref-venv}/bin/python"; do
    cudnn_include=$("$python" -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "include"))' 2>/dev/null) && break
  done
fi
if [ -n "$cudnn_include" ] && [ -f "$cudnn_include/cudnn.h" ]; then
  mkdir -p "$DIR/cudnn/include"
  cp "$cudnn_include"/cudnn*.h "$DIR/cudnn/include/"
else
  echo "prepare_gpu_carry: no cudnn.h found (set FPDT_CUDNN_INCLUDE_DIR, or run tools/reference_env.sh); the GPU" \
       "build will run attention on its own kernels" >&2
fi

carry_bytes=$(du -cb "$DIR" | tail -1 | cut -f1)
tree_bytes=$(git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null | awk '/\ttotal$/ {s += $1} END {print s + 0}')
total_mib=$(( (carry_bytes + tree_bytes) / 1048576 ))
echo "prepare_gpu_carry: $(ls "$DIR"/*.deb | wc -l) packages$([ -f "$DIR/cudnn/include/cudnn.h" ] && echo ", cuDNN's headers")$(
       [ -f "$DIR/cudnn-frontend/include/cudnn_frontend.h" ] && echo ", the cuDNN frontend's"), $(( carry_bytes / 1024 )) KiB in $DIR;" \
     "with the working tree $total_mib MiB of the call's $LIMIT_MIB MiB"
if [ "$total_mib" -ge "$LIMIT_MIB" ]; then
  echo "prepare_gpu_carry: over the $LIMIT_MIB MiB a call may carry; hint: leave untracked files out of the tree" >&2
  exit 1
fi
echo "carry: [\"$DIR\"]"
echo "run:   bash scripts/gpu_check.sh      (on the GPU machine; logs under \$OUT)"
