//go:build tools

// Package helmoperator pins the stock helm-operator (helm-operator-plugins
// v0.9.1's `helm-operator run`), which the benchmark (e2e/bench/operatorbench) runs side
// by side with this project's operator (see ../README.md). The command's
// main package is the root of github.com/operator-framework/helm-operator-plugins,
// so it is built from this wrapper with `go build
// github.com/operator-framework/helm-operator-plugins`, with the exact
// dependency versions upstream's go.mod names. The import only makes `go mod
// tidy` record its dependencies in go.sum.
package helmoperator

import _ "github.com/operator-framework/helm-operator-plugins"
