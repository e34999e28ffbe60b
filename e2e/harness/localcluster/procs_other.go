//go:build !linux

package localcluster

import (
	"context"
	"errors"
	"net"
	"time"
)

// The harness targets Linux (it reads /proc); these stubs only keep the
// package compiling elsewhere.

func becomeSubreaper() {}

func reapChild(int) {}

func dialInNetNS(context.Context, string, string, time.Duration) (net.Conn, error) {
	return nil, errors.New("network namespaces need Linux")
}
