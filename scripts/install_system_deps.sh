#!/usr/bin/env bash
# System packages the test suite needs (Debian): headless Chromium + chromedriver for the report's browser test,
# and munge + slurmctld + slurmd + the Slurm client for the one-node cluster that tests/slurm starts through
# scripts/local_slurm.sh, and bubblewrap, the sandbox of reward=code / code_tests. A no-op when they are present; needs root (or sudo) otherwise.
set -euo pipefail
need=()
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
command -v munged >/dev/null || need+=(munge)
command -v slurmctld >/dev/null || need+=(slurmctld)
command -v slurmd >/dev/null || need+=(slurmd)
command -v sbatch >/dev/null || need+=(slurm-client)
command -v bwrap >/dev/null || need+=(bubblewrap)
[ ${#need[@]} -eq 0 ] && exit 0
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
apt() { $SUDO env DEBIAN_FRONTEND=noninteractive apt-get "$@"; }
# a fresh machine's package lists may be missing or stale: refresh them, once more if the install still fails
apt update -qq >/dev/null
if ! apt install -y -qq "${need[@]}" >/dev/null; then
  apt update >/dev/null
  apt install -y -qq "${need[@]}" >/dev/null
fi
