#!/usr/bin/env bash
# `npm run cluster:up`: starts a one-machine Kubernetes cluster for the tests, everything on 127.0.0.1:
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd (+ runc, CNI bridge), one real kubelet and
#   kube-proxy. Pods reach Services and the API server (through the `kubernetes` Service), and nothing off this machine.
# Builds the components first if they are not cached (build.sh), and the local images (images/build-images.sh).
# If the cluster is already up and healthy, does nothing. Prints `export ...` lines for the shell on stdout, e.g.
#   eval "$(npm run -s cluster:up)"
#
# Env: BC_CLUSTER_DIR (state dir, default ~/.cache/better-compute/cluster), BC_SCHEDULER_CONFIG (a
# KubeSchedulerConfiguration file to use instead of the default; `__KUBECONFIG__` in it is replaced by the scheduler's
# kubeconfig, and clientConnection/leaderElection are added when it lacks them), plus the ports in lib.sh.
set -euo pipefail
# shellcheck source=lib.sh
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"

[[ "$(id -u)" == 0 ]] || bc_die "the kubelet, containerd and the CNI plugins need root"
t0=$SECONDS
bc_lock

print_env() {
  cat "$BC_CLUSTER_DIR/env"
}

if bc_all_up && bc_at_pinned_release; then
  bc_log "cluster already up (state in $BC_CLUSTER_DIR)"
  print_env
  exit 0
fi
if bc_all_up; then
  users="$(bc_live_users | tr '\n' ' ')"
  [[ -z "$users" ]] || bc_die "the cluster in $BC_CLUSTER_DIR runs another Kubernetes release than $K8S_VERSION and test runs use it (pids $users); try again when they end"
  bc_log "the cluster in $BC_CLUSTER_DIR runs another Kubernetes release than $K8S_VERSION; taking it down first"
  "$BC_HERE/down.sh"
elif [[ -d "$BC_CLUSTER_DIR" ]]; then
  bc_log "found a partial cluster in $BC_CLUSTER_DIR; taking it down first"
  "$BC_HERE/down.sh"
fi

"$BC_HERE/install-deps.sh"
bin="$("$BC_HERE/build.sh")"
[[ "$bin" == "$BC_BIN" ]] || bc_die "build.sh built into $bin, expected $BC_BIN"

for p in "$BC_ETCD_PORT" "$BC_ETCD_PEER_PORT" "$BC_APISERVER_PORT" "$BC_KCM_PORT" "$BC_SCHEDULER_PORT" \
  "$BC_KUBELET_PORT" "$BC_KUBELET_HEALTHZ_PORT" "$BC_KUBE_PROXY_HEALTHZ_PORT" "$BC_KUBE_PROXY_METRICS_PORT"; do
  bc_port_free "$p" || bc_die "port 127.0.0.1:$p is in use (another cluster? set BC_*_PORT, see lib.sh)"
done

# --- images (built once per content hash, cached) ---------------------------------------------------------------------
img_hash="$(cat "$BC_HERE/images/build-images.sh" "$BC_HERE/images/pause/main.go" /bin/busybox | sha256sum | cut -c1-16)"
img_dir="$BC_CACHE/images/$img_hash"
if [[ ! -f "$img_dir/busybox.tar" || ! -f "$img_dir/pause.tar" ]]; then
  "$BC_HERE/images/build-images.sh" "$img_dir"
fi

d="$BC_CLUSTER_DIR"
mkdir -p "$d" "$BC_PKI" "$BC_LOGS" "$BC_PIDS" "$d/scheduler" "$BC_KUBELET_DIR" "$BC_CONTAINERD_DIR" \
  "$BC_CNI_DIR/net.d" "$BC_CNI_DIR/ipam"

