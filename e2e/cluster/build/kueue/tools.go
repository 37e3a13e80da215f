//go:build tools

// Package tools names the Kueue manager that e2e/cluster/build-kueue.sh builds, so that `go mod tidy` keeps it.
package tools

import (
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
