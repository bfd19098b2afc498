#!/usr/bin/env bash
# System packages the test suite needs: headless Chromium + chromedriver (Debian) for the
# report's browser test. A no-op when they are present; needs root (or sudo) otherwise.
set -euo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
  exit 0
fi
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
