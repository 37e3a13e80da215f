#!/usr/bin/env bash
# Builds, without pulling any image, the kind node image for the release e2e/kind/lib.sh chose (BC_KIND_RELEASE: the
# tested one of e2e/cluster/versions.env, or the oldest supported; ADR 0053) and everything inside it (pins in
# e2e/kind/versions.env), into the project's own Docker engine (scripts/docker/dockerd.sh):
#
#   tools       kind, crictl, coredns, local-path-provisioner: `go install` from the Go module proxy; flanneld from the
#               wrapper module build/flannel. Each cached by its own version, so both releases share what they can.
#   Kubernetes  kubeadm, kubelet, kubectl and the control-plane binaries: e2e/cluster/build.sh (the process cluster's
#               build and cache, one directory per release); kubeadm's CoreDNS and pause tags checked against the pins
#   netbase     Debian bookworm minbase + iptables/conntrack/iproute2 (debootstrap), for kube-proxy and flanneld
#   node base   netbase + systemd, runc and the CNI plugins from Debian, containerd from the process cluster's pinned
#               .deb (e2e/cluster/install-deps.sh containerd: 2.1, with CDI, for DRA), plus kind's own node files
#               (its entrypoint, systemd units, containerd config) taken from the kind module at the pinned version.
#               The same for every release.
#   images      bettercompute.local/{kube-apiserver,kube-controller-manager,kube-scheduler,kube-proxy}:K8S_VERSION,
#               etcd, coredns, pause, flannel, local-path-provisioner and busybox, imported into the node's
#               containerd at build time (kubeadm is pointed at imageRepository bettercompute.local by kind-config.yaml)
#   node image  bettercompute.local/kind-node:K8S_VERSION-STAMP: the node base + the binaries, the images, the
#               release's pause image as containerd's sandbox image, and /kind/manifests/default-{cni,storage}.yaml
#               from e2e/kind/manifests/
#
# Each step is cached under $BC_CACHE/kind with a stamp of its inputs; a warm run does nothing but check stamps.
# Prints the node image reference on stdout (all else on stderr). Needs the engine up (scripts/docker/dockerd.sh up).
# Env: BC_KIND_RELEASE (tested | oldest), BC_CACHE, BC_DEBIAN_MIRROR (default http://deb.debian.org/debian),
#      BC_KIND_FORCE=1 to rebuild every step, BC_KIND_TOOLS_ONLY=1 to build only the tools (kind:up with a released
#      node image).
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

out="$cache/kind"
mirror="${BC_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
force="${BC_KIND_FORCE:-0}"
mkdir -p "$out"
exec 8>"$out/.build.lock"
flock 8

