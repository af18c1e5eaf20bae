#!/usr/bin/env bash
# Creates (once) the Python environment of the reference tools: PyTorch, transformers, tokenizers, gguf,
# accelerate (transformers loads a GGUF file only with it) and safetensors from PyPI, pinned, in a venv of
# their own outside the repository (shared by checkouts).
# Neither `make test` nor `make run` needs it: it makes golden files (tools/make_hf_golden.py ...)
# and runs the side-by-side benchmarks against PyTorch (bench/peer_torch.sh).
#   usage: tools/reference_env.sh            prints the venv's python on stdout
#   FPDT_REF_VENV=DIR overrides the location (default ~/.cache/fpdt/ref-venv)
set -euo pipefail
venv=${FPDT_REF_VENV:-$HOME/.cache/fpdt/ref-venv}
pins=(torch==2.15.0 transformers==5.24.0 tokenizers==0.23.3 gguf==0.19.0 accelerate==1.15.0 safetensors numpy matplotlib unicodedata2==16.0.0)
stamp="$venv/.fpdt-pins"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "${pins[*]}" ]; then
  python3 -m venv "$venv" >&2 || { bash "$(dirname "$0")/../scripts/install_deps.sh" python3-venv >&2; python3 -m venv "$venv" >&2; }
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
  "$venv/bin/python" -m pip install -q "${pins[@]}" >&2
  echo "${pins[*]}" > "$stamp"
fi
echo "$venv/bin/python"
