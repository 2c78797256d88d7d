#!/usr/bin/env bash
# Install the Debian packages Gale needs, only those that are missing.
#   deploy/install-system-deps.sh base   -> Java 17 runtime + ZooKeeper 3.8 + Redis (nimbus, supervisor, demo, state)
#                                           + a C compiler, Python's headers and ccache (the compiled hot path)
#   deploy/install-system-deps.sh test   -> base + what the test suite drives for real
#                                           (RabbitMQ, Prometheus, Chromium + chromedriver, systemd-analyze,
#                                           PostgreSQL)
# Re-running when everything is present costs one dpkg query and no network.
set -euo pipefail

set_name=${1:-base}
# ccache: a new checkout's build of the hot path reuses what an earlier one compiled (setup.py)
pkgs=(openjdk-17-jre-headless zookeeper redis-server gcc python3-dev ccache)
if [ "$set_name" = test ]; then
  pkgs+=(rabbitmq-server prometheus chromium chromium-driver iproute2 procps systemd)
fi

# the transactional sinks' tests and chaos workload write to a PostgreSQL server they start
if [ "$set_name" = test ]; then
  pkgs+=(postgresql)
fi
# the multi-lang tests run components in JavaScript (tests/fixtures/multilang/node)
if [ "$set_name" = test ]; then
  pkgs+=(nodejs)
fi
missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# A JRE from any source is fine if `java` is already 17+.
if [ ${#missing[@]} -gt 0 ] && command -v java >/dev/null 2>&1; then
  if java -version 2>&1 | grep -Eq 'version "(1[7-9]|[2-9][0-9])'; then
    missing=("${missing[@]/openjdk-17-jre-headless}")
  fi
fi
missing=($(printf '%s\n' "${missing[@]}" | grep -v '^$' || true))

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "gale: missing Debian packages: ${missing[*]}; run as root or: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "gale: installing Debian packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# rabbitmq-server and zookeeperd would start system services; the packages we use do not,
# and policy-rc.d keeps any postinst from starting one anyway.
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
trap 'rm -f /usr/sbin/policy-rc.d' EXIT
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "gale: installed ${missing[*]}"
