# shellcheck shell=bash
# Shared settings and functions of the test cluster scripts (up.sh, down.sh, ctl.sh). Source it; it sets no shell options.
#
# Everything listens on 127.0.0.1, except the API server, which pods reach through the `kubernetes` Service: it listens on
# all addresses, and BC-INPUT lets only loopback and the pod bridge in. Ports and paths can be overridden with the BC_*
# variables below.

BC_HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$BC_HERE/versions.env"

BC_CACHE="${BC_CACHE:-$HOME/.cache/better-compute}"
# The state directory of the running cluster: certificates, kubeconfigs, configs, data, logs and pid files.
BC_CLUSTER_DIR="${BC_CLUSTER_DIR:-$BC_CACHE/cluster}"
BC_BIN="${BC_BIN:-$BC_CACHE/k8s-$K8S_VERSION/bin}"

BC_ETCD_PORT="${BC_ETCD_PORT:-2379}"
BC_ETCD_PEER_PORT="${BC_ETCD_PEER_PORT:-2380}"
BC_APISERVER_PORT="${BC_APISERVER_PORT:-6443}"
BC_KCM_PORT="${BC_KCM_PORT:-10257}"
BC_SCHEDULER_PORT="${BC_SCHEDULER_PORT:-10259}"
BC_KUBELET_PORT="${BC_KUBELET_PORT:-10250}"
BC_KUBELET_HEALTHZ_PORT="${BC_KUBELET_HEALTHZ_PORT:-10248}"
# The real node's name. The kubelet refuses a loopback --node-ip, but a --hostname-override that is an IP becomes the
# node's InternalIP and Hostname, so the API server reaches the kubelet (logs, exec) on loopback.
BC_NODE_NAME="${BC_NODE_NAME:-127.0.0.1}"
BC_POD_CIDR="${BC_POD_CIDR:-10.244.0.0/24}"
# The host's address on the pod bridge: the pods' gateway, and the API server's advertised address (the endpoint of the
# `kubernetes` Service that kube-proxy sends pods to).
BC_POD_GATEWAY="${BC_POD_GATEWAY:-${BC_POD_CIDR%.*}.1}"
BC_KUBE_PROXY_HEALTHZ_PORT="${BC_KUBE_PROXY_HEALTHZ_PORT:-10256}"
BC_KUBE_PROXY_METRICS_PORT="${BC_KUBE_PROXY_METRICS_PORT:-10249}"
BC_SERVICE_CIDR="${BC_SERVICE_CIDR:-10.96.0.0/24}"
# Simulated nodes (Node objects without a kubelet) never renew a Lease or their status. The node lifecycle controller
# only marks a node unreachable after this grace period, so they stay Ready for the whole test run. The price: a real
# kubelet that dies is not noticed for that long either. Tests flip readiness by patching the Ready condition.
BC_NODE_MONITOR_GRACE="${BC_NODE_MONITOR_GRACE:-6h}"

BC_PAUSE_IMAGE=bettercompute.local/pause:v1
BC_BUSYBOX_IMAGE=bettercompute.local/busybox:v1

d="$BC_CLUSTER_DIR"
BC_PKI="$d/pki"
BC_LOGS="$d/logs"
BC_PIDS="$d/pids"
BC_KUBECONFIG="$d/admin.kubeconfig"
BC_SCHEDULER_CONFIG_FILE="$d/scheduler/config.yaml"
BC_CONTAINERD_DIR="$d/containerd"
BC_CONTAINERD_SOCK="$BC_CONTAINERD_DIR/containerd.sock"
BC_KUBELET_DIR="$d/kubelet"
BC_KUBELET_ROOT="$BC_KUBELET_DIR/root"
BC_CNI_DIR="$d/cni"
BC_CNI_BRIDGE=bc-cni0
BC_CNI_BIN_DIR="${BC_CNI_BIN_DIR:-/usr/lib/cni}"
# containerd 2 from the pinned .deb that install-deps.sh unpacks (versions.env), not the host's: containerd, ctr and
# containerd-shim-runc-v2 (which containerd finds on PATH; bc_start_containerd puts this directory first).
BC_CONTAINERD_BIN_DIR="${BC_CONTAINERD_BIN_DIR:-$BC_CACHE/containerd-$CONTAINERD_DEB_VERSION/usr/bin}"
unset d

