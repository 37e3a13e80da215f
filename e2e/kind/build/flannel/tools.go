//go:build tools

// Package tools names flanneld's main package, so that `go mod tidy` keeps what it needs.
package tools

import _ "github.com/flannel-io/flannel"
