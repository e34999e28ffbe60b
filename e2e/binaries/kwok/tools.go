//go:build tools

// Package kwok pins KWOK (simulated nodes and pods) and kwokctl (which starts
// the local cluster) for the local test cluster (see ../README.md). The
// imports only make `go mod tidy` record their dependencies in go.sum.
package kwok

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
	_ "sigs.k8s.io/kwok/cmd/kwokctl"
)
