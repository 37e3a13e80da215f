//go:build tools

// Package tools names the etcd command that e2e/cluster/build.sh builds, so that `go mod tidy` keeps them.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
)
