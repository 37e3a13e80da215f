#!/usr/bin/env bash
# `npm run kind:down`: deletes the kind cluster bc-e2e, then stops the project's Docker engine when nothing else runs
# in it (KEEP_DOCKERD=1 keeps it). The built images stay cached in the engine for the next kind:up.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
if bc_docker version >/dev/null 2>&1; then
  if [[ -x "$kind" ]] && "$kind" get clusters 2>/dev/null | grep -qx "$name"; then
    "$kind" delete cluster --name "$name" >&2
  fi
  if [[ "${KEEP_DOCKERD:-0}" != 1 && -z "$(bc_docker ps -q)" ]]; then bc_dockerd_down any; fi
fi
rm -f "$kubeconfig"
