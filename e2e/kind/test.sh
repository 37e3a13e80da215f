#!/usr/bin/env bash
# `npm run test:kind`: the product installed into kind the way users install it, and the cluster suites on it, on two
# Kubernetes releases one after the other (one kind cluster bc-e2e at a time; ADR 0053):
#   - the tested release (the process cluster's, e2e/cluster/versions.env), both hand-off modes: the hand-off suite
#     (e2e/cluster/extender-agent.test.ts), the reservation suite (controller.test.ts, deploy/overlays/external on a
#     PostgreSQL of this host, which the pods reach at the kind network's gateway), DRA's hand-off on the installed
#     product (dra.test.ts), DRA to containers through CDI on both workers (dra-kind.test.ts) and the device-list
#     strategies through containerd's CDI (cdi.test.ts: auto with and without a node CDI spec, cdi-annotations);
#   - then the oldest supported release (e2e/kind/versions.env, OLDEST_*), device-plugin mode: the hand-off suite alone,
#     with 3 rounds.
# release.test.ts runs on kind too (`npm run test:kind -- e2e/cluster/release.test.ts`), but not in this lane: beside
# the cluster project on two cores its back-to-back pods start 20 s after their booking's start, past the 15 s bound.
# BC_KIND_RELEASE=tested|oldest runs that release alone, with its files or the test files given as arguments
# (`npm run test:kind -- e2e/cluster/x.test.ts`: the tested release alone unless BC_KIND_RELEASE says otherwise).
# For each release:
#   1. npm run kind:up (e2e/kind/up.sh): the cluster bc-e2e at that release, offline (a cluster of the other release
#      is deleted first);
#   2. npm run image (scripts/image/build.sh, kube-scheduler at that release), then `kind load image-archive` of the
#      product's images into every node;
#   3. vitest's cluster project against kind (BC_EXTERNAL_CLUSTER=1): the suites install deploy/ from the image with
#      `kubectl apply -k`, as on the process cluster. Tests that restart the process cluster's own components skip
#      themselves on kind. The hand-off suite's round test runs 10 rounds on the tested release (BC_HANDOFF_ROUNDS), 3 on
#      the oldest, not the process cluster's 50: kind proves that the installed image and deploy/ hand over across two
#      nodes; the rounds that hunt races run once.
#   4. checks that no image was pulled: every image in every node's containerd is one built here, and no kubelet
#      reported pulling one;
#   5. npm run kind:down, unless KEEP=1 (or the cluster existed before, at that release).
set -euo pipefail
if [[ -z "${BC_KIND_RELEASE:-}" && $# == 0 ]]; then
  t0=$SECONDS
  rc_tested=0 rc_oldest=0
  # The project's Docker engine stays up between the two (KEEP_DOCKERD): the second cluster starts in it.
  BC_KIND_RELEASE=tested KEEP_DOCKERD=1 bash "$0" || rc_tested=$?
  s_tested=$((SECONDS - t0))
  BC_KIND_RELEASE=oldest BC_HANDOFF_ROUNDS="${BC_OLDEST_HANDOFF_ROUNDS:-3}" bash "$0" e2e/cluster/extender-agent.test.ts || rc_oldest=$?
  printf '[test:kind] tested release: rc=%s in %ss; oldest release: rc=%s in %ss; %ss in all\n' \
    "$rc_tested" "$s_tested" "$rc_oldest" "$((SECONDS - t0 - s_tested))" "$((SECONDS - t0))" >&2
  ((rc_tested == 0 && rc_oldest == 0))
  exit
fi
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
t0=$SECONDS
say() { printf '[test:kind %s %4ds] %s\n' "$K8S_VERSION" "$((SECONDS - t0))" "$*" >&2; }

files=(e2e/cluster/extender-agent.test.ts e2e/cluster/controller.test.ts e2e/cluster/dra.test.ts e2e/cluster/dra-kind.test.ts e2e/cluster/cdi.test.ts)
[[ "$KIND_RELEASE" != oldest ]] || files=(e2e/cluster/extender-agent.test.ts)
if (($# > 0)); then files=("$@"); fi

# A cluster that was up before, at this release, is left up.
existed=0
if bc_docker version >/dev/null 2>&1 && [[ -x "$kind" ]] && "$kind" get clusters 2>/dev/null | grep -qx "$name" &&
  [[ "$(bc_docker exec "$name-control-plane" cat /kind/version 2>/dev/null)" == "$K8S_VERSION" ]]; then
  existed=1
fi
bash "$here/up.sh" >/dev/null
say "cluster up in $((SECONDS - t0))s"
down() { if [[ "$existed" == 0 && "${KEEP:-0}" != 1 ]]; then bash "$here/down.sh"; fi; }
trap down EXIT
kubectl="$(bash "$root/e2e/cluster/build.sh")/kubectl"
k() { "$kubectl" --kubeconfig "$kubeconfig" "$@"; }

s=$SECONDS
bash "$root/scripts/image/build.sh" >&2
version="$(node -p "require('$root/package.json').version")"
for t in "$cache/images/better-compute-$version.tar" "$cache/images/kube-scheduler-$K8S_VERSION.tar"; do
  "$kind" load image-archive "$t" --name "$name" >&2
done
say "product images built and loaded in $((SECONDS - s))s"

# Where pods reach this host (the host database of the external install): the kind network's IPv4 gateway.
gateway="$(bc_docker network inspect kind -f '{{range .IPAM.Config}}{{.Gateway}} {{end}}' | tr ' ' '\n' | grep -m1 '\.')"
workers="$(k get nodes -l '!node-role.kubernetes.io/control-plane' -o jsonpath='{.items[*].metadata.name}' | tr ' ' ',')"
s=$SECONDS
cd "$root"
rc=0
BC_EXTERNAL_CLUSTER=1 BC_HANDOFF_ROUNDS="${BC_HANDOFF_ROUNDS:-10}" BC_KUBECONFIG="$kubeconfig" BC_KUBECTL="$kubectl" BC_NODE_NAME="${workers%%,*}" \
  BC_GPU_NODES="$workers" BC_POD_GATEWAY="$gateway" BC_BUSYBOX_IMAGE=bettercompute.local/busybox:v1 \
  npx vitest run --project cluster "${files[@]}" || rc=$?
say "suites on kind: rc=$rc in $((SECONDS - s))s"

# No image pulled: the nodes' containerd hold only images built here, and no kubelet said "Pulling".
pulled=0
for node in $("$kind" get nodes --name "$name"); do
  foreign="$(bc_docker exec "$node" crictl images -o json | jq -r '.images[].repoTags[]?' |
    grep -v -e '^bettercompute\.local/' -e '^docker\.io/library/better-compute:' || true)"
  if [[ -n "$foreign" ]]; then
    say "node $node holds images not built here: $foreign"
    pulled=1
  fi
done
pulling="$(k get events -A --field-selector reason=Pulling -o name | wc -l)"
if ((pulling > 0)); then say "$pulling Pulling events"; pulled=1; fi
((pulled == 0)) && say "no image pulled: every image on the $(echo "$workers" | tr ',' '\n' | wc -l) workers and the control plane was built here; 0 Pulling events"
k get nodes -o wide >&2
((rc == 0 && pulled == 0))
