"""The local cluster's programs, as runfiles of the tests that start one.

A test that starts the local cluster (e2e/harness/localcluster) takes
CLUSTER_BINARIES as data and names their runfiles in
INFERENCE_STACK_E2E_BINARIES with CLUSTER_BINARIES_PATHS, followed by the
other programs it runs (see e2e/BUILD.bazel).
"""

# kube-apiserver and the other Kubernetes programs, etcd, kwok.
CLUSTER_BINARIES = [
    "@e2e_etcd//:binaries",
    "@e2e_kubernetes//:binaries",
    "@e2e_kwok//:binaries",
]

# Their runfiles, in the order the harness looks them up.
CLUSTER_BINARIES_PATHS = "$(rlocationpaths @e2e_kubernetes//:binaries) $(rlocationpaths @e2e_etcd//:binaries) $(rlocationpaths @e2e_kwok//:binaries)"
