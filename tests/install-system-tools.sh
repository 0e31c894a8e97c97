#!/usr/bin/env bash
# Debian packages some tests need: chromium (Playwright drives it in the JupyterLab test; browsers cannot be downloaded
# here) and envsubst (gettext-base: the template must render the same with plain envsubst). Installed when missing and
# this user may; otherwise those tests skip and say why -- and under CI=true a missing tool fails here, at once.
set -u
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v envsubst >/dev/null 2>&1 || missing+=(gettext-base)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null && apt-get install -y -qq "${missing[@]}" >/dev/null && exit 0
  echo "apt-get could not install: ${missing[*]}" >&2
else
  echo "cannot install ${missing[*]} (needs root and apt-get)" >&2
fi
if [ "${CI:-}" = true ]; then echo "CI=true: ${missing[*]} must be installed" >&2; exit 1; fi
echo "the tests that need ${missing[*]} will be skipped" >&2
