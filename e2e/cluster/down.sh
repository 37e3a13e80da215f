#!/usr/bin/env bash
# `npm run cluster:down`: stops every process of the test cluster and removes its state: pod containers and their
# network namespaces, mounts under the state dir, the kubelet's cgroups, the CNI bridge, the kubelet's iptables chains,
# and the state dir itself. The last run's logs are kept in $BC_CACHE/last-cluster-logs for a look afterwards.
# Safe to run when nothing is up.
set -uo pipefail
# shellcheck source=lib.sh
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"

bc_lock
d="$BC_CLUSTER_DIR"
bc_log "taking the cluster in $d down"

# 1. The kubelet first, so that it does not restart what we remove; kube-proxy, and its iptables rules.
bc_stop kubelet 30
bc_stop kube-proxy 10
[[ -x "$BC_BIN/kube-proxy" ]] && "$BC_BIN/kube-proxy" --cleanup >/dev/null 2>&1
bc_pod_network_rules_down

# 2. Pod containers: kill and delete them through containerd while it runs, then through runc for any left over.
if bc_running containerd; then
  # `tasks delete -f` kills a running task first.
  for t in $(bc_ctr tasks ls -q 2>/dev/null); do bc_ctr tasks delete -f "$t" >/dev/null 2>&1 || true; done
  for c in $(bc_ctr containers ls -q 2>/dev/null); do bc_ctr containers delete "$c" >/dev/null 2>&1 || true; done
fi
runc_root="$BC_CONTAINERD_DIR/runc/k8s.io"
if [[ -d "$runc_root" ]]; then
  for c in $(runc --root "$runc_root" list -q 2>/dev/null); do
    runc --root "$runc_root" kill "$c" KILL >/dev/null 2>&1 || true
    runc --root "$runc_root" delete -f "$c" >/dev/null 2>&1 || true
  done
fi

# 3. containerd and its shims (a shim outlives containerd; ours name our socket on their command line).
bc_stop containerd 20
for p in $(pgrep -f "containerd-shim-runc-v2 .*-address $BC_CONTAINERD_SOCK" 2>/dev/null); do
  kill -KILL "$p" 2>/dev/null || true
done

# 4. The control plane.
for c in kube-scheduler kube-controller-manager kube-apiserver etcd; do bc_stop "$c" 20; done
# Any process still running from our binaries or with our state dir on its command line (e.g. an orphan after a crash).
for p in $(pgrep -f -- "$BC_CLUSTER_DIR" 2>/dev/null); do
  [[ "$p" == "$$" || "$p" == "$PPID" ]] && continue
  cmd="$(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null)" || continue
  if [[ "$cmd" == "$BC_BIN/"* || "$cmd" == "$BC_CONTAINERD_BIN_DIR/"* || "$cmd" == "containerd "* ||
    "$cmd" == containerd-shim* ]]; then
    bc_log "killing leftover process $p: $(cut -c1-120 <<<"$cmd")"
    kill -KILL "$p" 2>/dev/null || true
  fi
done

# 5. Pod network namespaces (CNI ones whose pod address is in our pod CIDR) and the bridge.
prefix="${BC_POD_CIDR%.*}."
for ns in /run/netns/cni-*; do
  [[ -e "$ns" ]] || continue
  name="$(basename "$ns")"
  if ip netns exec "$name" ip -o -4 addr show 2>/dev/null | grep -q "inet $prefix"; then
    umount "$ns" 2>/dev/null || umount -l "$ns" 2>/dev/null || true
    rm -f "$ns"
  fi
done
[[ -d /run/netns ]] && ! mountpoint -q /run/netns && rmdir /run/netns 2>/dev/null
ip link show "$BC_CNI_BRIDGE" >/dev/null 2>&1 && ip link delete "$BC_CNI_BRIDGE"

# 6. Mounts under the state dir (kubelet volumes, its rshared root bind mount, container rootfs), deepest first.
if [[ -d "$d" ]]; then
  for attempt in 1 2 3; do
    mapfile -t mnts < <(awk -v p="$d" 'index($2, p) == 1 { print $2 }' /proc/self/mounts | sort -r | uniq)
    ((${#mnts[@]} == 0)) && break
    for m in "${mnts[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  done
fi

# 7. The kubelet's cgroups (cgroupfs driver: /kubepods in every v1 hierarchy).
for root in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
  [[ -d "$root" ]] || continue
  find "$root" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  [[ -d "$root" ]] && bc_log "could not remove all of $root (processes left in it?)"
done

# 8. The iptables chains the kubelet makes (a canary chain per table to notice flushes, and KUBE-FIREWALL, which
#    INPUT and OUTPUT jump to).
for ipt in iptables ip6tables; do
  command -v "$ipt" >/dev/null || continue
  for table in mangle nat filter; do
    for chain in KUBE-KUBELET-CANARY KUBE-IPTABLES-HINT KUBE-FIREWALL; do
      "$ipt" -w -t "$table" -S "$chain" >/dev/null 2>&1 || continue
      for from in INPUT OUTPUT FORWARD PREROUTING POSTROUTING; do
        while "$ipt" -w -t "$table" -D "$from" -j "$chain" 2>/dev/null; do :; done
      done
      "$ipt" -w -t "$table" -F "$chain" 2>/dev/null && "$ipt" -w -t "$table" -X "$chain" 2>/dev/null || true
    done
  done
done

# 9. The kubelet's device-plugin socket and checkpoint: the kubelet keeps them in /var/lib/kubelet/device-plugins
#    whatever its --root-dir. Other files there (a device plugin's socket) are left to whoever made them.
dp=/var/lib/kubelet/device-plugins
rm -f "$dp/kubelet.sock" "$dp/kubelet_internal_checkpoint"
[[ -d "$dp" ]] && rmdir "$dp" 2>/dev/null && rmdir /var/lib/kubelet 2>/dev/null

# 10. Empty directories that containerd and its shims leave in /run/containerd (removed only when empty, so that
#    another containerd on this machine keeps its own).
for dir in /run/containerd/runc/k8s.io /run/containerd/runc /run/containerd/s /run/containerd/fifo /run/containerd; do
  [[ -d "$dir" ]] && rmdir "$dir" 2>/dev/null
done

# 11. The state dir (logs kept aside).
if [[ -d "$d" ]]; then
  if [[ -d "$BC_LOGS" ]]; then
    rm -rf "$BC_CACHE/last-cluster-logs"
    cp -r "$BC_LOGS" "$BC_CACHE/last-cluster-logs" 2>/dev/null || true
  fi
  if awk -v p="$d" 'index($2, p) == 1 { found = 1 } END { exit !found }' /proc/self/mounts; then
    bc_log "mounts remain under $d; not removing it"
    exit 1
  fi
  rm -rf "$d"
fi
bc_log "cluster down"
