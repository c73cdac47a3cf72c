#!/usr/bin/env bash
# Debian tools the integration tests use: faketime (a worker with a skewed clock) and iproute2
# (network namespaces as separate hosts).
set -euo pipefail
missing=()
command -v faketime >/dev/null 2>&1 || missing+=(faketime)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
# sshd in each namespace for the Ansible deploy test (tests/integration/test_deploy_ansible.py).
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
# Peer brokers the peer drivers' tests start on loopback (tests/integration/test_driver_*.py).
peers=()
for peer in nats-server redis-server mosquitto; do
  command -v "$peer" >/dev/null 2>&1 || [ -x "/usr/sbin/$peer" ] || peers+=("$peer")
done
missing+=("${peers[@]}")
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
# The tests start their own servers; the system services the packages may have started idle.
if [ ${#peers[@]} -gt 0 ] && command -v systemctl >/dev/null 2>&1; then
  systemctl disable --now "${peers[@]}" >/dev/null 2>&1 || true
fi
