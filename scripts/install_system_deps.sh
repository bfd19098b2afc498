#!/usr/bin/env bash
# System packages the test suite needs (Debian): headless Chromium + chromedriver for the report's browser test,
# and munge + slurmctld + slurmd + the Slurm client for the one-node cluster that tests/slurm starts through
# scripts/local_slurm.sh, bubblewrap, the sandbox of reward=code / code_tests, and rootful Podman (with runc, the
# netavark network stack and strace) as the container engine of env.image's tests (tests/envs/container.py: it runs
# under the `docker` name, configured per test, no /etc/containers file). A no-op when they are present; needs root
# (or sudo) otherwise.
set -euo pipefail
need=()
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
command -v munged >/dev/null || need+=(munge)
command -v slurmctld >/dev/null || need+=(slurmctld)
command -v slurmd >/dev/null || need+=(slurmd)
command -v sbatch >/dev/null || need+=(slurm-client)
command -v bwrap >/dev/null || need+=(bubblewrap)
command -v strace >/dev/null || need+=(strace)
# crun refuses the cgroup v1+v2 hybrid of the test machines: the engine runs runc (tests/envs/container.py)
command -v runc >/dev/null || need+=(runc)
command -v podman >/dev/null || need+=(podman conmon netavark aardvark-dns iptables uidmap fuse-overlayfs slirp4netns catatonit)
[ ${#need[@]} -eq 0 ] && exit 0
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
apt() { $SUDO env DEBIAN_FRONTEND=noninteractive apt-get "$@"; }
# a fresh machine's package lists may be missing or stale: refresh them, once more if the install still fails
apt update -qq >/dev/null
if ! apt install -y -qq "${need[@]}" >/dev/null; then
  apt update >/dev/null
  apt install -y -qq "${need[@]}" >/dev/null
fi