# --- PKI ------------------------------------------------------------------------------------------------------------
bc_log "generating certificates"
(
  cd "$BC_PKI"
  umask 077
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 -subj "/CN=better-compute-test-ca" \
    2>/dev/null
  # cert NAME SUBJECT [SAN]
  cert() {
    local name="$1" subj="$2" san="${3:-}" ext
    openssl req -newkey rsa:2048 -nodes -keyout "$name.key" -out "$name.csr" -subj "$subj" 2>/dev/null
    ext="$(mktemp)"
    {
      echo "basicConstraints=CA:FALSE"
      echo "keyUsage=critical,digitalSignature,keyEncipherment"
      if [[ -n "$san" ]]; then echo "extendedKeyUsage=serverAuth,clientAuth"; echo "subjectAltName=$san"
      else echo "extendedKeyUsage=clientAuth"; fi
    } > "$ext"
    openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$name.crt" -days 3650 \
      -extfile "$ext" 2>/dev/null
    rm -f "$name.csr" "$ext"
  }
  svc_ip="${BC_SERVICE_CIDR%.*}.1"
  cert apiserver "/CN=kube-apiserver" \
    "IP:127.0.0.1,IP:$svc_ip,IP:$BC_POD_GATEWAY,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  cert admin "/O=system:masters/CN=bc-admin"
  cert controller-manager "/CN=system:kube-controller-manager"
  cert scheduler "/CN=system:kube-scheduler"
  cert kube-proxy "/CN=system:kube-proxy"
  cert kubelet-client "/O=system:nodes/CN=system:node:$BC_NODE_NAME"
  cert kubelet-serving "/CN=$BC_NODE_NAME" "IP:127.0.0.1,DNS:localhost"
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
)

# kubeconfig FILE CERT_NAME
kubeconfig() {
  cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: bc
  cluster:
    server: https://127.0.0.1:$BC_APISERVER_PORT
    certificate-authority: $BC_PKI/ca.crt
users:
- name: $2
  user:
    client-certificate: $BC_PKI/$2.crt
    client-key: $BC_PKI/$2.key
contexts:
- name: bc
  context:
    cluster: bc
    user: $2
current-context: bc
EOF
  chmod 600 "$1"
}
kubeconfig "$BC_KUBECONFIG" admin
kubeconfig "$d/controller-manager.kubeconfig" controller-manager
kubeconfig "$d/scheduler.kubeconfig" scheduler
kubeconfig "$d/kubelet.kubeconfig" kubelet-client
kubeconfig "$d/kube-proxy.kubeconfig" kube-proxy

# --- component configs ---------------------------------------------------------------------------------------------
cat > "$d/scheduler/default-config.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: __KUBECONFIG__
leaderElection:
  leaderElect: false
profiles:
- schedulerName: default-scheduler
EOF
"$BC_HERE/ctl.sh" render-scheduler-config "${BC_SCHEDULER_CONFIG:-$d/scheduler/default-config.yaml}" \
  > "$BC_SCHEDULER_CONFIG_FILE"

# containerd 2 (config version 3: the CRI plugin is split into io.containerd.cri.v1.images, io.containerd.cri.v1.runtime
# and io.containerd.grpc.v1.cri).
cat > "$BC_CONTAINERD_DIR/config.toml" <<EOF
# containerd for the test cluster's kubelet: its own root, state and socket; cgroupfs; local images only; CDI on.
version = 3
root = "$BC_CONTAINERD_DIR/root"
state = "$BC_CONTAINERD_DIR/state"
disabled_plugins = ["io.containerd.grpc.v1.introspection-tracing", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "$BC_CONTAINERD_SOCK"

[ttrpc]
  address = "$BC_CONTAINERD_SOCK.ttrpc"

[debug]
  level = "warn"

[metrics]
  address = ""

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  # Every image is imported (ctr images import); nothing is pulled, so the sandbox image must be there and stay.
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "$BC_PAUSE_IMAGE"

[plugins."io.containerd.cri.v1.runtime"]
  disable_apparmor = true
  # Root here lacks CAP_SYS_RESOURCE, so no process may lower its oom_score_adj (the sandbox asks for -998): cap the
  # containers' scores at containerd's own.
  restrict_oom_score_adj = true
  # Container Device Interface: devices named by a CDI spec in these directories (the DRA kubelet plugin's
  # cdi_device_ids, docs/dra-node.md) are injected into the container.
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "$(command -v runc)"
        Root = "$BC_CONTAINERD_DIR/runc"
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["$BC_CNI_BIN_DIR"]
    conf_dir = "$BC_CNI_DIR/net.d"
    max_conf_num = 1

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_tls_streaming = false
EOF

cat > "$d/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $d/kube-proxy.kubeconfig
hostnameOverride: $BC_NODE_NAME
mode: iptables
clusterCIDR: $BC_POD_CIDR
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:$BC_KUBE_PROXY_HEALTHZ_PORT
metricsBindAddress: 127.0.0.1:$BC_KUBE_PROXY_METRICS_PORT
nodePortAddresses: [$BC_POD_GATEWAY/32]
conntrack:
  # Leave the host's conntrack table size alone.
  maxPerCore: 0
  min: 0
EOF

# Pods get an address on the host-only bridge and one route beyond it: the Service range, through this host (kube-proxy
# turns it into pod or API server addresses). No default route, and BC-FORWARD (lib.sh) drops whatever would leave the
# pod network: nothing leads off this machine.
cat > "$BC_CNI_DIR/net.d/10-bc-bridge.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "bc-pods",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BC_CNI_BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$BC_CNI_DIR/ipam",
        "ranges": [[{ "subnet": "$BC_POD_CIDR", "gateway": "$BC_POD_GATEWAY" }]],
        "routes": [{ "dst": "$BC_SERVICE_CIDR", "gw": "$BC_POD_GATEWAY" }]
      }
    }
  ]
}
EOF

