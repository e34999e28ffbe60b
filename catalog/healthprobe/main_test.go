package main

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/operator-framework/operator-registry/pkg/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// serve starts a gRPC server on a loopback port with register applied and
// returns its address.
func serve(t *testing.T, register func(*grpc.Server)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	register(s)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return l.Addr().String()
}

func runProbe(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	return code, out.String() + errOut.String()
}

// TestProbe checks every outcome against real gRPC servers, among them the
// health service that `opm serve` registers (operator-registry's own).
func TestProbe(t *testing.T) {
	opm := serve(t, func(s *grpc.Server) { healthpb.RegisterHealthServer(s, server.NewHealthServer()) })
	notServing := serve(t, func(s *grpc.Server) {
		h := health.NewServer()
		h.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
		healthpb.RegisterHealthServer(s, h)
	})
	noHealth := serve(t, func(*grpc.Server) {})
	// A port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	_, port, _ := strings.Cut(opm, ":")

	for _, tc := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"opm's health service", []string{"-addr=" + opm}, exitServing, "SERVING"},
		{"port only, as OLM's probe writes it", []string{"-addr=:" + port}, exitServing, "SERVING"},
		{"not serving", []string{"-addr=" + notServing}, exitUnhealthy, "NOT_SERVING"},
		{"no health service", []string{"-addr=" + noHealth}, exitRPC, "does not implement"},
		{"nothing listening", []string{"-addr=" + closed, "-connect-timeout=300ms"}, exitConnection, "no connection within 300ms"},
		{"no address", nil, exitBadArgs, "usage"},
		{"unknown flag", []string{"-addr=" + opm, "-tls"}, exitBadArgs, "-tls"},
		{"zero timeout", []string{"-addr=" + opm, "-rpc-timeout=0s"}, exitBadArgs, "positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			code, out := runProbe(t, tc.args...)
			if code != tc.code || !strings.Contains(out, tc.says) {
				t.Errorf("exit %d %q, want %d and a message containing %q", code, out, tc.code, tc.says)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %s", d)
			}
		})
	}
}
