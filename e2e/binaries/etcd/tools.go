//go:build tools

// Package etcd pins the etcd server built for the local test cluster (see
// ../README.md). etcd's main package is the root of go.etcd.io/etcd/server/v3,
// and `go install` refuses that module because its go.mod has replace
// directives, so it is built from this wrapper with
// `go build go.etcd.io/etcd/server/v3`. The import only makes `go mod tidy`
// record its dependencies in go.sum.
package etcd

import _ "go.etcd.io/etcd/server/v3"
