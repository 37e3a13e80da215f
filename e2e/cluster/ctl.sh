#!/usr/bin/env bash
# Controls single components of a running test cluster.
#   ctl.sh status                              which components run (pid) and where the state is
#   ctl.sh env                                 prints the export lines of the running cluster
#   ctl.sh stop|start|restart COMPONENT        COMPONENT: etcd kube-apiserver kube-controller-manager kube-scheduler
#                                              containerd kubelet
#   ctl.sh pause|resume COMPONENT              freezes a running component (SIGSTOP) or lets it go on (SIGCONT): it
#                                              keeps its sockets and connections, and does nothing meanwhile
#   ctl.sh restart kube-scheduler FILE         installs FILE as the scheduler's KubeSchedulerConfiguration, restarts
#   ctl.sh render-scheduler-config FILE        prints FILE as the scheduler will get it (__KUBECONFIG__ replaced;
#                                              clientConnection and leaderElection added when missing)
#   ctl.sh acquire PID / release PID           used by the test runs' global setup: acquire brings the cluster up
#                                              unless it is, and records PID as a user; release forgets PID and,
#                                              when no live user is left, takes down a cluster that a test run
#                                              started (never one started with `npm run cluster:up`), unless
#                                              BC_KEEP_CLUSTER=1 (which also hands the cluster over to you)
set -euo pipefail
# shellcheck source=lib.sh
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"

render_scheduler_config() {
  local src="$1"
  [[ -f "$src" ]] || bc_die "no scheduler config file $src"
  sed "s#__KUBECONFIG__#$BC_CLUSTER_DIR/scheduler.kubeconfig#g" "$src"
  grep -q '^clientConnection:' "$src" || printf '\nclientConnection:\n  kubeconfig: %s\n' "$BC_CLUSTER_DIR/scheduler.kubeconfig"
  grep -q '^leaderElection:' "$src" || printf '\nleaderElection:\n  leaderElect: false\n'
}

known() {
  local c
  for c in "${BC_COMPONENTS[@]}"; do [[ "$c" == "$1" ]] && return 0; done
  bc_die "unknown component '$1' (one of: ${BC_COMPONENTS[*]})"
}

cmd="${1:-status}"
case "$cmd" in
  render-scheduler-config)
    render_scheduler_config "${2:?usage: ctl.sh render-scheduler-config FILE}"
    ;;
  status)
    echo "state: $BC_CLUSTER_DIR"
    for c in "${BC_COMPONENTS[@]}"; do
      if pid="$(bc_pid "$c")"; then echo "$c: running (pid $pid)"; else echo "$c: stopped"; fi
    done
    ;;
  env)
    [[ -f "$BC_CLUSTER_DIR/env" ]] || bc_die "no cluster state in $BC_CLUSTER_DIR"
    cat "$BC_CLUSTER_DIR/env"
    ;;
  acquire)
    owner="${2:?usage: ctl.sh acquire PID}"
    bc_lock
    if ! bc_all_up || ! bc_at_pinned_release; then
      "$BC_HERE/up.sh" >/dev/null
      touch "$BC_CLUSTER_DIR/started-by-test"
    else
      bc_log "reusing the cluster that is up in $BC_CLUSTER_DIR"
    fi
    mkdir -p "$BC_CLUSTER_DIR/users"
    touch "$BC_CLUSTER_DIR/users/$owner"
    ;;
  release)
    owner="${2:?usage: ctl.sh release PID}"
    bc_lock
    [[ -d "$BC_CLUSTER_DIR/users" ]] || exit 0
    rm -f "$BC_CLUSTER_DIR/users/$owner"
    for u in "$BC_CLUSTER_DIR"/users/*; do
      [[ -e "$u" ]] || continue
      kill -0 "$(basename "$u")" 2>/dev/null || rm -f "$u"
    done
    if [[ -n "$(ls -A "$BC_CLUSTER_DIR/users")" ]]; then
      bc_log "other test runs still use the cluster; leaving it up"
    elif [[ -f "$BC_CLUSTER_DIR/started-by-test" ]]; then
      if [[ "${BC_KEEP_CLUSTER:-0}" == 1 ]]; then
        rm -f "$BC_CLUSTER_DIR/started-by-test"
        bc_log "BC_KEEP_CLUSTER=1: leaving the cluster up (npm run cluster:down takes it down)"
      else
        "$BC_HERE/down.sh"
      fi
    fi
    ;;
  stop | start | restart)
    comp="${2:?usage: ctl.sh $cmd COMPONENT}"
    known "$comp"
    [[ -d "$BC_CLUSTER_DIR" ]] || bc_die "no cluster state in $BC_CLUSTER_DIR (run npm run cluster:up)"
    bc_lock
    if [[ "$comp" == kube-scheduler && -n "${3:-}" ]]; then
      [[ "$cmd" != stop ]] || bc_die "a config file goes with start or restart"
      new="$(mktemp)"
      render_scheduler_config "$3" > "$new"
      mv "$new" "$BC_SCHEDULER_CONFIG_FILE"
    fi
    if [[ "$cmd" != start ]]; then bc_stop "$comp"; fi
    if [[ "$cmd" != stop ]]; then
      if bc_running "$comp"; then bc_log "$comp already running"; else bc_start "$comp"; fi
    fi
    ;;
  pause | resume)
    comp="${2:?usage: ctl.sh $cmd COMPONENT}"
    known "$comp"
    pid="$(bc_pid "$comp")" || bc_die "$comp is not running"
    if [[ "$cmd" == pause ]]; then kill -STOP "$pid"; else kill -CONT "$pid"; fi
    ;;
  *)
    bc_die "unknown command '$cmd' (status, env, stop, start, restart, pause, resume, render-scheduler-config, acquire, release)"
    ;;
esac
