#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, kubelet, kubectl, kubeadm (for kind) and etcd
# with the Go toolchain, from the Go module proxy (wrapper modules build/kubernetes/<version> and build/etcd/<version>,
# written by build/update-gomod.sh). The versions are the process cluster's pins (versions.env) unless
# BC_K8S_VERSION and BC_ETCD_VERSION name others (kind passes its own, older pins: e2e/kind/lib.sh).
#
# Output: $BC_CACHE/k8s-$K8S_VERSION/bin/ (BC_CACHE defaults to ~/.cache/better-compute), one directory per release.
# A stamp file (pins.stamp) records a hash of the versions, the wrapper modules and the build flags; the build runs only
# when a binary is missing or the stamp differs. (Checkouts from before the per-version modules wrote `stamp`, a hash
# of other inputs: with its own name each kind of checkout keeps finding the shared v1.34.12 cache up to date.) Prints the bin directory on stdout (everything else goes to stderr).
#
# Env: BC_CACHE, BC_K8S_VERSION + BC_ETCD_VERSION, BC_BUILD_JOBS (go build -p, default 2), BC_FORCE_BUILD=1 to rebuild
# anyway.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
if [[ -n "${BC_K8S_VERSION:-}" || -n "${BC_ETCD_VERSION:-}" ]]; then
  [[ -n "${BC_K8S_VERSION:-}" && -n "${BC_ETCD_VERSION:-}" ]] ||
    { echo "build.sh: BC_K8S_VERSION and BC_ETCD_VERSION go together" >&2; exit 2; }
  K8S_VERSION="$BC_K8S_VERSION"; ETCD_VERSION="$BC_ETCD_VERSION"
fi
k8s_mod="$here/build/kubernetes/$K8S_VERSION"
etcd_mod="$here/build/etcd/$ETCD_VERSION"
for m in "$k8s_mod" "$etcd_mod"; do
  [[ -f "$m/go.sum" ]] || { echo "build.sh: no wrapper module $m: run build/update-gomod.sh" >&2; exit 1; }
done

cache="${BC_CACHE:-$HOME/.cache/better-compute}"
out="$cache/k8s-$K8S_VERSION"
bindir="$out/bin"
jobs="${BC_BUILD_JOBS:-2}"
k8s_bins=(kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet kubectl kubeadm)
all_bins=("${k8s_bins[@]}" etcd)

minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
vpkg=k8s.io/component-base/version
cvpkg=k8s.io/client-go/pkg/version
xflags=""
for p in $vpkg $cvpkg; do
  xflags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
  xflags+=" -X $p.buildDate=1970-01-01T00:00:00Z"
done
k8s_ldflags="-s -w$xflags"
etcd_ldflags="-s -w"

if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then export PATH="/usr/local/go/bin:$PATH"; fi
command -v go >/dev/null || { echo "build.sh: the Go toolchain is needed (go not on PATH)" >&2; exit 1; }

stamp_input() {
  echo "K8S_VERSION=$K8S_VERSION ETCD_VERSION=$ETCD_VERSION"
  cat "$k8s_mod/go.mod" "$k8s_mod/go.sum" "$etcd_mod/go.mod" "$etcd_mod/go.sum"
  echo "$k8s_ldflags|$etcd_ldflags|$(go env GOVERSION)"
}
want_stamp="$(stamp_input | sha256sum | cut -d' ' -f1)"

up_to_date() {
  [[ -f "$out/pins.stamp" && "$(cat "$out/pins.stamp")" == "$want_stamp" ]] || return 1
  for b in "${all_bins[@]}"; do [[ -x "$bindir/$b" ]] || return 1; done
}

if [[ "${BC_FORCE_BUILD:-0}" != 1 ]] && up_to_date; then
  echo "$bindir"
  exit 0
fi

mkdir -p "$out"
exec 9>"$out/.build.lock"
flock 9
if [[ "${BC_FORCE_BUILD:-0}" != 1 ]] && up_to_date; then echo "$bindir"; exit 0; fi

# Other work shares these 2 cores: build at low priority, at most $jobs packages at a time (linking kubelet or
# kube-apiserver takes a few GiB each; two at once fit in 24 GiB).
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOMAXPROCS="${GOMAXPROCS:-2}"
export GOCACHE="${BC_GOCACHE:-$cache/go-build}"
tmp="$out/bin.tmp"
rm -rf "$tmp"; mkdir -p "$tmp"
start=$(date +%s)
echo "build.sh: building Kubernetes $K8S_VERSION and etcd $ETCD_VERSION into $bindir (cold build: ~30-60 min on 2 cores)" >&2
(
  cd "$k8s_mod"
  pkgs=(); for b in "${k8s_bins[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
  nice -n 10 go build -p "$jobs" -trimpath -ldflags="$k8s_ldflags" -o "$tmp/" "${pkgs[@]}"
)
(
  cd "$etcd_mod"
  nice -n 10 go build -p "$jobs" -trimpath -ldflags="$etcd_ldflags" -o "$tmp/etcd" go.etcd.io/etcd/server/v3
)
rm -rf "$bindir"; mv "$tmp" "$bindir"
echo "$want_stamp" > "$out/pins.stamp"
echo "build.sh: built in $(( $(date +%s) - start ))s" | tee "$out/build-time.txt" >&2
echo "$bindir"
