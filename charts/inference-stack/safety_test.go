package inferencestack

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

const digestA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

// Images can be pinned by digest, in image.digest or in the tag.
func TestImageDigest(t *testing.T) {
	m := render(t, `
gateway: {image: {digest: `+digestA+`}}
applicationTemplate: {image: {tag: "1.2.3-gpu@`+digestA+`"}}
applications:
  tagged: {}
  both: {image: {tag: 1.2.3-gpu, digest: `+digestA+`}}
`)
	for name, want := range map[string]string{
		"my-inference-stack-gateway": "tytn/takeoff-pro@" + digestA,
		"my-inference-stack-tagged":  "tytn/takeoff-pro:1.2.3-gpu@" + digestA,
		"my-inference-stack-both":    "tytn/takeoff-pro:1.2.3-gpu@" + digestA,
	} {
		if got := container(t, deployment(t, m, name)).Image; got != want {
			t.Errorf("%s image = %s, want %s", name, got, want)
		}
	}
	// The template's tag carries a digest; an application adding another
	// digest would name the image twice.
	_, err := tryRender(t, `
applicationTemplate: {image: {tag: "1.2.3-gpu@`+digestA+`"}}
applications: {a: {image: {digest: `+digestA+`}}}
`)
	if err == nil || !strings.Contains(err.Error(), "not both") {
		t.Errorf("digest in tag and in digest: %v", err)
	}
}

// Readers get default cpu and memory requests only where the user set
// neither a request nor a limit for that resource.
func TestDefaultRequests(t *testing.T) {
	m := render(t, `
applications:
  plain: {}
  cpu-set: {resources: {requests: {cpu: 250m}}}
  mem-limit: {resources: {limits: {memory: 8Gi}}}
  all-set: {resources: {requests: {cpu: "4", memory: 16Gi}}}
gateway: {}
`)
	q := resource.MustParse
	for name, want := range map[string]corev1.ResourceList{
		"plain":     {corev1.ResourceCPU: q("1"), corev1.ResourceMemory: q("2Gi")},
		"cpu-set":   {corev1.ResourceCPU: q("250m"), corev1.ResourceMemory: q("2Gi")},
		"mem-limit": {corev1.ResourceCPU: q("1")},
		"all-set":   {corev1.ResourceCPU: q("4"), corev1.ResourceMemory: q("16Gi")},
	} {
		got := container(t, deployment(t, m, "my-inference-stack-"+name)).Resources.Requests
		if len(got) != len(want) {
			t.Errorf("%s requests = %v, want %v", name, got, want)
			continue
		}
		for r, w := range want {
			if g := got[r]; g.Cmp(w) != 0 {
				t.Errorf("%s request %s = %s, want %s", name, r, g.String(), w.String())
			}
		}
	}
	if r := container(t, deployment(t, m, "my-inference-stack-gateway")).Resources; len(r.Requests) != 0 {
		t.Errorf("the gateway got requests %v; the defaults are for readers", r.Requests)
	}
}

// The default models volume is bounded; a volume the user chose is kept
// as given.
func TestModelsVolumeSizeLimit(t *testing.T) {
	m := render(t, `
applications:
  default: {}
  unbounded: {modelsVolume: {emptyDir: {medium: Memory}}}
`)
	models := func(name string) corev1.VolumeSource {
		for _, v := range deployment(t, m, "my-inference-stack-"+name).Spec.Template.Spec.Volumes {
			if v.Name == "models" {
				return v.VolumeSource
			}
		}
		t.Fatalf("%s has no models volume", name)
		return corev1.VolumeSource{}
	}
	if ed := models("default").EmptyDir; ed == nil || ed.Medium != corev1.StorageMediumMemory || ed.SizeLimit == nil || ed.SizeLimit.String() != "32Gi" {
		t.Errorf("default models volume = %+v, want a memory emptyDir limited to 32Gi", ed)
	}
	if ed := models("unbounded").EmptyDir; ed == nil || ed.SizeLimit != nil {
		t.Errorf("the user's models volume was changed: %+v", ed)
	}
}

