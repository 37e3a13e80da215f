#!/usr/bin/env bash
# Imports the images that scripts/image/build.sh saved into a containerd, namespace k8s.io (the kubelet's), unpacked
# for the overlayfs snapshotter:
#   $BC_CACHE/images/better-compute-<package.json version>.tar     (required)
#   $BC_CACHE/images/kube-scheduler-<K8S_VERSION>.tar              (when it exists)
# or the tarballs given after the socket.
#
# Usage: scripts/image/load.sh CONTAINERD_SOCKET [TARBALL...]
# Prints each image reference imported on stdout.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
sock="${1:?usage: load.sh CONTAINERD_SOCKET [TARBALL...]}"
shift
cache="${BC_CACHE:-$HOME/.cache/better-compute}"
tars=("$@")
if ((${#tars[@]} == 0)); then
  version="$(node -p "require('$root/package.json').version")"
  # shellcheck source=../../e2e/cluster/versions.env
  source "$root/e2e/cluster/versions.env"
  # kind passes its own release (e2e/kind/lib.sh), as to e2e/cluster/build.sh.
  K8S_VERSION="${BC_K8S_VERSION:-$K8S_VERSION}"
  app="$cache/images/better-compute-$version.tar"
  [[ -f "$app" ]] || { echo "load.sh: $app missing (npm run image)" >&2; exit 1; }
  tars=("$app")
  sched="$cache/images/kube-scheduler-$K8S_VERSION.tar"
  if [[ -f "$sched" ]]; then tars+=("$sched"); else echo "load.sh: $sched missing, not loaded" >&2; fi
fi
for t in "${tars[@]}"; do
  [[ -f "$t" ]] || { echo "load.sh: $t missing" >&2; exit 1; }
  s=$SECONDS
  ctr -a "$sock" -n k8s.io images import --snapshotter overlayfs "$t" | sed -n 's/^unpacking \([^ ]*\) .*/\1/p'
  echo "load.sh: imported $t in $((SECONDS - s))s" >&2
done
