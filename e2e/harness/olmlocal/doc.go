// Package olmlocal runs real OLM v1 — catalogd and operator-controller of
// the pinned release (Version), built from the Go module proxy and cached —
// against a local cluster (e2e/harness/localcluster) with no Docker and no
// downloads beyond the module proxy:
//
//   - the release manifest's API objects (CRDs, namespace, service
//     accounts, RBAC) from the same module (manifests/standard.yaml);
//   - one local CA that signs every serving certificate;
//   - an OCI registry (go-containerregistry) over TLS on an address of this
//     machine (127.0.0.1, or the host end of the real node's veth pair).
//
// Then, on a cluster with a real node (Options.Pods), the controllers run
// as pods: their binaries are packaged as images (localcluster's image
// assembly), pushed to the registry by digest and deployed from the
// release manifest's Services, Deployments and NetworkPolicies; the
// harness issues the Secrets cert-manager's Certificates would, puts its CA
// in the webhook configuration, and maps catalogd's Service name to its
// ClusterIP with hostAliases (there is no cluster DNS).
//
// Without a real node they run as host processes instead: each
// authenticated with a token of its own service account (so exactly its
// release RBAC applies), in a private mount namespace where
// /var/run/secrets/kubernetes.io/serviceaccount exists for it, as uid/gid
// 65532 — nothing on the host changes — with catalogd's mutating webhook
// re-pointed at the host process. KWOK pods run nothing there, so
// DeploymentRunner plays the kubelet for the operator's Deployment that OLM
// creates from the bundle: it runs the binary extracted from the image the
// Deployment pins, with its args and service account, and restarts it when
// OLM upgrades the Deployment. That path needs root and util-linux
// (unshare, setpriv); CheckHostProcessSupport says why not.
package olmlocal
