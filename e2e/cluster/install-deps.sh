#!/usr/bin/env bash
# Installs the Debian packages the test cluster needs, if any is missing: runc (the runtime under containerd),
# the CNI plugins, iptables and iproute2 (pod network), busybox-static (the test image), openssl (certificates), curl,
# conntrack/socat that the kubelet looks for, and chromium (the GPU calendar's browser test,
# test/db/calendar-browser.test.ts). Runs apt-get update only when something must be installed.
# Then the process cluster's containerd (versions.env: CONTAINERD_DEB_*): Debian forky's .deb, downloaded once from
# the Debian mirror (BC_DEBIAN_MIRROR), checked against its pinned sha256 and unpacked (not installed) into
# $BC_CACHE/containerd-<version>/, where lib.sh runs it from. Bookworm's containerd 1.6 stays the host's (Docker's).
# `install-deps.sh containerd` does only that, and prints the directory (kind's node image takes its binaries from it,
# e2e/kind/build.sh).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"

containerd_dir="${BC_CACHE:-$HOME/.cache/better-compute}/containerd-$CONTAINERD_DEB_VERSION"
install_containerd() {
  [[ -x "$containerd_dir/usr/bin/containerd" && -f "$containerd_dir/.sha256" &&
    "$(cat "$containerd_dir/.sha256")" == "$CONTAINERD_DEB_SHA256" ]] && return 0
  local mirror="${BC_DEBIAN_MIRROR:-http://deb.debian.org/debian}" deb
  deb="containerd_${CONTAINERD_DEB_VERSION}_amd64.deb"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT # tmp is global: the trap runs after this function returns
  echo "install-deps.sh: downloading $deb into $containerd_dir" >&2
  curl -fsS --retry 3 --max-time 300 -o "$tmp/$deb" "$mirror/pool/main/c/containerd/$deb"
  echo "$CONTAINERD_DEB_SHA256  $tmp/$deb" | sha256sum --quiet -c - ||
    { echo "install-deps.sh: $deb does not have the pinned sha256" >&2; exit 1; }
  dpkg-deb -x "$tmp/$deb" "$tmp/root"
  rm -rf "$containerd_dir"
  mkdir -p "$(dirname "$containerd_dir")"
  mv "$tmp/root" "$containerd_dir"
  echo "$CONTAINERD_DEB_SHA256" >"$containerd_dir/.sha256"
}

if [[ "${1:-}" == containerd ]]; then
  install_containerd
  echo "$containerd_dir"
  exit 0
fi

pkgs=(runc containernetworking-plugins iptables iproute2 busybox-static openssl curl conntrack socat util-linux mount chromium)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]} > 0)); then
  command -v apt-get >/dev/null || { echo "install-deps.sh: missing ${missing[*]} and no apt-get" >&2; exit 1; }
  sudo=""; [[ "$(id -u)" == 0 ]] || sudo=sudo
  echo "install-deps.sh: installing ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
install_containerd
