#!/usr/bin/env bash
# Sourced by the scripts of e2e/kind/: where things are, the pins (e2e/kind/versions.env, whose Kubernetes and etcd
# pins replace the process cluster's of e2e/cluster/versions.env here and, through BC_K8S_VERSION/BC_ETCD_VERSION, in
# e2e/cluster/build.sh and scripts/image/build.sh when the kind scripts call them),
# the project's Docker engine (scripts/docker/dockerd.sh) and the kind cluster's name and files.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
K8S_VERSION="$KIND_K8S_VERSION"
ETCD_VERSION="$KIND_ETCD_VERSION"
export BC_K8S_VERSION="$K8S_VERSION" BC_ETCD_VERSION="$ETCD_VERSION"
# shellcheck source=../../scripts/docker/dockerd.sh
source "$root/scripts/docker/dockerd.sh"
cache="${BC_CACHE:-$HOME/.cache/better-compute}"
name=bc-e2e
kind="$cache/kind/tools/kind"
kubeconfig="$cache/kind/$name.kubeconfig"
# kind runs `docker`: Debian's client (which matches Debian's engine), on the engine's socket (DOCKER_HOST).
export PATH="/usr/bin:$PATH"
