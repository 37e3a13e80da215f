//go:build tools

// Package tools pins Helm's command for `go build helm.sh/helm/v4/cmd/helm`.
package tools

import _ "helm.sh/helm/v4/cmd/helm"
