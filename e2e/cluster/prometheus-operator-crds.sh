#!/usr/bin/env bash
# Prints the directory of the Prometheus Operator's CRDs (ServiceMonitor, PrometheusRule, ...) at a pinned release,
# fetched as the Go module github.com/prometheus-operator/prometheus-operator through the Go module proxy (cached in the
# module cache). The tests apply them so that deploy/monitoring/ is checked against the real schemas.
set -euo pipefail
version=v0.85.0
if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then export PATH="/usr/local/go/bin:$PATH"; fi
dir="$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "github.com/prometheus-operator/prometheus-operator@$version" \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[[ -d "$dir/example/prometheus-operator-crd" ]] || { echo "prometheus-operator-crds.sh: no CRDs in $dir" >&2; exit 1; }
echo "$dir/example/prometheus-operator-crd"
