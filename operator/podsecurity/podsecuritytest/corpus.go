// Package podsecuritytest holds the stacks that both Pod Security checks
// of a stack are tested with: the catalog chart's admission policy (on a
// real API server, on the spec) and the operator's check (the
// pod-security-admission library, on the rendered pods). Both must reach
// the same verdict on every case, so the two cannot drift.
package podsecuritytest

import (
	"fmt"

	"sigs.k8s.io/yaml"

	"github.com/titanml/inference-stack-operator/e2e/harness/samples"
)

// Case is a stack's spec and what Pod Security makes of it.
type Case struct {
	Name string
	// Spec is the stack's spec, in YAML (see Values).
	Spec string
	// NonRoot adds to the spec what "restricted" needs beyond the chart's
	// defaults: the pods run as a non-root user.
	NonRoot bool
	// Baseline and Restricted say whether the stack is refused at each
	// level (at privileged nothing is).
	Baseline, Restricted bool
	// Field is what the admission policy's message names (the spec path,
	// and for restricted-only cases what is missing).
	Field string
}

// nonRoot makes a spec comply with "restricted" as far as the chart's
// defaults do not: the pods run as a non-root user.
const nonRoot = `gateway: {podSecurityContext: {runAsNonRoot: true}}
applicationTemplate: {podSecurityContext: {runAsNonRoot: true, fsGroup: 1000}}
`

// Values is the case's spec, with the non-root settings merged in when
// NonRoot is set (the spec's own settings win).
func (c Case) Values() (map[string]any, error) {
	spec := map[string]any{}
	if err := yaml.Unmarshal([]byte(c.Spec), &spec); err != nil {
		return nil, fmt.Errorf("case %s: %w", c.Name, err)
	}
	if !c.NonRoot {
		return spec, nil
	}
	base := map[string]any{}
	if err := yaml.Unmarshal([]byte(nonRoot), &base); err != nil {
		return nil, err
	}
	merge(base, spec)
	return base, nil
}

// YAML is Values as YAML.
func (c Case) YAML() (string, error) {
	v, err := c.Values()
	if err != nil {
		return "", err
	}
	out, err := yaml.Marshal(v)
	return string(out), err
}

