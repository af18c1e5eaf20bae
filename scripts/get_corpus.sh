#!/usr/bin/env bash
# Fetches the demo corpus for `make run` — the King James Bible from Debian's bible-kjv packages —
# as plain text (verse references stripped), and tokenizes it into byte-level shards.
#   usage: scripts/get_corpus.sh FPDT_BINARY DATA_DIR
# Writes DATA_DIR/kjv.txt and DATA_DIR/kjv/{train,val}.bin; does nothing when they already exist.
set -euo pipefail
fpdt=$1
data=$2
mkdir -p "$data"
if [ ! -s "$data/kjv.txt" ]; then
  bash "$(dirname "$0")/install_deps.sh" bible-kjv
  # One verse per line, from Genesis 1:1 to Revelation 22:21, without the "Ge1:1 " reference.
  bible -f 'Gen1:1-Rev22:21' | sed -E 's/^[1-3]?[A-Za-z]+[0-9]+:[0-9]+ //' > "$data/kjv.txt.partial"
  mv "$data/kjv.txt.partial" "$data/kjv.txt"
fi
if [ ! -s "$data/kjv/train.bin" ]; then
  "$fpdt" tokenize --out "$data/kjv" --val-fraction 0.02 "$data/kjv.txt"
fi