# Components in start order; stop goes the other way.
BC_COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-proxy)

bc_log() { echo "[cluster $(date +%H:%M:%S)] $*" >&2; }
bc_die() { bc_log "ERROR: $*"; exit 1; }

# bc_alive PID: the process exists and is not a zombie (our daemons are reparented to PID 1, which may reap late).
bc_alive() {
  local stat
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
  stat="${stat##*) }"
  [[ "${stat:0:1}" != Z ]]
}

bc_pid() { # prints the pid of a running component, or fails (also when the pid now belongs to another program)
  local f="$BC_PIDS/$1.pid" pid exe
  [[ -f "$f" ]] || return 1
  pid="$(cat "$f")"
  [[ -n "$pid" ]] && bc_alive "$pid" || return 1
  exe="$(tr '\0' '\n' < "/proc/$pid/cmdline" 2>/dev/null | head -n 1)"
  [[ "$(basename "$exe")" == "$1" ]] || return 1
  echo "$pid"
}

# bc_lock: serialises up, down and the test runs' acquire/release (one cluster per state dir, shared by concurrent
# test runs). A no-op in a child of a process that holds it (BC_LOCK_HELD=1).
bc_lock() {
  [[ "${BC_LOCK_HELD:-0}" == 1 ]] && return 0
  mkdir -p "$BC_CACHE"
  exec 8>"$BC_CACHE/cluster.lock"
  flock 8
  export BC_LOCK_HELD=1
}

bc_running() { bc_pid "$1" >/dev/null; }

# bc_spawn NAME CMD...: runs CMD in its own session in the background, output appended to logs/NAME.log
bc_spawn() {
  local name="$1"; shift
  mkdir -p "$BC_LOGS" "$BC_PIDS"
  echo "--- $(date -Is) starting: $*" >> "$BC_LOGS/$name.log"
  setsid "$@" >> "$BC_LOGS/$name.log" 2>&1 < /dev/null 8>&- 9>&- &
  local pid=$! i exe
  echo "$pid" > "$BC_PIDS/$name.pid"
  # Until the fork has exec'd setsid and setsid the program, /proc shows another program (bc_pid would say "not
  # running"): wait for the exec.
  for ((i = 0; i < 100; i++)); do
    # A program that exits at once leaves no /proc entry to read: bc_wait_for then reports it with its log.
    exe="$({ tr '\0' '\n' < "/proc/$pid/cmdline"; } 2>/dev/null | head -n 1)" || true
    [[ "$(basename "$exe")" == "$(basename "$1")" ]] && break
    bc_alive "$pid" || break
    sleep 0.05
  done
}

# bc_stop NAME [TIMEOUT_S]: SIGTERM, then SIGKILL after the timeout
bc_stop() {
  local name="$1" timeout="${2:-20}" pid i
  pid="$(bc_pid "$name")" || { rm -f "$BC_PIDS/$name.pid"; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < timeout * 10; i++)); do
    bc_alive "$pid" || break
    sleep 0.1
  done
  if bc_alive "$pid"; then
    bc_log "$name (pid $pid) did not stop on SIGTERM; killing it"
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.2
  fi
  rm -f "$BC_PIDS/$name.pid"
}