// merge merges src into dst, maps key by key.
func merge(dst, src map[string]any) {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				merge(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
}

// Cases covers every class of what Pod Security forbids that a stack's
// spec can express, and stacks that must pass.
var Cases = []Case{
	// Stacks that run.
	{Name: "documented example", Spec: samples.ExampleSpec, Restricted: true, Field: "does not set runAsNonRoot: true"},
	{Name: "example, non-root", NonRoot: true, Spec: samples.ExampleSpec},
	{Name: "persistent models volume", NonRoot: true, Spec: "applications: {m: {modelsVolume: {persistentVolumeClaim: {claimName: models}}}}\n"},
	{Name: "Secret and ConfigMap volumes", NonRoot: true, Spec: "applications: {m: {volumes: [{name: s, secret: {secretName: credentials}}, {name: c, configMap: {name: settings}}], volumeMounts: [{name: s, mountPath: /s}]}}\n"},
	{Name: "safe sysctl", NonRoot: true, Spec: "applications: {m: {podSecurityContext: {runAsNonRoot: true, sysctls: [{name: net.ipv4.tcp_syncookies, value: \"1\"}]}}}\n"},
	{Name: "NET_BIND_SERVICE", NonRoot: true, Spec: "gateway: {securityContext: {capabilities: {add: [NET_BIND_SERVICE], drop: [ALL]}}}\n"},
	{Name: "RuntimeDefault AppArmor", NonRoot: true, Spec: "gateway: {securityContext: {appArmorProfile: {type: RuntimeDefault}}}\n"},
	{Name: "probe without host", NonRoot: true, Spec: "gateway: {livenessProbe: {httpGet: {path: /healthz, port: 3001}}}\n"},

	// Refused at baseline (and so at restricted).
	{Name: "privileged", Spec: "gateway: {securityContext: {privileged: true}}\n", Baseline: true, Restricted: true, Field: "spec.gateway.securityContext.privileged is true"},
	{Name: "capability NET_ADMIN", Spec: "applications: {a: {securityContext: {capabilities: {add: [NET_ADMIN], drop: [ALL]}}}}\n", Baseline: true, Restricted: true, Field: "spec.applications.a.securityContext.capabilities.add has NET_ADMIN"},
	{Name: "capability SYS_ADMIN in the template", Spec: "applicationTemplate: {securityContext: {capabilities: {add: [SYS_ADMIN]}}}\napplications: {a: {}}\n", Baseline: true, Restricted: true, Field: "spec.applicationTemplate.securityContext.capabilities.add has SYS_ADMIN"},
	{Name: "hostPath volume", Spec: "applicationTemplate: {volumes: [{name: host, hostPath: {path: /}}]}\napplications: {a: {}}\n", Baseline: true, Restricted: true, Field: "spec.applicationTemplate.volumes[host] is hostPath"},
	{Name: "hostPath models volume", Spec: "applications: {m: {modelsVolume: {hostPath: {path: /var/lib/models}}}}\n", Baseline: true, Restricted: true, Field: "spec.applications.m.modelsVolume is hostPath"},
	{Name: "nfs volume", Spec: "gateway: {volumes: [{name: share, nfs: {server: 10.0.0.9, path: /export}}]}\n", Baseline: true, Restricted: true, Field: "spec.gateway.volumes[share] is nfs"},
	{Name: "iscsi models volume", Spec: "applications: {m: {modelsVolume: {iscsi: {targetPortal: 10.0.0.9, iqn: iqn.2001-04.com.example:x, lun: 0}}}}\n", Baseline: true, Restricted: true, Field: "spec.applications.m.modelsVolume is iscsi"},
	{Name: "gitRepo volume", Spec: "gateway: {volumes: [{name: code, gitRepo: {repository: https://example.com/x.git}}]}\n", Baseline: true, Restricted: true, Field: "spec.gateway.volumes[code] is gitRepo"},
	{Name: "unconfined seccomp (pod)", Spec: "gateway: {podSecurityContext: {seccompProfile: {type: Unconfined}}}\n", Baseline: true, Restricted: true, Field: "spec.gateway.podSecurityContext.seccompProfile.type is Unconfined"},
	{Name: "unconfined seccomp (container)", Spec: "applications: {a: {securityContext: {seccompProfile: {type: Unconfined}}}}\n", Baseline: true, Restricted: true, Field: "spec.applications.a.securityContext.seccompProfile.type is Unconfined"},
	{Name: "unconfined AppArmor", Spec: "gateway: {securityContext: {appArmorProfile: {type: Unconfined}}}\n", Baseline: true, Restricted: true, Field: "spec.gateway.securityContext.appArmorProfile.type is Unconfined"},
	{Name: "unconfined AppArmor annotation", Spec: "applications: {a: {podAnnotations: {container.apparmor.security.beta.kubernetes.io/a: unconfined}}}\n", Baseline: true, Restricted: true, Field: "spec.applications.a.podAnnotations sets an AppArmor profile"},
	{Name: "SELinux type", Spec: "gateway: {securityContext: {seLinuxOptions: {type: spc_t}}}\n", Baseline: true, Restricted: true, Field: "spec.gateway.securityContext.seLinuxOptions"},
	{Name: "SELinux user", Spec: "applications: {a: {podSecurityContext: {seLinuxOptions: {user: system_u}}}}\n", Baseline: true, Restricted: true, Field: "spec.applications.a.podSecurityContext.seLinuxOptions"},
	{Name: "unmasked /proc", Spec: "gateway: {securityContext: {procMount: Unmasked}}\n", Baseline: true, Restricted: true, Field: "spec.gateway.securityContext.procMount is Unmasked"},
	{Name: "unsafe sysctl", Spec: "applications: {a: {podSecurityContext: {sysctls: [{name: kernel.msgmax, value: \"65536\"}]}}}\n", Baseline: true, Restricted: true, Field: "spec.applications.a.podSecurityContext.sysctls has kernel.msgmax"},
	{Name: "Windows host process", Spec: "gateway: {podSecurityContext: {windowsOptions: {hostProcess: true}}}\n", Baseline: true, Restricted: true, Field: "spec.gateway.podSecurityContext.windowsOptions.hostProcess is true"},
	{Name: "probe to the metadata endpoint", Spec: "gateway: {readinessProbe: {httpGet: {host: 169.254.169.254, path: /latest/meta-data/, port: 80}}}\n", Baseline: true, Restricted: true, Field: "spec.gateway.readinessProbe sets a host"},
	{Name: "TCP probe to another host", Spec: "applications: {a: {livenessProbe: {tcpSocket: {host: 10.0.0.1, port: 443}}}}\n", Baseline: true, Restricted: true, Field: "spec.applications.a.livenessProbe sets a host"},
	{Name: "an existing ServiceAccount", Spec: "serviceAccount: {create: false, name: builder}\n", Baseline: true, Restricted: true, Field: "spec.serviceAccount.create is false"},

	// Refused at restricted only.
	{Name: "capability CHOWN", NonRoot: true, Spec: "gateway: {securityContext: {capabilities: {add: [CHOWN], drop: [ALL]}}}\n", Restricted: true, Field: "spec.gateway.securityContext.capabilities.add has CHOWN"},
	{Name: "privilege escalation", NonRoot: true, Spec: "applications: {a: {securityContext: {allowPrivilegeEscalation: true}}}\n", Restricted: true, Field: "spec.applications.a.securityContext.allowPrivilegeEscalation is true"},
	{Name: "root user", NonRoot: true, Spec: "gateway: {securityContext: {runAsUser: 0}}\n", Restricted: true, Field: "spec.gateway.securityContext.runAsUser is 0"},
	{Name: "runAsNonRoot false", NonRoot: true, Spec: "applications: {a: {securityContext: {runAsNonRoot: false}}}\n", Restricted: true, Field: "spec.applications.a.securityContext.runAsNonRoot is false"},
	{Name: "capabilities not dropped", NonRoot: true, Spec: "gateway: {securityContext: {capabilities: {drop: [NET_RAW]}}}\n", Restricted: true, Field: "spec.gateway.securityContext.capabilities.drop does not have ALL"},
}