// The access token comes from a Secret, as an env var or a file; it is in
// no ConfigMap. A plain readerConfig.accessToken still works as before.
func TestAccessToken(t *testing.T) {
	m := render(t, `
applicationTemplate:
  accessTokenFrom: {secretKeyRef: {name: hf, key: token}}
applications:
  env: {}
  file: {accessTokenFrom: {secretKeyRef: {name: hf-file, key: tok}, mountAs: File}}
  named: {accessTokenFrom: {secretKeyRef: {name: hf, key: token}, envName: HF_TOKEN}}
`)
	envOf := func(app string) map[string]corev1.EnvVar {
		out := map[string]corev1.EnvVar{}
		for _, e := range container(t, deployment(t, m, "my-inference-stack-"+app)).Env {
			out[e.Name] = e
		}
		return out
	}
	fromSecret := func(name, key string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}}
	}
	if e := envOf("env")["TAKEOFF_ACCESS_TOKEN"]; !reflect.DeepEqual(e.ValueFrom, fromSecret("hf", "token")) || e.Value != "" {
		t.Errorf("env mode: TAKEOFF_ACCESS_TOKEN = %+v", e)
	}
	if e := envOf("named")["HF_TOKEN"]; !reflect.DeepEqual(e.ValueFrom, fromSecret("hf", "token")) {
		t.Errorf("envName: HF_TOKEN = %+v", e)
	}
	if _, ok := envOf("named")["TAKEOFF_ACCESS_TOKEN"]; ok {
		t.Error("envName did not replace the default variable")
	}

	file := deployment(t, m, "my-inference-stack-file")
	if e := envOf("file")["HF_TOKEN_PATH"]; e.Value != "/var/run/secrets/takeoff/access-token/token" || e.ValueFrom != nil {
		t.Errorf("file mode: HF_TOKEN_PATH = %+v", e)
	}
	if _, ok := envOf("file")["TAKEOFF_ACCESS_TOKEN"]; ok {
		t.Error("file mode also put the token in the environment")
	}
	wantVolume := corev1.Volume{Name: "access-token", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: "hf-file", Items: []corev1.KeyToPath{{Key: "tok", Path: "token"}}}}}
	if vs := file.Spec.Template.Spec.Volumes; !reflect.DeepEqual(vs[len(vs)-1], wantVolume) {
		t.Errorf("file mode volumes = %+v", vs)
	}
	wantMount := corev1.VolumeMount{Name: "access-token", MountPath: "/var/run/secrets/takeoff/access-token", ReadOnly: true}
	if ms := container(t, file).VolumeMounts; !reflect.DeepEqual(ms[len(ms)-1], wantMount) {
		t.Errorf("file mode mounts = %+v", ms)
	}
	for _, app := range []string{"env", "file", "named"} {
		if _, ok := readerConfig(t, m, "my-inference-stack-"+app, app)["access_token"]; ok {
			t.Errorf("%s: an access token reached the ConfigMap", app)
		}
	}

	// Compatibility: the plain token is rendered into the config as before.
	plain := render(t, `applications: {old: {readerConfig: {accessToken: hf_plain}}}`)
	if got := readerConfig(t, plain, "my-inference-stack-old", "old")["access_token"]; got != "hf_plain" {
		t.Errorf("plain accessToken in config = %v, want hf_plain", got)
	}

	for values, want := range map[string]string{
		// Merged from the template and the application.
		`applicationTemplate: {readerConfig: {accessToken: x}}
applications: {a: {accessTokenFrom: {secretKeyRef: {name: s, key: k}}}}`: "both set",
		`applications: {a: {env: [{name: TAKEOFF_ACCESS_TOKEN, value: x}], accessTokenFrom: {secretKeyRef: {name: s, key: k}}}}`: "env sets TAKEOFF_ACCESS_TOKEN",
	} {
		if _, err := tryRender(t, values); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error saying %q", values, err, want)
		}
	}
}
