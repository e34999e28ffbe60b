//go:build !linux

package localcluster

// The harness targets Linux (it reads /proc); these stubs only keep the
// package compiling elsewhere.

func becomeSubreaper() {}

func reapChild(int) {}
