// Command pause is the real node's sandbox ("pause") image, built by the
// harness so that no image has to be pulled from outside the machine: it
// holds a pod's namespaces until it is told to stop, reaping any orphan
// that a shared PID namespace hands it.
//
// Two subcommands let the harness's own tests use the same image for a
// workload container without a shell in it:
//
//	pause echo WORD...   print the words and exit (kubectl exec)
//	pause apiserver      GET /version from the API server through the
//	                     `kubernetes` Service with the pod's service-account
//	                     token, print the answer, then hold like pause
//	pause listen PORT    accept TCP connections on PORT (answering each
//	                     with the pod's host name), then hold like pause
package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "echo":
			fmt.Println(strings.Join(os.Args[2:], " "))
			return
		case "apiserver":
			if err := apiserverVersion(); err != nil {
				fmt.Println("apiserver:", err)
			}
		case "listen":
			if len(os.Args) != 3 {
				fmt.Fprintln(os.Stderr, "pause: listen PORT")
				os.Exit(2)
			}
			if err := listen(os.Args[2]); err != nil {
				fmt.Fprintln(os.Stderr, "pause: listen:", err)
				os.Exit(1)
			}
		default:
			fmt.Fprintf(os.Stderr, "pause: unknown subcommand %q\n", os.Args[1])
			os.Exit(2)
		}
	}
	fmt.Println("pause: holding the pod's namespaces")
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			return
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}

// apiserverVersion asks the API server for its version the way in-cluster
// clients do: the Service address from the environment the kubelet sets,
// the cluster CA and the token it mounts.
func apiserverVersion() error {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return fmt.Errorf("KUBERNETES_SERVICE_HOST/PORT not set")
	}
	token, err := os.ReadFile(saDir + "/token")
	if err != nil {
		return err
	}
	ca, err := os.ReadFile(saDir + "/ca.crt")
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return fmt.Errorf("no certificate in %s/ca.crt", saDir)
	}
	client := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
	}
	req, err := http.NewRequest(http.MethodGet, "https://"+net.JoinHostPort(host, port)+"/version", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return err
	}
	fmt.Printf("apiserver %s via %s: %s\n", resp.Status, net.JoinHostPort(host, port), strings.Join(strings.Fields(string(body)), " "))
	return nil
}

// listen answers every TCP connection on port with the host name, in the
// background, so that Services backed by this pod can be called.
func listen(port string) error {
	l, err := net.Listen("tcp", ":"+port)
	if err != nil {
		return err
	}
	name, _ := os.Hostname()
	fmt.Printf("listening on %s\n", l.Addr())
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, name+"\n")
			_ = c.Close()
		}
	}()
	return nil
}
