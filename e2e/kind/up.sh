#!/usr/bin/env bash
# `npm run kind:up`: a kind cluster bc-e2e (one control plane, two workers) on this machine, offline.
#   - the project's Docker engine (scripts/docker/dockerd.sh), started if it does not answer, and left running;
#   - kind, the node image and every image inside it built here (e2e/kind/build.sh; cached);
#   - `kind create cluster` with e2e/kind/kind-config.yaml; its kubeconfig at $BC_CACHE/kind/bc-e2e.kubeconfig.
# With KIND_NODE_IMAGE set (e.g. a released kindest/node:v1.34.x where a registry is reachable), that image is used and
# nothing is built but kind itself; kubeadm then takes its control-plane images from registry.k8s.io as usual, so the
# config's imageRepository patch is left out.
# The release is the one e2e/kind/lib.sh chose (BC_KIND_RELEASE: tested, the default, or oldest; ADR 0053).
# Prints the kubeconfig path on stdout. Idempotent: an existing cluster is kept when it runs this node image (so this
# release) and is healthy; one of another release is deleted first (one cluster bc-e2e at a time).
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
t0=$SECONDS
say() { printf '[kind:up %4ds] %s\n' "$((SECONDS - t0))" "$*" >&2; }

bc_dockerd_up detach
say "dockerd: $(bc_docker info --format '{{.ServerVersion}}, runtime {{.DefaultRuntime}}')"

config="$(mktemp)"
trap 'rm -f "$config"' EXIT
if [[ -n "${KIND_NODE_IMAGE:-}" ]]; then
  image="$KIND_NODE_IMAGE"
  # kind alone; the node image brings the rest.
  BC_KIND_TOOLS_ONLY=1 bash "$here/build.sh" >/dev/null
  # Without the imageRepository/etcd patch (the first one): the released image has registry.k8s.io's images.
  awk '/^  # Every control-plane image/ { skip = 1 } /^  # The hosts of this project/ { skip = 0 } !skip' \
    "$here/kind-config.yaml" | sed "s#KIND_NODE_IMAGE#$image#" >"$config"
else
  image="$(bash "$here/build.sh")"
  sed -e "s#KIND_NODE_IMAGE#$image#" -e "s#ETCD_IMAGE_TAG#${ETCD_VERSION#v}-0#" "$here/kind-config.yaml" >"$config"
fi
[[ -x "$kind" ]] || { say "ERROR: $kind missing after e2e/kind/build.sh"; exit 1; }

mkdir -p "$(dirname "$kubeconfig")"
kubectl="$(bash "$root/e2e/cluster/build.sh")/kubectl"
k() { "$kubectl" --kubeconfig "$kubeconfig" "$@"; }
# An existing cluster is kept when its API server is ready within 2 minutes and so is every kube-system pod within 2
# more. One left by a run that was killed, its nodes restarted with the engine, may be neither: its API server refuses
# even the admin until RBAC has synced, and a component may crash-loop (kube-scheduler denied its own kubeconfig, seen
# here). Such a cluster is deleted and created anew.
healthy() {
  local deadline=$((SECONDS + 120))
  until k get --raw /readyz >/dev/null 2>&1; do
    ((SECONDS < deadline)) || { say "its API server is not ready after 120s"; return 1; }
    sleep 2
  done
  k -n kube-system wait --for=condition=Ready pods --all --timeout=120s >/dev/null 2>&1 ||
    { say "kube-system pods not Ready after 120s: $(k -n kube-system get pods --no-headers 2>&1 | awk '{ split($2, r, "/") } $3 != "Running" || r[1] != r[2] { printf "%s %s; ", $1, $3 }')"; return 1; }
}
if "$kind" get clusters 2>/dev/null | grep -qx "$name"; then
  "$kind" get kubeconfig --name "$name" >"$kubeconfig"
  running="$(bc_docker inspect -f '{{.Config.Image}}' "$name-control-plane" 2>/dev/null || true)"
  if [[ "$running" != "$image" ]]; then
    say "cluster $name runs ${running:-an unknown image}, not $image ($K8S_VERSION); deleting it"
    "$kind" delete cluster --name "$name" >&2
  elif healthy; then
    say "cluster $name exists and is healthy; kept"
  else
    say "cluster $name exists and is not healthy; deleting it"
    "$kind" delete cluster --name "$name" >&2
  fi
fi
if ! "$kind" get clusters 2>/dev/null | grep -qx "$name"; then
  say "kind create cluster $name on $image (Kubernetes $K8S_VERSION) ..."
  "$kind" create cluster --config "$config" --kubeconfig "$kubeconfig" --wait 300s >&2
  "$kind" get kubeconfig --name "$name" >"$kubeconfig"
fi
k wait --for=condition=Ready nodes --all --timeout=300s >&2
k get nodes -o wide >&2
say "ready; kubectl --kubeconfig $kubeconfig"
echo "$kubeconfig"