# bc_wait_for DESCRIPTION TIMEOUT_S COMPONENT CMD...: polls CMD until it succeeds; fails early if COMPONENT died
bc_wait_for() {
  local what="$1" timeout="$2" comp="$3"; shift 3
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if [[ -n "$comp" ]] && ! bc_running "$comp"; then
      bc_log "$comp exited while waiting for $what; last log lines:"
      tail -n 30 "$BC_LOGS/$comp.log" >&2 || true
      return 1
    fi
    if ((SECONDS >= deadline)); then
      bc_log "timed out after ${timeout}s waiting for $what; last log lines of $comp:"
      [[ -n "$comp" ]] && tail -n 30 "$BC_LOGS/$comp.log" >&2
      return 1
    fi
    sleep 0.3
  done
}

# bc_all_up: every component runs and the API server is ready.
bc_all_up() {
  local c
  [[ -d "$BC_CLUSTER_DIR" ]] || return 1
  for c in "${BC_COMPONENTS[@]}"; do bc_running "$c" || return 1; done
  bc_https_ok "https://127.0.0.1:$BC_APISERVER_PORT/readyz" >/dev/null 2>&1
}

# bc_at_pinned_release: the cluster in BC_CLUSTER_DIR was brought up at K8S_VERSION (up.sh writes it to env). A cluster
# brought up from another checkout at another release is not reused.
bc_at_pinned_release() {
  grep -qxF "export BC_CLUSTER_K8S_VERSION='$K8S_VERSION'" "$BC_CLUSTER_DIR/env" 2>/dev/null
}

