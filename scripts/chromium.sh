#!/usr/bin/env bash
# Makes sure a headless Chromium is installed for the dashboard's browser
# tests (internal/web, driven by chromedp). Debian's `chromium` package is
# installed with apt-get when /usr/bin/chromium (or $GPUSLICE_CHROMIUM) is
# missing; sudo is used when not root. Prints what it does and, on stdout,
# the browser's path.
set -euo pipefail

browser="${GPUSLICE_CHROMIUM:-/usr/bin/chromium}"
if [ -x "$browser" ]; then
  echo "chromium: $browser is installed ($("$browser" --version 2>/dev/null || echo 'version unknown'))" >&2
  echo "$browser"
  exit 0
fi

sudo=""
if [ "$(id -u)" != 0 ]; then
  if ! command -v sudo >/dev/null; then
    echo "chromium: $browser is missing and this is not root and has no sudo; install Debian's chromium package" >&2
    exit 1
  fi
  sudo="sudo"
fi
echo "chromium: $browser is missing; running: $sudo apt-get update && $sudo apt-get install -y --no-install-recommends chromium" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q >&2
$sudo apt-get install -y -q --no-install-recommends chromium >&2
if [ ! -x "$browser" ]; then
  echo "chromium: installed the chromium package but $browser is still missing" >&2
  exit 1
fi
echo "chromium: installed $("$browser" --version 2>/dev/null || echo "$browser")" >&2
echo "$browser"
