#!/usr/bin/env bash
# Debian tools the integration tests use: faketime (a worker with a skewed clock) and iproute2
# (network namespaces as separate hosts).
set -euo pipefail
missing=()
command -v faketime >/dev/null 2>&1 || missing+=(faketime)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
