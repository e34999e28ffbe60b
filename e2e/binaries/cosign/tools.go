//go:build tools

// Package cosign pins the cosign CLI, which the supply-chain test runs
// against the images `isctl push --sign-key` signs (see ../README.md). The
// import only makes `go mod tidy` record its dependencies in go.sum.
package cosign

import (
	_ "github.com/sigstore/cosign/v2/cmd/cosign"
)
