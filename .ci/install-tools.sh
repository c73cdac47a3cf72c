#!/usr/bin/env bash
# The Debian tools the tests use, installed when missing and possible (root, or sudo without a
# password, and apt-get); otherwise this says what is missing and the tests that need it skip,
# each naming the package. `make test` runs it (as `make tools`) while it installs .venv, and so
# does CI: one step.
#   chromium           report tests in headless Chromium (tests/integration/test_report_browser.py)
#   faketime           a worker with a skewed clock
#   iproute2           network namespaces as separate hosts
#   openssh-server     sshd in each namespace for the Ansible deploy test
#   prometheus         a real Prometheus scraping a run (tests/integration/test_live_metrics.py)
#   nats-server redis-server mosquitto rabbitmq-server   the peer brokers the peer drivers'
#                      tests start (RabbitMQ brings Debian's Erlang; its tests start the node
#                      through drivers/rabbitmq/server.py, never the system service)
set -uo pipefail

missing=()
have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/usr/bin/$1" ]; }
have chromium || missing+=(chromium fonts-dejavu-core)
have faketime || missing+=(faketime)
have ip || missing+=(iproute2)
have sshd || missing+=(openssh-server)
peers=()
# A system service once installed, as the peer brokers are: disabled below like them.
have prometheus || peers+=(prometheus)
for peer in nats-server redis-server mosquitto rabbitmq-server; do
  have "$peer" || peers+=("$peer")
done
missing+=("${peers[@]}")
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO=(sudo -n)
  else
    echo "tools: missing ${missing[*]}; not root, so not installed: the tests that need them skip" >&2
    exit 0
  fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "tools: missing ${missing[*]}; no apt-get here: the tests that need them skip" >&2
  exit 0
fi
echo "tools: installing ${missing[*]} (apt-get)"
if ! { "${SUDO[@]}" apt-get update -qq &&
  DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null; }; then
  echo "tools: apt-get could not install ${missing[*]}: the tests that need them skip" >&2
  exit 0
fi
# The tests start their own servers; the system services the packages may have started idle.
if [ ${#peers[@]} -gt 0 ] && command -v systemctl >/dev/null 2>&1; then
  "${SUDO[@]}" systemctl disable --now "${peers[@]}" >/dev/null 2>&1 || true
fi
exit 0
