#!/usr/bin/env bash
# Puts the cuDNN frontend's C++ headers (header-only; PyPI's nvidia-cudnn-frontend ships them in its wheel's
# include/ folder) into DIR/include, for CMake's cuDNN attention path (kernels/cuda/cudnn_sdpa.cpp): the wheel
# is fetched with pip (no install, no dependencies) and only include/ is kept. Once per version: a DIR that
# already holds this version is left as it is.
#   bash scripts/get_cudnn_frontend.sh [DIR]      (default ~/.cache/fpdt/cudnn-frontend, where CMake looks)
set -euo pipefail
VERSION=1.32.0  # the frontend fpdt is built and checked with
DIR=${1:-$HOME/.cache/fpdt/cudnn-frontend}
stamp="$DIR/.version"
if [ -f "$DIR/include/cudnn_frontend.h" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$VERSION" ]; then
  echo "get_cudnn_frontend: $DIR/include has frontend $VERSION"
  exit 0
fi
python=$(command -v python3 || true)
[ -n "$python" ] || { echo "get_cudnn_frontend: needs python3 with pip" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if ! "$python" -m pip download --quiet --no-deps --only-binary=:all: --dest "$work" \
     "nvidia-cudnn-frontend==$VERSION" >"$work/pip.log" 2>&1; then
  cat "$work/pip.log" >&2
  echo "get_cudnn_frontend: pip could not fetch nvidia-cudnn-frontend==$VERSION; hint: check that PyPI is reachable" >&2
  exit 1
fi
wheel=$(ls "$work"/nvidia_cudnn_frontend-*.whl)
"$python" - "$wheel" "$work/unpacked" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    wheel.extractall(sys.argv[2], [name for name in wheel.namelist() if name.startswith("include/")])
PY
[ -f "$work/unpacked/include/cudnn_frontend.h" ] || { echo "get_cudnn_frontend: the wheel has no include/cudnn_frontend.h" >&2; exit 1; }
rm -rf "$DIR"
mkdir -p "$DIR"
mv "$work/unpacked/include" "$DIR/include"
echo "$VERSION" >"$stamp"
echo "get_cudnn_frontend: frontend $VERSION headers in $DIR/include ($(du -sh "$DIR/include" | cut -f1))"
