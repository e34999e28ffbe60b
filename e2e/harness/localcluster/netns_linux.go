package localcluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// dialInNetNS opens a TCP connection to addr from inside the network
// namespace at nsPath (the node's, or a pod's), so that the packets take
// the path a process there would: through that namespace's routes, its
// iptables rules and, from a pod, the node's bridge. The socket is created
// on an OS thread moved into the namespace; that thread is never handed
// back to the scheduler (the goroutine exits locked, so the runtime ends
// the thread), and the connection keeps the namespace it was created in.
func dialInNetNS(ctx context.Context, nsPath, addr string, timeout time.Duration) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: this thread's namespace is no longer the
		// process's, so it must die with the goroutine.
		f, err := os.Open(nsPath)
		if err != nil {
			ch <- result{err: fmt.Errorf("opening network namespace: %w", err)}
			return
		}
		err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
		f.Close()
		if err != nil {
			ch <- result{err: fmt.Errorf("entering network namespace %s: %w", nsPath, err)}
			return
		}
		conn, err := (&net.Dialer{Timeout: timeout}).DialContext(ctx, "tcp", addr)
		ch <- result{conn, err}
	}()
	r := <-ch
	return r.conn, r.err
}
