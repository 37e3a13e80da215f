#!/usr/bin/env bash
# Installs the Debian packages the test cluster needs, if any is missing: containerd and runc (the kubelet's runtime),
# the CNI plugins, iptables and iproute2 (pod network), busybox-static (the test image), openssl (certificates), curl,
# conntrack/socat that the kubelet looks for, and chromium (the GPU calendar's browser test,
# test/db/calendar-browser.test.ts). Runs apt-get update only when something must be installed.
set -euo pipefail
pkgs=(containerd runc containernetworking-plugins iptables iproute2 busybox-static openssl curl conntrack socat util-linux mount chromium)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
((${#missing[@]} == 0)) && exit 0
command -v apt-get >/dev/null || { echo "install-deps.sh: missing ${missing[*]} and no apt-get" >&2; exit 1; }
sudo=""; [[ "$(id -u)" == 0 ]] || sudo=sudo
echo "install-deps.sh: installing ${missing[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
