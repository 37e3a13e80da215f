#!/usr/bin/env bash
# Builds the Kueue manager (sigs.k8s.io/kueue/cmd/kueue at the version required in build/kueue/go.mod) from the Go
# module proxy, and copies its CRDs and its manager ClusterRole from the module's config/components/, once:
#   $BC_CACHE/kueue-<version>/bin/kueue          the manager, run as a host process by the Kueue cluster tests
#   $BC_CACHE/kueue-<version>/manifests/crds.yaml the CRDs (config/components/crd/bases, no conversion webhook)
#   $BC_CACHE/kueue-<version>/manifests/rbac.yaml the manager's ClusterRole (config/components/rbac/role.yaml)
# BC_CACHE defaults to ~/.cache/better-compute. A stamp of the wrapper module, this script and the Go version says when to
# build again (BC_FORCE_BUILD=1 rebuilds anyway). Prints the output directory on stdout; everything else goes to stderr.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
module="$here/build/kueue"
if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then export PATH="/usr/local/go/bin:$PATH"; fi
command -v go >/dev/null || { echo "build-kueue.sh: the Go toolchain is needed (go not on PATH)" >&2; exit 1; }
version="$(awk '$1 == "require" && $2 == "sigs.k8s.io/kueue" { print $3 }' "$module/go.mod")"
[[ -n "$version" ]] || { echo "build-kueue.sh: no sigs.k8s.io/kueue require line in $module/go.mod" >&2; exit 1; }
cache="${BC_CACHE:-$HOME/.cache/better-compute}"
out="$cache/kueue-$version"
ldflags="-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$version -X sigs.k8s.io/kueue/pkg/version.BuildDate=1970-01-01"
stamp="$(cat "$module/go.mod" "$module/go.sum" "$0" <(go env GOVERSION) | sha256sum | cut -d' ' -f1)"

up_to_date() {
  [[ -x "$out/bin/kueue" && -s "$out/manifests/crds.yaml" && -s "$out/manifests/rbac.yaml" ]] || return 1
  [[ -f "$out/stamp" && "$(cat "$out/stamp")" == "$stamp" ]]
}
if [[ "${BC_FORCE_BUILD:-0}" != 1 ]] && up_to_date; then echo "$out"; exit 0; fi
mkdir -p "$out"
exec 9>"$out/.build.lock"
flock 9
if [[ "${BC_FORCE_BUILD:-0}" != 1 ]] && up_to_date; then echo "$out"; exit 0; fi

start=$(date +%s)
echo "build-kueue.sh: building Kueue $version into $out (cold build: ~15-45 min on 2 shared cores)" >&2
rm -rf "$out/bin.tmp" "$out/manifests.tmp"; mkdir -p "$out/bin.tmp" "$out/manifests.tmp"
(
  cd "$module"
  go mod download sigs.k8s.io/kueue
  CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=readonly" GOMAXPROCS="${GOMAXPROCS:-2}" \
    GOCACHE="${BC_GOCACHE:-$cache/go-build}" \
    nice -n 10 go build -p "${BC_BUILD_JOBS:-2}" -trimpath -ldflags "$ldflags" -o "$out/bin.tmp/kueue" sigs.k8s.io/kueue/cmd/kueue
)
src="$(cd "$module" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)"
# The CRD bases as they are in the module: one version stored (v1beta2), no conversion webhook (the manager runs with
# its webhooks off on the process cluster: docs/adr/0041-kueue-admission-check.md).
for f in "$src"/config/components/crd/bases/*.yaml; do echo "---"; cat "$f"; done > "$out/manifests.tmp/crds.yaml"
cp "$src/config/components/rbac/role.yaml" "$out/manifests.tmp/rbac.yaml"
rm -rf "$out/bin" "$out/manifests"
mv "$out/bin.tmp" "$out/bin"; mv "$out/manifests.tmp" "$out/manifests"
echo "$stamp" > "$out/stamp"
echo "build-kueue.sh: built in $(( $(date +%s) - start ))s" | tee "$out/build-time.txt" >&2
echo "$out"
