#!/usr/bin/env bash
# Sourced by the scripts of e2e/kind/: where things are, the pins (e2e/cluster/versions.env, e2e/kind/versions.env),
# the project's Docker engine (scripts/docker/dockerd.sh) and the kind cluster's name and files.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=../cluster/versions.env
source "$root/e2e/cluster/versions.env"
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=../../scripts/docker/dockerd.sh
source "$root/scripts/docker/dockerd.sh"
cache="${BC_CACHE:-$HOME/.cache/better-compute}"
name=bc-e2e
kind="$cache/kind/tools/kind"
kubeconfig="$cache/kind/$name.kubeconfig"
# kind runs `docker`: Debian's client (which matches Debian's engine), on the engine's socket (DOCKER_HOST).
export PATH="/usr/bin:$PATH"