t0=$SECONDS
say() { printf '[kind-build %4ds] %s\n' "$((SECONDS - t0))" "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }
sha() { sha256sum | cut -c1-16; }
if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then export PATH="/usr/local/go/bin:$PATH"; fi
bc_docker version >/dev/null 2>&1 || die "the Docker engine does not answer on $BC_DOCKER_SOCK (scripts/docker/dockerd.sh up)"
bc_docker_packages debootstrap
have_image() { bc_docker image inspect "$1" >/dev/null 2>&1; }

work="$(mktemp -d)"
cleanup() { rm -rf "$work"; }
trap cleanup EXIT

# --- tools ------------------------------------------------------------------------------------------------------------
# Each binary is cached under bin/ by its own version (and the Go version; flannel by its wrapper module too), so that
# the two releases' node images share kind, crictl, flannel and the provisioner and differ only in CoreDNS. tools/ is
# this release's set (links to those binaries); lib.sh finds kind there.
gover="$(go env GOVERSION)"
flannel_stamp="$(cat "$here/build/flannel/go.mod" "$here/build/flannel/go.sum" | sha)"
declare -A tool_pkgs=(
  [kind]="sigs.k8s.io/kind@$KIND_VERSION"
  [crictl]="sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
  [coredns]="github.com/coredns/coredns@$COREDNS_VERSION"
  [local-path-provisioner]="github.com/rancher/local-path-provisioner@$LOCAL_PATH_PROVISIONER_VERSION"
  [flanneld]="github.com/flannel-io/flannel@$FLANNEL_VERSION"
)
export GOFLAGS=-buildvcs=false GOMAXPROCS="${GOMAXPROCS:-2}"
mkdir -p "$out/bin"
declare -A tool_bin=()
for t in kind crictl coredns local-path-provisioner flanneld; do
  b="$out/bin/$t@${tool_pkgs[$t]##*@}-$gover"
  [[ "$t" != flanneld ]] || b+="-$flannel_stamp"
  tool_bin[$t]="$b"
  [[ "$force" != 1 && -x "$b" ]] && continue
  s=$SECONDS
  if [[ "$t" == flanneld ]]; then
    # From a wrapper module (build/flannel/go.mod says why), with cgo: its udp backend needs it.
    say "go build ${tool_pkgs[$t]} ..."
    (cd "$here/build/flannel" && CGO_ENABLED=1 nice -n 10 go build -trimpath -o "$b.tmp" \
      -ldflags="-s -w -X github.com/flannel-io/flannel/pkg/version.Version=$FLANNEL_VERSION" github.com/flannel-io/flannel) >&2 ||
      die "go build flannel failed"
  else
    say "go install ${tool_pkgs[$t]} ..."
    rm -rf "$out/bin/gobin-$t"
    mkdir -p "$out/bin/gobin-$t"
    CGO_ENABLED=0 GOBIN="$out/bin/gobin-$t" nice -n 10 go install -trimpath -ldflags='-s -w' "${tool_pkgs[$t]}" >&2 ||
      die "go install ${tool_pkgs[$t]} failed"
    mv "$out/bin/gobin-$t/$t" "$b.tmp"
    rm -rf "$out/bin/gobin-$t"
  fi
  mv "$b.tmp" "$b"
  say "  $t: built in $((SECONDS - s))s"
done
tools_stamp="$(for t in "${!tool_bin[@]}"; do echo "$t ${tool_bin[$t]}"; done | sort | sha)"
tools="$out/tools-$tools_stamp"
if [[ ! -d "$tools" ]]; then
  mkdir -p "$tools.tmp"
  for t in "${!tool_bin[@]}"; do ln -f "${tool_bin[$t]}" "$tools.tmp/$t"; done
  mv "$tools.tmp" "$tools"
fi
ln -sfn "tools-$tools_stamp" "$out/tools"
[[ "${BC_KIND_TOOLS_ONLY:-0}" != 1 ]] || exit 0

# --- Kubernetes -------------------------------------------------------------------------------------------------------
k8s="$(bash "$root/e2e/cluster/build.sh")" || die "e2e/cluster/build.sh failed"
for b in kubeadm kubelet kubectl kube-apiserver kube-controller-manager kube-scheduler kube-proxy etcd; do
  [[ -x "$k8s/$b" ]] || die "$k8s/$b missing after e2e/cluster/build.sh"
done
# The node runs what this kubeadm deploys: its CoreDNS and pause tags must be the pins (versions.env), or kubeadm
# would ask containerd for images the node does not hold. (etcd's tag is set by kind-config.yaml.)
kubeadm_images="$("$k8s/kubeadm" config images list --kubernetes-version "$K8S_VERSION")" || die "kubeadm config images list failed"
for want in "coredns:$COREDNS_VERSION" "pause:$PAUSE_VERSION"; do
  grep -q "/$want\$" <<<"$kubeadm_images" ||
    die "kubeadm $K8S_VERSION deploys $(grep -m1 "/${want%%:*}:" <<<"$kubeadm_images"), not $want: update e2e/kind/versions.env"
done
# containerd: the process cluster's pinned .deb, unpacked (e2e/cluster/versions.env, CONTAINERD_DEB_*).
containerd_dir="$(bash "$root/e2e/cluster/install-deps.sh" containerd)" || die "e2e/cluster/install-deps.sh containerd failed"

# --- netbase: a Debian root filesystem with iptables ------------------------------------------------------------------
netbase_pkgs="iptables,conntrack,iproute2,ca-certificates,kmod"
netbase_stamp="$(printf '%s\n' bookworm "$netbase_pkgs" "$mirror" | sha)"
netbase="bettercompute.local/kind-netbase:$netbase_stamp"
if [[ "$force" == 1 ]] || ! have_image "$netbase"; then
  s=$SECONDS
  say "debootstrap bookworm ($netbase_pkgs) ..."
  debootstrap --variant=minbase --arch=amd64 --include="$netbase_pkgs" bookworm "$work/netbase" "$mirror" \
    >"$out/debootstrap.log" 2>&1 || { tail -20 "$out/debootstrap.log" >&2; die "debootstrap failed"; }
  rm -rf "$work/netbase"/var/cache/apt/archives/*.deb "$work/netbase"/var/lib/apt/lists/* \
    "$work/netbase"/usr/share/doc/* "$work/netbase"/usr/share/man/* "$work/netbase"/usr/share/locale/*
  # Debian 12 defaults to iptables-nft, as kube-proxy and flanneld expect on a current kernel.
  tar -C "$work/netbase" -c . | bc_docker import - "$netbase" >/dev/null
  rm -rf "$work/netbase"
  say "  $netbase: made in $((SECONDS - s))s"
fi

# build_image REF DIR: docker build of DIR (a Dockerfile and its files), no network unless BUILD_NETWORK is set.
build_image() {
  DOCKER_BUILDKIT=0 bc_docker build --network "${BUILD_NETWORK:-none}" -q -t "$1" "$2" >/dev/null ||
    die "docker build $1 failed"
}

# --- node base --------------------------------------------------------------------------------------------------------
kind_src="$(go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
[[ -d "$kind_src/images/base/files" ]] || die "kind $KIND_VERSION source not found in the module cache"
ctx="$work/base"
mkdir -p "$ctx"
cp -r "$kind_src/images/base/files" "$ctx/files"
chmod -R u+w "$ctx/files"
cp "$tools/crictl" "$ctx/crictl"
mkdir -p "$ctx/containerd"
for b in containerd containerd-shim-runc-v2 ctr; do cp "$containerd_dir/usr/bin/$b" "$ctx/containerd/$b"; done
# kind's containerd config (its version 2 form, which containerd 2 migrates when it loads it, as kind's own nodes do):
# restrict_oom_score_adj because root here may not lower an oom_score_adj (no CAP_SYS_RESOURCE); CDI on, with specs
# from /etc/cdi and /var/run/cdi (containerd 2's defaults, written out: the DRA plugin's specs are there); the CNI
# configuration generated from the node's podCIDR. The sandbox (pause) image is the release's, set in the node image.
sed -i -e 's#^\(\s*restrict_oom_score_adj = \).*#\1true\n  enable_cdi = true\n  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]#' \
  "$ctx/files/etc/containerd/config.toml"
grep -q '^  enable_cdi = true$' "$ctx/files/etc/containerd/config.toml" || die "kind $KIND_VERSION's containerd config changed: CDI not set"
cat >>"$ctx/files/etc/containerd/config.toml" <<'EOF'

# e2e/kind/build.sh: the CNI configuration is written from this template when the kubelet reports the node's podCIDR.
[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "/opt/cni/bin"
  conf_dir = "/etc/cni/net.d"
  conf_template = "/etc/containerd/cni-template.json"
EOF
cat >"$ctx/cni-template.json" <<'EOF'
{
  "cniVersion": "0.4.0",
  "name": "kind-pods",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [{{range $i, $r := .PodCIDRRanges}}{{if $i}}, {{end}}[{ "subnet": "{{$r}}" }]{{end}}],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } }
  ]
}
EOF
# systemd would not start containerd with OOMScoreAdjust=-999 here (see restrict_oom_score_adj above).
sed -i -e 's#^OOMScoreAdjust=.*#OOMScoreAdjust=0#' -e 's#^ExecStartPre=-/sbin/modprobe overlay#ExecStartPre=-/bin/true#' \
  "$ctx/files/etc/systemd/system/containerd.service"
cat >"$ctx/Dockerfile" <<EOF
FROM $netbase
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \\
      systemd systemd-sysv dbus runc containernetworking-plugins \\
      nftables ethtool util-linux mount libseccomp2 pigz bash jq procps \\
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb /usr/share/doc/* /usr/share/man/*
COPY files/usr/local/bin/ /usr/local/bin/
COPY files/kind/ /kind/
COPY files/etc/ /etc/
COPY crictl /usr/local/bin/crictl
COPY containerd/ /usr/local/bin/
COPY cni-template.json /etc/containerd/cni-template.json
RUN chmod 0755 /usr/local/bin/* /kind/bin/* \\
    && mkdir -p /opt/cni/bin && ln -sf /usr/lib/cni/* /opt/cni/bin/ \\
    && ctr oci spec | jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \\
       | jq 'del(.process.rlimits)' > /etc/containerd/cri-base.json \\
    && find /lib/systemd/system/sysinit.target.wants/ -name systemd-tmpfiles-setup.service -delete \\
    && rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \\
       /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \\
       /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/* \\
    && echo ReadKMsg=no >> /etc/systemd/journald.conf \\
    && systemctl enable kubelet.service containerd.service undo-mount-hacks.service \\
    && systemctl mask systemd-binfmt.service \\
    && mkdir -p /etc/kubernetes/manifests
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]
EOF
base_stamp="$({ echo "$netbase"; find "$ctx" -type f -print0 | sort -z | xargs -0 sha256sum | sed "s#$ctx##"; } | sha)"
node_base="bettercompute.local/kind-base:$base_stamp"
if [[ "$force" == 1 ]] || ! have_image "$node_base"; then
  s=$SECONDS
  say "node base (Debian's systemd, runc, CNI plugins; containerd $CONTAINERD_DEB_VERSION; kind $KIND_VERSION's node files) ..."
  BUILD_NETWORK=host build_image "$node_base" "$ctx"
  say "  $node_base: made in $((SECONDS - s))s"
fi

# --- component images -------------------------------------------------------------------------------------------------
# image REF FROM BINARY DEST [ENTRYPOINT_JSON]: one binary on FROM (scratch or netbase).
images=()
image() {
  local ref="$1" from="$2" bin="$3" dest="$4" entry="${5:-}" d
  d="$work/img-${#images[@]}"
  mkdir -p "$d"
  cp "$bin" "$d/bin"
  {
    echo "FROM $from"
    echo "COPY bin $dest"
    echo "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    [[ -z "$entry" ]] || echo "ENTRYPOINT $entry"
  } >"$d/Dockerfile"
  images+=("$ref|$d")
}
repo=bettercompute.local
for b in kube-apiserver kube-controller-manager kube-scheduler; do
  image "$repo/$b:$K8S_VERSION" scratch "$k8s/$b" "/usr/local/bin/$b"
done
image "$repo/kube-proxy:$K8S_VERSION" "$netbase" "$k8s/kube-proxy" /usr/local/bin/kube-proxy
image "$repo/etcd:${ETCD_VERSION#v}-0" scratch "$k8s/etcd" /usr/local/bin/etcd
image "$repo/coredns:$COREDNS_VERSION" scratch "$tools/coredns" /coredns '["/coredns"]'
image "$repo/flannel:$FLANNEL_VERSION" "$netbase" "$tools/flanneld" /usr/local/bin/flanneld
image "$repo/local-path-provisioner:$LOCAL_PATH_PROVISIONER_VERSION" scratch "$tools/local-path-provisioner" \
  /usr/local/bin/local-path-provisioner
# pause and busybox: the process cluster's own (e2e/cluster/images), tagged for kubeadm's pause version too; built only
# when the node image is, so their stamp is of their inputs.

images_stamp="$({
  for i in "${images[@]}"; do
    echo "${i%%|*}"
    cat "${i#*|}/Dockerfile"
    sha256sum <"${i#*|}/bin"
  done
  find "$root/e2e/cluster/images" -type f -print0 | sort -z | xargs -0 sha256sum | cut -c1-64
  sha256sum </bin/busybox
} | sha)"
manifests_stamp="$(cat "$here/manifests/"*.yaml "$here/versions.env" | sha)"
node_stamp="$(printf '%s\n' "$node_base" "$images_stamp" "$manifests_stamp" "$PAUSE_VERSION" "$(sha256sum "$k8s/kubeadm" "$k8s/kubelet" "$k8s/kubectl" | cut -c1-64)" | sha)"
node_image="$repo/kind-node:$K8S_VERSION-$node_stamp"
if [[ "$force" != 1 ]] && have_image "$node_image"; then
  say "up to date: $node_image"
  echo "$node_image"
  exit 0
fi

s=$SECONDS
refs=()
for i in "${images[@]}"; do
  ref="${i%%|*}"
  build_image "$ref" "${i#*|}"
  refs+=("$ref")
done
bash "$root/e2e/cluster/images/build-images.sh" "$work/cluster-images" >&2
bc_docker load -i "$work/cluster-images/pause.tar" >/dev/null
bc_docker load -i "$work/cluster-images/busybox.tar" >/dev/null
bc_docker tag bettercompute.local/pause:v1 "$repo/pause:$PAUSE_VERSION"
refs+=("$repo/pause:$PAUSE_VERSION" bettercompute.local/busybox:v1)
bc_docker save -o "$work/images.tar" "${refs[@]}"
say "component images: ${#refs[@]} built and saved in $((SECONDS - s))s"

# --- node image -------------------------------------------------------------------------------------------------------
s=$SECONDS
c="kind-build-$$"
bc_docker rm -f "$c" >/dev/null 2>&1 || true
bc_docker run -d --name "$c" --network none --entrypoint sleep "$node_base" infinity >/dev/null
trap 'bc_docker rm -f "$c" >/dev/null 2>&1 || true; cleanup' EXIT
for b in kubeadm kubelet kubectl; do bc_docker cp "$k8s/$b" "$c:/usr/bin/$b"; done
# The sandbox image: the release's pause, as its kubeadm expects it (built here, tagged below).
bc_docker exec "$c" sed -i "s#^\(\s*sandbox_image = \).*#\1\"$repo/pause:$PAUSE_VERSION\"#" /etc/containerd/config.toml
bc_docker exec "$c" grep -q "sandbox_image = \"$repo/pause:$PAUSE_VERSION\"" /etc/containerd/config.toml ||
  die "the sandbox image was not set in the node's containerd config"
mkdir -p "$work/kind/manifests"
sed -e "s#FLANNEL_VERSION#$FLANNEL_VERSION#g" "$here/manifests/default-cni.yaml" >"$work/kind/manifests/default-cni.yaml"
sed -e "s#LOCAL_PATH_PROVISIONER_VERSION#$LOCAL_PATH_PROVISIONER_VERSION#g" "$here/manifests/default-storage.yaml" \
  >"$work/kind/manifests/default-storage.yaml"
printf '%s' "$K8S_VERSION" >"$work/kind/version"
bc_docker cp "$work/kind/." "$c:/kind/"
bc_docker cp "$work/images.tar" "$c:/images.tar"
# The images go into the node's containerd now, as kind's own node-image build does, so a cluster starts offline.
bc_docker exec "$c" bash -c 'nohup containerd >/var/log/containerd-build.log 2>&1 &
  for i in $(seq 1 50); do ctr version >/dev/null 2>&1 && break; sleep 0.2; done
  ctr --namespace=k8s.io images import --all-platforms --no-unpack --digests /images.tar >/dev/null
  ctr --namespace=k8s.io images list -q | grep -v -e "^sha256:" -e "^import-" | sort
  pkill containerd; for i in $(seq 1 50); do pgrep -x containerd >/dev/null || break; sleep 0.2; done
  rm -f /images.tar /var/log/containerd-build.log' >&2
bc_docker commit --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' "$c" "$node_image" >/dev/null
bc_docker rm -f "$c" >/dev/null
say "$node_image: made in $((SECONDS - s))s ($(bc_docker image inspect -f '{{.Size}}' "$node_image" | numfmt --to=iec-i --suffix=B))"
echo "$node_image"
