#!/usr/bin/env bash
# Runs the cluster suites (the vitest project `cluster`) on a kind cluster instead of the local one of e2e/cluster.
# Needs a running Docker engine and, for kind's node image, a reachable image registry (or KIND_NODE_IMAGE naming a
# node image already loaded into Docker). kind itself is built from the Go module proxy and cached.
#
#   e2e/kind/run.sh            create the kind cluster bc-e2e (unless it exists), run the suites, delete it
#   KEEP=1 e2e/kind/run.sh     leave the cluster running afterwards
#   e2e/kind/run.sh -- ARGS    extra arguments for vitest (e.g. a test file filter)
#
# Tests that restart components of the local cluster (kube-scheduler with a new config, the kubelet) are skipped on kind.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
KIND_VERSION="${KIND_VERSION:-v0.30.0}"
cache="${BC_CACHE:-$HOME/.cache/better-compute}"
name=bc-e2e

command -v docker >/dev/null || { echo "run.sh: docker is needed" >&2; exit 1; }
docker info >/dev/null 2>&1 || { echo "run.sh: the Docker engine does not answer (start dockerd)" >&2; exit 1; }

kind="$cache/kind-$KIND_VERSION/kind"
if [[ ! -x "$kind" ]]; then
  mkdir -p "$(dirname "$kind")"
  GOBIN="$(dirname "$kind")" GOFLAGS=-buildvcs=false nice -n 10 go install "sigs.k8s.io/kind@$KIND_VERSION"
fi

# kubectl: the one built for the local cluster at the pinned release, else one on PATH.
kubectl_bin="$(bash "$root/e2e/cluster/build.sh" 2>/dev/null)/kubectl" || true
[[ -x "$kubectl_bin" ]] || kubectl_bin="$(command -v kubectl)" || { echo "run.sh: no kubectl" >&2; exit 1; }

config="$here/kind-config.yaml"
if [[ -n "${KIND_NODE_IMAGE:-}" ]]; then
  config="$(mktemp)"
  sed "s#image: kindest/node:.*#image: $KIND_NODE_IMAGE#" "$here/kind-config.yaml" > "$config"
fi

created=0
if ! "$kind" get clusters 2>/dev/null | grep -qx "$name"; then
  "$kind" create cluster --config "$config" --wait 180s
  created=1
fi
cleanup() {
  if [[ "$created" == 1 && "${KEEP:-0}" != 1 ]]; then "$kind" delete cluster --name "$name"; fi
}
trap cleanup EXIT

kubeconfig="$cache/kind-$name.kubeconfig"
"$kind" get kubeconfig --name "$name" > "$kubeconfig"

# The same locally built busybox image as on the local cluster: loaded, not pulled.
img_dir="$(mktemp -d)"
bash "$root/e2e/cluster/images/build-images.sh" "$img_dir"
"$kind" load image-archive "$img_dir/busybox.tar" --name "$name"
rm -rf "$img_dir"

shift_args=()
if [[ "${1:-}" == "--" ]]; then shift; shift_args=("$@"); fi
cd "$root"
BC_EXTERNAL_CLUSTER=1 BC_KUBECONFIG="$kubeconfig" BC_KUBECTL="$kubectl_bin" BC_NODE_NAME="$name-worker" \
  BC_BUSYBOX_IMAGE=bettercompute.local/busybox:v1 \
  npx vitest run --project cluster "${shift_args[@]}"
