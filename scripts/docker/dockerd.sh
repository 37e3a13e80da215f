#!/usr/bin/env bash
# The project's own Docker engine, shared by `npm run image` (scripts/image/build.sh) and kind (e2e/kind/): Debian's
# docker.io, its own socket ($BC_DOCKER_SOCK, default /run/better-compute-docker.sock), data under $BC_CACHE/docker.
# It never touches the host's iptables or default bridge (--iptables=false --bridge=none): kind's nodes reach each
# other on a user-defined bridge, and the API server is published on loopback through docker-proxy.
#
# Where root lacks CAP_SYS_RESOURCE (these machines: see shared/notes/machine-facts.md), `docker run --privileged`
# fails; the engine then runs containers through scripts/docker/runc-wrapper, copied under $BC_CACHE so that a clone
# that is deleted later does not take the engine's runtime with it.
#
# Sourced:  bc_dockerd_up [detach]   start it unless it answers (with `detach`, it outlives the calling script);
#                                    sets BC_DOCKERD_PID when this call started it
#           bc_dockerd_down          stop the engine of BC_DOCKERD_PID, if this script started one
#           bc_docker ARGS...        Debian's docker client on that socket
# Run:      scripts/docker/dockerd.sh up | down | status
bc_docker_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bc_docker_cache="${BC_CACHE:-$HOME/.cache/better-compute}"
BC_DOCKER_SOCK="${BC_DOCKER_SOCK:-/run/better-compute-docker.sock}"
export DOCKER_HOST="unix://$BC_DOCKER_SOCK"
BC_DOCKERD_PID=""
bc_docker_sudo=""
[[ "$(id -u)" == 0 ]] || bc_docker_sudo=sudo

bc_docker_log() { printf '[dockerd] %s\n' "$*" >&2; }

# Debian's client, which matches Debian's dockerd (another docker on PATH may be a newer one).
bc_docker() {
  local bin=/usr/bin/docker
  [[ -x "$bin" ]] || bin="$(command -v docker)"
  "$bin" -H "$DOCKER_HOST" "$@"
}

bc_docker_packages() {
  local p missing=()
  for p in docker.io jq "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  ((${#missing[@]} == 0)) && return 0
  command -v apt-get >/dev/null || { bc_docker_log "missing ${missing[*]} and no apt-get"; return 1; }
  bc_docker_log "installing ${missing[*]}"
  $bc_docker_sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $bc_docker_sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# True when the bounding set lacks CAP_SYS_RESOURCE (capability 24).
bc_docker_lacks_sys_resource() {
  local bnd
  bnd="$(awk '/^CapBnd:/ { print $2 }' /proc/self/status)"
  (((0x$bnd >> 24 & 1) == 0))
}

bc_dockerd_up() {
  local detach="${1:-}"
  if bc_docker version >/dev/null 2>&1; then return 0; fi
  bc_docker_packages || return 1
  mkdir -p "$bc_docker_cache/docker"
  local runtime_args=()
  if bc_docker_lacks_sys_resource; then
    local wrapper="$bc_docker_cache/docker-runtime/runc-wrapper"
    mkdir -p "$(dirname "$wrapper")"
    install -m 0755 "$bc_docker_root/scripts/docker/runc-wrapper" "$wrapper"
    runtime_args=(--add-runtime "bc-runc=$wrapper" --default-runtime bc-runc)
  fi
  local cmd=(dockerd --data-root "$bc_docker_cache/docker" --exec-root /run/better-compute-docker
    --pidfile /run/better-compute-docker.pid -H "unix://$BC_DOCKER_SOCK"
    --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false --bridge=none
    "${runtime_args[@]}" --log-level=warn)
  # The engine does not inherit the build scripts' lock descriptors (7, 8, 9), or it would hold their locks.
  if [[ "$detach" == detach ]]; then
    $bc_docker_sudo setsid nohup "${cmd[@]}" >"$bc_docker_cache/dockerd.log" 2>&1 </dev/null 7>&- 8>&- 9>&- &
  else
    $bc_docker_sudo "${cmd[@]}" >"$bc_docker_cache/dockerd.log" 2>&1 7>&- 8>&- 9>&- &
  fi
  BC_DOCKERD_PID=$!
  local i
  for ((i = 0; i < 120; i++)); do
    bc_docker version >/dev/null 2>&1 && return 0
    if ! kill -0 "$BC_DOCKERD_PID" 2>/dev/null; then
      tail -20 "$bc_docker_cache/dockerd.log" >&2
      bc_docker_log "dockerd exited"
      return 1
    fi
    sleep 0.5
  done
  tail -20 "$bc_docker_cache/dockerd.log" >&2
  bc_docker_log "dockerd did not answer on $BC_DOCKER_SOCK within 60s"
  return 1
}

# Stops the engine this shell started (BC_DOCKERD_PID), or with `any` the one in the pid file.
bc_dockerd_down() {
  local pid="$BC_DOCKERD_PID"
  [[ "${1:-}" == any && -z "$pid" && -f /run/better-compute-docker.pid ]] && pid="$(cat /run/better-compute-docker.pid)"
  [[ -n "$pid" ]] || return 0
  bc_docker_log "stopping dockerd (pid $pid)"
  $bc_docker_sudo kill -TERM "$pid" 2>/dev/null || true
  local i
  for ((i = 0; i < 60; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  kill -0 "$pid" 2>/dev/null && $bc_docker_sudo kill -KILL "$pid" 2>/dev/null || true
  BC_DOCKERD_PID=""
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  set -euo pipefail
  case "${1:-}" in
    up) bc_dockerd_up detach; bc_docker version --format 'dockerd {{.Server.Version}} on '"$BC_DOCKER_SOCK" ;;
    down) bc_dockerd_down any ;;
    status) bc_docker info --format '{{.ServerVersion}} runtime={{.DefaultRuntime}} containers={{.ContainersRunning}}' ;;
    *) echo "usage: dockerd.sh up|down|status" >&2; exit 2 ;;
  esac
fi
