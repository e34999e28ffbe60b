package catalogchart

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"
)

// TestPodSecurityLists: the lists the admission policy checks stacks with
// (files/pod-security.yaml) are what the pinned Pod Security library, which
// the operator runs on the rendered pods, allows at its latest version.
func TestPodSecurityLists(t *testing.T) {
	data, err := os.ReadFile("files/pod-security.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var lists struct {
		Capabilities           []string `json:"capabilities"`
		RestrictedCapabilities []string `json:"restrictedCapabilities"`
		Sysctls                []string `json:"sysctls"`
		SELinuxTypes           []string `json:"seLinuxTypes"`
		VolumeTypes            []string `json:"volumeTypes"`
		ForbiddenVolumeTypes   []string `json:"forbiddenVolumeTypes"`
	}
	if err := yaml.UnmarshalStrict(data, &lists); err != nil {
		t.Fatal(err)
	}
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	baseline := api.LevelVersion{Level: api.LevelBaseline, Version: api.LatestVersion()}
	restricted := api.LevelVersion{Level: api.LevelRestricted, Version: api.LatestVersion()}
	yes, no := true, false
	// pod is a pod that complies with restricted, changed by change.
	pod := func(change func(*corev1.PodSpec)) *corev1.PodSpec {
		s := &corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &yes, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "c", Image: "i", SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: &no, Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			}}},
		}
		change(s)
		return s
	}
	allowed := func(lv api.LevelVersion, s *corev1.PodSpec) bool {
		return policy.AggregateCheckResults(eval.EvaluatePod(lv, &metav1.ObjectMeta{}, s)).Allowed
	}
	check := func(what string, candidates, want []string, lv api.LevelVersion, change func(*corev1.PodSpec, string)) {
		t.Helper()
		var got []string
		for _, c := range candidates {
			if allowed(lv, pod(func(s *corev1.PodSpec) { change(s, c) })) {
				got = append(got, c)
			}
		}
		slices.Sort(got)
		w := slices.Sorted(slices.Values(want))
		if !slices.Equal(got, w) {
			t.Errorf("%s: the library allows %v at %s, files/pod-security.yaml says %v", what, got, lv.Level, w)
		}
	}

	capabilities := strings.Fields(`AUDIT_CONTROL AUDIT_READ AUDIT_WRITE BLOCK_SUSPEND BPF CHECKPOINT_RESTORE CHOWN DAC_OVERRIDE
		DAC_READ_SEARCH FOWNER FSETID IPC_LOCK IPC_OWNER KILL LEASE LINUX_IMMUTABLE MAC_ADMIN MAC_OVERRIDE MKNOD NET_ADMIN
		NET_BIND_SERVICE NET_BROADCAST NET_RAW PERFMON SETFCAP SETGID SETPCAP SETUID SYSLOG SYS_ADMIN SYS_BOOT SYS_CHROOT
		SYS_MODULE SYS_NICE SYS_PACCT SYS_PTRACE SYS_RAWIO SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG WAKE_ALARM ALL`)
	addCap := func(s *corev1.PodSpec, c string) {
		s.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{corev1.Capability(c)}
	}
	check("capabilities", capabilities, lists.Capabilities, baseline, addCap)
	check("capabilities", capabilities, lists.RestrictedCapabilities, restricted, addCap)

	sysctls := append(slices.Clone(lists.Sysctls), "kernel.msgmax", "kernel.shmmax", "net.core.somaxconn", "net.ipv4.ip_forward",
		"net.ipv4.conf.all.route_localnet", "vm.swappiness", "net.ipv4.tcp_max_syn_backlog", "kernel.sem")
	check("sysctls", sysctls, lists.Sysctls, baseline, func(s *corev1.PodSpec, name string) {
		s.SecurityContext.Sysctls = []corev1.Sysctl{{Name: name, Value: "1"}}
	})

	types := append(slices.Clone(lists.SELinuxTypes), "spc_t", "unconfined_t", "container_logreader_t", "svirt_lxc_net_t")
	check("SELinux types", types, lists.SELinuxTypes, baseline, func(s *corev1.PodSpec, typ string) {
		s.SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{Type: typ}
	})

	// Every volume source of the API, allowed or forbidden, once.
	var all []string
	vt := reflect.TypeFor[corev1.VolumeSource]()
	for i := range vt.NumField() {
		name, _, _ := strings.Cut(vt.Field(i).Tag.Get("json"), ",")
		all = append(all, name)
	}
	if got, want := slices.Sorted(slices.Values(append(slices.Clone(lists.VolumeTypes), lists.ForbiddenVolumeTypes...))), slices.Sorted(slices.Values(all)); !slices.Equal(got, want) {
		t.Errorf("files/pod-security.yaml lists the volume sources %v; the API has %v", got, want)
	}
	check("volume types", all, lists.VolumeTypes, restricted, func(s *corev1.PodSpec, name string) {
		var src corev1.VolumeSource
		for i := range vt.NumField() {
			if tag, _, _ := strings.Cut(vt.Field(i).Tag.Get("json"), ","); tag == name {
				f := reflect.ValueOf(&src).Elem().Field(i)
				f.Set(reflect.New(f.Type().Elem()))
			}
		}
		s.Volumes = []corev1.Volume{{Name: "v", VolumeSource: src}}
	})
}
