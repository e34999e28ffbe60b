// Package localcluster runs a real, local Kubernetes control plane with
// simulated nodes for integration tests and demos, with no Docker and no
// downloads beyond the Go module proxy. Linux only (it reads /proc).
//
// etcd, kube-apiserver, kube-controller-manager and kube-scheduler are the
// real programs, built from pinned Go modules (see e2e/binaries) and cached
// per version under CacheDir()/bin, so only the first run on a machine pays
// the ~6 minute build. Nodes and pod lifecycles are simulated by KWOK
// (sigs.k8s.io/kwok): the scheduler really places pods by nodeSelector,
// taints and extended resources such as nvidia.com/gpu, and KWOK marks bound
// pods Running, but no container ever runs. kwokctl's "binary" runtime
// starts the components as background host processes listening on
// 127.0.0.1 only. A cluster starts in about 5 s and uses about 550 MiB.
//
// Options.RealNode adds a real node beside the simulated ones (see
// realnode.go): a kubelet and kube-proxy built from the same pinned
// Kubernetes module, containerd and runc from Debian's packages, all in a
// network namespace of the harness's own, with a pause image the harness
// builds. Pods scheduled there really run, pulled from a registry on this
// machine (Cluster.TrustRegistry, Cluster.ImportImage); Stop removes
// everything the node created, and Cluster.RealNodeLeftovers proves it. It
// needs root and cgroups (CheckRealNode says what is missing).
//
// One cluster per test:
//
//	c := localcluster.StartForTest(t, localcluster.Options{})
//	cs := kubernetes.NewForConfigOrDie(c.RESTConfig())
//
// One cluster per test package:
//
//	var cluster *localcluster.Cluster
//
//	func TestMain(m *testing.M) {
//		c, err := localcluster.Start(context.Background(), localcluster.Options{Log: os.Stderr})
//		if err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(1)
//		}
//		cluster = c
//		code := m.Run()
//		if err := c.Stop(context.Background()); err != nil {
//			fmt.Fprintln(os.Stderr, err)
//		}
//		os.Exit(code)
//	}
//
// Outside tests use Start and Cluster.Stop, or the e2e/cmd/localcluster
// command (up/down) for a cluster that outlives the starting process.
package localcluster
