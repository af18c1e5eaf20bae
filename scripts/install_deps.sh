#!/usr/bin/env bash
# Installs what building and testing fpdt needs on Debian 12, as root, and nothing when all of it is
# already there (so `make test` stays quick on a warm machine). Used by `make test` and `make run`.
set -euo pipefail

# wamerican: /usr/share/dict/words, the word list of `fpdt eval --ruler`'s keys and words. libyaml-cpp-dev: the
# recipes of `fpdt extend`. slurmctld, slurmd, slurm-client and munge: the Slurm cluster
# tests/cli/slurm_slow_test.cpp starts (its own daemons on its own configuration, whatever the system's services
# do); libpmix-dev: the libpmix.so Slurm's mpi_pmix plugin dlopens for `srun --mpi=pmix` (libopenmpi-dev pulls it
# in today; named so that it stays).
packages=(build-essential cmake pkg-config libopenblas-dev libgtest-dev libgmock-dev nlohmann-json3-dev
          libonig-dev libopenmpi-dev openmpi-bin libdnnl-dev wamerican libyaml-cpp-dev slurmctld slurmd slurm-client
          munge libpmix-dev)
# Extra packages a target asks for, e.g. the demo corpus for `make run`.
packages+=("$@")

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install_deps: installing ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "install_deps: missing packages (${missing[*]}) and not root; install them with apt-get or rerun as root" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
