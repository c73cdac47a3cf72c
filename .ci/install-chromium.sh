#!/usr/bin/env bash
# Installs Debian's chromium for the report's browser test (tests/integration/test_report_browser.py).
# Playwright's own browser download cannot reach its CDN here, so the test drives this binary
# through executable_path instead. Idempotent: does nothing when chromium is already present.
set -euo pipefail

CHROMIUM=${CHROMIUM:-/usr/bin/chromium}

if [ -x "$CHROMIUM" ]; then
  echo "chromium present: $("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM")"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core
echo "chromium installed: $("$CHROMIUM" --version)"
