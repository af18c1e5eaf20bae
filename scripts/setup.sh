#!/usr/bin/env bash
# The set-up of `make run` and `make demo`, quietly: the packages that are missing (apt), then fpdt
# configured and built. One line per step on the terminal; everything they print goes to LOG, whose
# last lines are shown when a step fails.
#   usage: scripts/setup.sh BUILD_DIR LOG [EXTRA_PACKAGE...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=$1
log=$2
shift 2
mkdir -p "$(dirname "$log")"
: > "$log"

# step TEXT COMMAND...: runs COMMAND with its output appended to the log, then prints TEXT and its time.
step() {
  local text=$1 began
  shift
  began=$(date +%s)
  if ! "$@" >> "$log" 2>&1; then
    tail -n 20 "$log" >&2
    echo "set-up: $text failed (the whole output: $log)" >&2
    exit 1
  fi
  printf 'set-up: %s (%d s)\n' "$text" $(($(date +%s) - began))
}

step "packages (apt)" bash scripts/install_deps.sh "$@"
# One line however many packages came (their names are in the log): the first install_deps run's list.
installed=$(sed -n 's/^install_deps: installing //p' "$log" | head -n 1 | wc -w)
if [ "$installed" -gt 0 ]; then echo "        installed $installed packages (their names: $log)"; else echo "        nothing was missing"; fi
step "configure ($build)" make --no-print-directory BUILD="$build" configure
step "build fpdt ($(nproc) jobs)" cmake --build "$build" -j "$(nproc)" --target fpdt
echo "        their output: $log"
