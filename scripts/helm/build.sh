#!/usr/bin/env bash
# Builds the pinned Helm (scripts/helm/module: helm.sh/helm/v4 at the version in its go.mod) from the Go module proxy,
# into $BC_CACHE/helm-<version>/helm (BC_CACHE defaults to ~/.cache/better-compute), once: a stamp of the module's
# go.mod and go.sum and the Go version says when to build again. Prints the binary's path on stdout.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
module="$here/module"
if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then export PATH="/usr/local/go/bin:$PATH"; fi
command -v go >/dev/null || { echo "helm/build.sh: the Go toolchain is needed (go not on PATH)" >&2; exit 1; }
version="$(awk '$1 == "require" && $2 == "helm.sh/helm/v4" { print $3 }' "$module/go.mod")"
[[ -n "$version" ]] || { echo "helm/build.sh: no helm.sh/helm/v4 require line in $module/go.mod" >&2; exit 1; }
cache="${BC_CACHE:-$HOME/.cache/better-compute}"
out="$cache/helm-$version"
stamp="$(cat "$module/go.mod" "$module/go.sum" <(go env GOVERSION) | sha256sum | cut -d' ' -f1)"
if [[ -x "$out/helm" && -f "$out/stamp" && "$(cat "$out/stamp")" == "$stamp" ]]; then echo "$out/helm"; exit 0; fi
mkdir -p "$out"
exec 9>"$out/.build.lock"
flock 9
if [[ -x "$out/helm" && -f "$out/stamp" && "$(cat "$out/stamp")" == "$stamp" ]]; then echo "$out/helm"; exit 0; fi
echo "helm/build.sh: building Helm $version (once; cached in $out)" >&2
(
  cd "$module"
  CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=readonly" GOMAXPROCS="${GOMAXPROCS:-2}" GOCACHE="${BC_GOCACHE:-$cache/go-build}" \
    nice go build -trimpath -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$version" -o "$out/helm.new" helm.sh/helm/v4/cmd/helm
)
mv "$out/helm.new" "$out/helm"
echo "$stamp" > "$out/stamp"
echo "$out/helm"
