// Package olmlocal runs real OLM v1 — catalogd and operator-controller of
// the pinned release (Version), built from the Go module proxy and cached —
// against a local cluster (e2e/localcluster) with no Docker and no
// downloads beyond the module proxy:
//
//   - the release manifest's API objects (CRDs, namespace, service
//     accounts, RBAC) from the same module (manifests/standard.yaml);
//   - one local CA and a serving certificate for localhost/127.0.0.1;
//   - an OCI registry (go-containerregistry) over TLS on 127.0.0.1;
//   - both controllers as host processes, each authenticated with a token of
//     its own service account (so exactly its release RBAC applies), in a
//     private mount namespace where /var/run/secrets/kubernetes.io/serviceaccount
//     exists for it, as uid/gid 65532 — nothing on the host changes;
//   - catalogd's mutating webhook re-pointed at the host process.
//
// KWOK pods run nothing, so DeploymentRunner plays the kubelet for the
// operator's Deployment that OLM creates from the bundle: it runs the binary
// extracted from the image the Deployment pins, with its args and service
// account, and restarts it when OLM upgrades the Deployment.
//
// Needs root (mount namespace, uid switch) and util-linux (unshare,
// setpriv); CheckHostProcessSupport says why not.
package olmlocal