# bc_live_users: prints the test runs (pids in users/, see ctl.sh acquire) that still use the cluster.
bc_live_users() {
  local u
  for u in "$BC_CLUSTER_DIR"/users/*; do
    [[ -e "$u" ]] && kill -0 "$(basename "$u")" 2>/dev/null && basename "$u"
  done
  return 0
}

bc_kubectl() { "$BC_BIN/kubectl" --kubeconfig "$BC_KUBECONFIG" "$@"; }
bc_ctr() { "$BC_CONTAINERD_BIN_DIR/ctr" --address "$BC_CONTAINERD_SOCK" --namespace k8s.io "$@"; }

bc_port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

bc_https_ok() { # bc_https_ok URL: a 200 from a component's health endpoint, trusting our CA
  curl -fsS --max-time 3 --cacert "$BC_PKI/ca.crt" --cert "$BC_PKI/admin.crt" --key "$BC_PKI/admin.key" "$1"
}
bc_https_ok_insecure() { curl -fsSk --max-time 3 "$1"; }

# ---------------------------------------------------------------------------------------------------------------------
# Start functions, one per component. Each starts the process and waits until it is healthy.

bc_start_etcd() {
  mkdir -p "$BC_CLUSTER_DIR/etcd"
  chmod 700 "$BC_CLUSTER_DIR/etcd"
  bc_spawn etcd "$BC_BIN/etcd" \
    --name bc \
    --data-dir "$BC_CLUSTER_DIR/etcd/data" \
    --listen-client-urls "http://127.0.0.1:$BC_ETCD_PORT" \
    --advertise-client-urls "http://127.0.0.1:$BC_ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$BC_ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$BC_ETCD_PEER_PORT" \
    --initial-cluster "bc=http://127.0.0.1:$BC_ETCD_PEER_PORT" \
    --initial-cluster-state new \
    --unsafe-no-fsync \
    --quota-backend-bytes 2147483648 \
    --log-level warn
  bc_wait_for "etcd health" 60 etcd curl -fsS --max-time 2 "http://127.0.0.1:$BC_ETCD_PORT/health"
}

bc_start_kube_apiserver() {
  bc_spawn kube-apiserver "$BC_BIN/kube-apiserver" \
    --bind-address 0.0.0.0 \
    --advertise-address "$BC_POD_GATEWAY" \
    --secure-port "$BC_APISERVER_PORT" \
    --etcd-servers "http://127.0.0.1:$BC_ETCD_PORT" \
    --tls-cert-file "$BC_PKI/apiserver.crt" \
    --tls-private-key-file "$BC_PKI/apiserver.key" \
    --client-ca-file "$BC_PKI/ca.crt" \
    --kubelet-client-certificate "$BC_PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$BC_PKI/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types InternalIP,Hostname \
    --service-account-issuer "https://127.0.0.1:$BC_APISERVER_PORT" \
    --service-account-key-file "$BC_PKI/sa.pub" \
    --service-account-signing-key-file "$BC_PKI/sa.key" \
    --api-audiences "https://127.0.0.1:$BC_APISERVER_PORT" \
    --service-cluster-ip-range "$BC_SERVICE_CIDR" \
    --authorization-mode Node,RBAC \
    --enable-admission-plugins NodeRestriction \
    --allow-privileged=true \
    --profiling=false \
    --v 1
  bc_wait_for "kube-apiserver /readyz" 120 kube-apiserver \
    bc_https_ok "https://127.0.0.1:$BC_APISERVER_PORT/readyz"
}

# --kube-api-qps/--kube-api-burst: every new Node needs the controller manager to lift the not-ready taint that
# admission puts on it and to annotate its TTL; at the default 20 QPS, bench/scheduler.bench.ts's 5,000 simulated nodes
# took minutes to become schedulable (measured: 300 nodes in ~65 s).
# --controllers '*': every controller there is. Up to 1.36 it also listed the cloud provider's controllers to turn them off
# (cloud-node-lifecycle, service-lb, node-route); 1.37's kube-controller-manager no longer has them and refuses their names.
bc_start_kube_controller_manager() {
  bc_spawn kube-controller-manager "$BC_BIN/kube-controller-manager" \
    --kubeconfig "$BC_CLUSTER_DIR/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$BC_CLUSTER_DIR/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$BC_CLUSTER_DIR/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 \
    --secure-port "$BC_KCM_PORT" \
    --leader-elect=false \
    --use-service-account-credentials=true \
    --service-account-private-key-file "$BC_PKI/sa.key" \
    --root-ca-file "$BC_PKI/ca.crt" \
    --cluster-signing-cert-file "$BC_PKI/ca.crt" \
    --cluster-signing-key-file "$BC_PKI/ca.key" \
    --controllers '*' \
    --node-monitor-grace-period "$BC_NODE_MONITOR_GRACE" \
    --kube-api-qps 100 \
    --kube-api-burst 200 \
    --profiling=false \
    --v 1
  bc_wait_for "kube-controller-manager /healthz" 60 kube-controller-manager \
    bc_https_ok_insecure "https://127.0.0.1:$BC_KCM_PORT/healthz"
}

bc_start_kube_scheduler() {
  bc_spawn kube-scheduler "$BC_BIN/kube-scheduler" \
    --config "$BC_SCHEDULER_CONFIG_FILE" \
    --authentication-kubeconfig "$BC_CLUSTER_DIR/scheduler.kubeconfig" \
    --authorization-kubeconfig "$BC_CLUSTER_DIR/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 \
    --secure-port "$BC_SCHEDULER_PORT" \
    --profiling=false \
    --v 1
  bc_wait_for "kube-scheduler /readyz" 60 kube-scheduler \
    bc_https_ok_insecure "https://127.0.0.1:$BC_SCHEDULER_PORT/readyz"
}

bc_start_containerd() {
  mkdir -p "$BC_CONTAINERD_DIR"
  PATH="$BC_CONTAINERD_BIN_DIR:$PATH" bc_spawn containerd "$BC_CONTAINERD_BIN_DIR/containerd" \
    --config "$BC_CONTAINERD_DIR/config.toml"
  bc_wait_for "containerd socket" 60 containerd bc_ctr version
}

bc_start_kubelet() {
  mkdir -p "$BC_KUBELET_ROOT"
  bc_spawn kubelet "$BC_BIN/kubelet" \
    --config "$BC_KUBELET_DIR/config.yaml" \
    --kubeconfig "$BC_CLUSTER_DIR/kubelet.kubeconfig" \
    --root-dir "$BC_KUBELET_ROOT" \
    --hostname-override "$BC_NODE_NAME" \
    --v 1
  bc_wait_for "kubelet /healthz" 120 kubelet curl -fsS --max-time 2 "http://127.0.0.1:$BC_KUBELET_HEALTHZ_PORT/healthz"
}

# kube-proxy (iptables mode): Services for pods and for the host (the API server calls admission webhooks through them).
bc_start_kube_proxy() {
  bc_spawn kube-proxy "$BC_BIN/kube-proxy" --config "$BC_CLUSTER_DIR/kube-proxy.yaml" --v 1
  bc_wait_for "kube-proxy /healthz" 60 kube-proxy curl -fsS --max-time 2 "http://127.0.0.1:$BC_KUBE_PROXY_HEALTHZ_PORT/healthz"
}

# bc_pod_network_up: the pod bridge with the gateway address (made before the first pod, so that the API server can
# advertise it), forwarding on, and BC-FORWARD/BC-INPUT: pods reach each other and this host, never anything beyond it;
# the API server's port is open to loopback and the pod bridge only.
bc_pod_network_up() {
  local ipt=(iptables -w) mask="${BC_POD_CIDR#*/}"
  ip link show "$BC_CNI_BRIDGE" >/dev/null 2>&1 || ip link add "$BC_CNI_BRIDGE" type bridge
  ip addr show dev "$BC_CNI_BRIDGE" | grep -q "inet $BC_POD_GATEWAY/" || ip addr add "$BC_POD_GATEWAY/$mask" dev "$BC_CNI_BRIDGE"
  ip link set "$BC_CNI_BRIDGE" up
  sysctl -qw net.ipv4.ip_forward=1
  if [[ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]]; then sysctl -qw net.bridge.bridge-nf-call-iptables=1; fi
  bc_pod_network_rules_down
  "${ipt[@]}" -N BC-FORWARD
  "${ipt[@]}" -A BC-FORWARD -s "$BC_POD_CIDR" ! -d "$BC_POD_CIDR" -j DROP
  "${ipt[@]}" -A BC-FORWARD -d "$BC_POD_CIDR" ! -s "$BC_POD_CIDR" -j DROP
  "${ipt[@]}" -A BC-FORWARD -i "$BC_CNI_BRIDGE" -o "$BC_CNI_BRIDGE" -j ACCEPT
  "${ipt[@]}" -I FORWARD 1 -j BC-FORWARD
  "${ipt[@]}" -N BC-INPUT
  "${ipt[@]}" -A BC-INPUT -i lo -j RETURN
  "${ipt[@]}" -A BC-INPUT -i "$BC_CNI_BRIDGE" -j RETURN
  "${ipt[@]}" -A BC-INPUT -p tcp --dport "$BC_APISERVER_PORT" -j DROP
  "${ipt[@]}" -I INPUT 1 -j BC-INPUT
}

bc_pod_network_rules_down() {
  local chain from
  for chain in BC-FORWARD BC-INPUT; do
    iptables -w -S "$chain" >/dev/null 2>&1 || continue
    for from in INPUT FORWARD; do while iptables -w -D "$from" -j "$chain" 2>/dev/null; do :; done; done
    iptables -w -F "$chain" && iptables -w -X "$chain"
  done
}

bc_start() {
  case "$1" in
    kube-proxy) bc_start_kube_proxy ;;
    etcd) bc_start_etcd ;;
    kube-apiserver) bc_start_kube_apiserver ;;
    kube-controller-manager) bc_start_kube_controller_manager ;;
    kube-scheduler) bc_start_kube_scheduler ;;
    containerd) bc_start_containerd ;;
    kubelet) bc_start_kubelet ;;
    *) bc_die "unknown component $1" ;;
  esac
}
