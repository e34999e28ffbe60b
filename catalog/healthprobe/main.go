// Command grpc_health_probe asks a gRPC server for its health
// (grpc.health.v1.Health/Check) and exits 0 when it answers SERVING. It is
// shipped in the catalog image because OLM v0 runs that image as a pod and
// probes it with `grpc_health_probe -addr=:50051` (an exec probe, so the
// binary must be on the image's PATH). Only the flags OLM and common
// catalog pod specs use are supported; the exit codes are those of the
// widely used grpc-health-probe tool, so probe definitions written for it
// keep their meaning:
//
//	0 SERVING, 1 bad arguments, 2 connection failure, 3 RPC failure,
//	4 the server answered but is not SERVING
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Exit codes.
const (
	exitServing    = 0
	exitBadArgs    = 1
	exitConnection = 2
	exitRPC        = 3
	exitUnhealthy  = 4
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("grpc_health_probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "", "address of the gRPC server, host:port (\":50051\" means this host)")
	service := fs.String("service", "", "service name to check (empty: the server as a whole)")
	connectTimeout := fs.Duration("connect-timeout", time.Second, "timeout for establishing the connection")
	rpcTimeout := fs.Duration("rpc-timeout", time.Second, "timeout for the health check RPC")
	if err := fs.Parse(args); err != nil {
		return exitBadArgs
	}
	if *addr == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: grpc_health_probe -addr=host:port [-service=name] [-connect-timeout=1s] [-rpc-timeout=1s]")
		return exitBadArgs
	}
	if *connectTimeout <= 0 || *rpcTimeout <= 0 {
		fmt.Fprintln(stderr, "-connect-timeout and -rpc-timeout must be positive")
		return exitBadArgs
	}
	code, msg := probe(context.Background(), *addr, *service, *connectTimeout, *rpcTimeout)
	if code == exitServing {
		fmt.Fprintln(stdout, msg)
	} else {
		fmt.Fprintln(stderr, msg)
	}
	return code
}

// probe checks the health of service at addr and returns the exit code and
// a one-line explanation.
func probe(ctx context.Context, addr, service string, connectTimeout, rpcTimeout time.Duration) (int, string) {
	// A catalog pod's probe runs inside the pod: plaintext, as opm serves.
	conn, err := grpc.NewClient(passthrough(addr), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return exitBadArgs, fmt.Sprintf("error: invalid address %q: %v", addr, err)
	}
	defer conn.Close()
	// NewClient connects lazily: connect explicitly so that a server that is
	// not listening is reported as a connection failure, not an RPC one.
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	conn.Connect()
	for state := conn.GetState(); state != connectivity.Ready; state = conn.GetState() {
		if !conn.WaitForStateChange(cctx, state) {
			return exitConnection, fmt.Sprintf("error: connecting to %s: no connection within %s (last state %s)", addr, connectTimeout, conn.GetState())
		}
	}
	rctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(rctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		if s, ok := status.FromError(err); ok && s.Code() == codes.Unimplemented {
			return exitRPC, fmt.Sprintf("error: %s does not implement the grpc.health.v1.Health service", addr)
		}
		if errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded {
			return exitRPC, fmt.Sprintf("timeout: health check of %s took longer than %s", addr, rpcTimeout)
		}
		return exitRPC, fmt.Sprintf("error: health check of %s failed: %v", addr, err)
	}
	if st := resp.GetStatus(); st != healthpb.HealthCheckResponse_SERVING {
		return exitUnhealthy, fmt.Sprintf("service unhealthy (responded with %q)", st)
	}
	return exitServing, "status: SERVING"
}

// passthrough makes the gRPC client dial addr as given (":50051" included)
// rather than resolve it through DNS, which a catalog pod may not have.
func passthrough(addr string) string {
	return "passthrough:///" + addr
}
