#!/usr/bin/env bash
# Debian's chromium for the JupyterLab browser test (Playwright drives it; browsers cannot be downloaded here).
set -eu
command -v chromium >/dev/null 2>&1 && exit 0
[ "$(id -u)" = 0 ] || { echo "not root: cannot apt-get install chromium"; exit 1; }
command -v apt-get >/dev/null 2>&1 || { echo "no apt-get"; exit 1; }
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq chromium >/dev/null
command -v chromium
