#!/usr/bin/env bash
# Sourced by the scripts of e2e/kind/: where things are, the pins, the project's Docker engine
# (scripts/docker/dockerd.sh) and the kind cluster's name and files.
#
# The release kind runs (ADR 0053), chosen by BC_KIND_RELEASE:
#   tested (default)  the process cluster's pins, e2e/cluster/versions.env (K8S_VERSION, ETCD_VERSION), with
#                     e2e/kind/versions.env's COREDNS_VERSION and PAUSE_VERSION: the main suite, both hand-off modes;
#   oldest            e2e/kind/versions.env's OLDEST_* pins: the oldest supported release, device-plugin mode only.
# Either way the Kubernetes and etcd pins become K8S_VERSION and ETCD_VERSION here and are exported as
# BC_K8S_VERSION/BC_ETCD_VERSION, which e2e/cluster/build.sh and scripts/image/build.sh honour when the kind scripts
# call them. kind itself, crictl, flannel, the local-path provisioner and containerd (e2e/cluster/versions.env's .deb)
# are the same for both.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=../cluster/versions.env
source "$root/e2e/cluster/versions.env"
# shellcheck source=versions.env
source "$here/versions.env"
KIND_RELEASE="${BC_KIND_RELEASE:-tested}"
case "$KIND_RELEASE" in
  tested) ;;
  oldest)
    K8S_VERSION="$OLDEST_K8S_VERSION"
    ETCD_VERSION="$OLDEST_ETCD_VERSION"
    COREDNS_VERSION="$OLDEST_COREDNS_VERSION"
    PAUSE_VERSION="$OLDEST_PAUSE_VERSION"
    ;;
  *) echo "e2e/kind: BC_KIND_RELEASE is tested or oldest, not '$KIND_RELEASE'" >&2; exit 2 ;;
esac
export BC_KIND_RELEASE="$KIND_RELEASE" BC_K8S_VERSION="$K8S_VERSION" BC_ETCD_VERSION="$ETCD_VERSION"
# shellcheck source=../../scripts/docker/dockerd.sh
source "$root/scripts/docker/dockerd.sh"
cache="${BC_CACHE:-$HOME/.cache/better-compute}"
name=bc-e2e
kind="$cache/kind/tools/kind"
kubeconfig="$cache/kind/$name.kubeconfig"
# kind runs `docker`: Debian's client (which matches Debian's engine), on the engine's socket (DOCKER_HOST).
export PATH="/usr/bin:$PATH"