# Pods resolve nothing: no cluster DNS here, and the host's resolver is off limits.
echo "options ndots:1" > "$BC_KUBELET_DIR/resolv.conf"

cat > "$BC_KUBELET_DIR/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $BC_KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $BC_KUBELET_HEALTHZ_PORT
tlsCertFile: $BC_PKI/kubelet-serving.crt
tlsPrivateKeyFile: $BC_PKI/kubelet-serving.key
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $BC_PKI/ca.crt
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://$BC_CONTAINERD_SOCK
cgroupDriver: cgroupfs
# These machines run cgroup v1, which the kubelet (1.34 to 1.37 at least) still runs on when told to.
failCgroupV1: false
failSwapOn: false
resolvConf: $BC_KUBELET_DIR/resolv.conf
podLogsDir: $BC_KUBELET_DIR/pod-logs
# The imported images are the only ones there are: never garbage-collect them, never evict for a full disk.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  nodefs.inodesFree: "1%"
  imagefs.available: "1%"
serializeImagePulls: false
maxPods: 110
registerNode: true
nodeStatusReportFrequency: 1m
syncFrequency: 10s
fileCheckFrequency: 10s
shutdownGracePeriod: 0s
EOF

cat > "$d/env" <<EOF
export BC_CLUSTER_DIR='$d'
export KUBECONFIG='$BC_KUBECONFIG'
export BC_KUBECONFIG='$BC_KUBECONFIG'
export BC_KUBECTL='$BC_BIN/kubectl'
export BC_CLUSTER_K8S_VERSION='$K8S_VERSION'
export BC_SCHEDULER_CONFIG_FILE='$BC_SCHEDULER_CONFIG_FILE'
export BC_NODE_NAME='$BC_NODE_NAME'
export BC_KUBELET_ROOT='$BC_KUBELET_ROOT'
export BC_CONTAINERD_SOCK='$BC_CONTAINERD_SOCK'
export BC_BUSYBOX_IMAGE='$BC_BUSYBOX_IMAGE'
export BC_PAUSE_IMAGE='$BC_PAUSE_IMAGE'
export BC_POD_GATEWAY='$BC_POD_GATEWAY'
EOF

# --- start ------------------------------------------------------------------------------------------------------------
fail() {
  bc_log "bring-up failed; logs are in $BC_LOGS (taking the partial cluster down with BC_KEEP_FAILED=1 unset)"
  [[ "${BC_KEEP_FAILED:-0}" == 1 ]] || "$BC_HERE/down.sh" || true
  exit 1
}
trap fail ERR

bc_pod_network_up
bc_log "starting etcd, kube-apiserver"
bc_start etcd
bc_start kube-apiserver
bc_log "starting kube-controller-manager, kube-scheduler, containerd"
bc_start kube-controller-manager
bc_start kube-scheduler
bc_start containerd
bc_ctr images import --snapshotter overlayfs "$img_dir/pause.tar" >/dev/null
bc_ctr images import --snapshotter overlayfs "$img_dir/busybox.tar" >/dev/null
bc_log "starting kubelet, kube-proxy"
bc_start kubelet
bc_start kube-proxy

bc_log "waiting for node $BC_NODE_NAME to be Ready and the default service account"
bc_wait_for "node $BC_NODE_NAME Ready" 120 kubelet \
  bc_kubectl wait --for=condition=Ready "node/$BC_NODE_NAME" --timeout=2s
node_untainted() { [[ -z "$(bc_kubectl get node "$BC_NODE_NAME" -o jsonpath='{.spec.taints}')" ]]; }
bc_wait_for "node $BC_NODE_NAME without taints" 60 kube-controller-manager node_untainted
bc_wait_for "default service account" 60 kube-controller-manager bc_kubectl -n default get serviceaccount default
bc_wait_for "kube-root-ca.crt in default" 60 kube-controller-manager bc_kubectl -n default get configmap kube-root-ca.crt

trap - ERR
bc_log "cluster up in $((SECONDS - t0))s; KUBECONFIG=$BC_KUBECONFIG"
print_env
