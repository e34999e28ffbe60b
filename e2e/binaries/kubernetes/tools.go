//go:build tools

// Package kubernetes pins the Kubernetes commands built for the local test
// cluster (see ../README.md): the control plane, and the real node's kubelet
// and kube-proxy. The imports exist only so that
// `go mod tidy` records every dependency of these commands in go.sum; the
// binaries are built with `go build k8s.io/kubernetes/cmd/...` from this
// directory.
package kubernetes

//go:generate go run gen.go

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
