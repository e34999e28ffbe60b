package migrate

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
)

// The values of a ModelOrchestra are those of the chart its operator
// installed; the inference-stack chart kept the layout except where noted in
// its README ("Differences from chart 1.0.0"). stackSpec carries a
// ModelOrchestra's spec over to an InferenceStack, rewriting what the new
// chart reads differently and pinning what the old chart derived from its
// own defaults, so that the InferenceStack describes what runs.

// oldRelease is what stackSpec needs to know of the running release.
type oldRelease struct {
	// Fullname is the prefix of every object of the release (the gateway
	// Deployment is "<Fullname>-gateway").
	Fullname string
	// NameLabel is the app.kubernetes.io/name value in its selectors.
	NameLabel string
	// ReleaseName is the Helm release (and stack) name.
	ReleaseName string
	// AppVersion of the old chart: its default image tags are
	// <AppVersion>-cpu (gateway) and <AppVersion>-gpu (readers).
	AppVersion string
}

// newChartName is the name of the inference-stack chart, the default of
// its fullname and name label.
const newChartName = "inference-stack"

// stackSpec returns the InferenceStack spec for a ModelOrchestra spec and
// the list of changes it made, each with its reason.
func stackSpec(orchestra map[string]any, old oldRelease) (map[string]any, []string, error) {
	spec := runtime.DeepCopyJSON(orchestra)
	if spec == nil {
		spec = map[string]any{}
	}
	var changes []string
	note := func(format string, args ...any) { changes = append(changes, fmt.Sprintf(format, args...)) }

	keepNames(spec, old, note)
	if err := rewriteGateway(spec, note); err != nil {
		return nil, nil, err
	}
	dropApplicationSettings(spec, note)
	pinImageTags(spec, old, note)
	return spec, changes, nil
}

// noteFunc records a change stackSpec made and its reason.
type noteFunc func(format string, args ...any)

// keepNames makes the objects keep their names, and Deployment selectors
// (immutable) keep their app.kubernetes.io/name.
func keepNames(spec map[string]any, old oldRelease, note noteFunc) {
	nameOverride, _ := spec["nameOverride"].(string)
	if _, set := spec["nameOverride"]; !set && old.NameLabel != "" && old.NameLabel != newChartName {
		spec["nameOverride"] = old.NameLabel
		nameOverride = old.NameLabel
		note("nameOverride: %s (the old chart's name: keeps the name label of every selector, which Kubernetes does not let a Deployment change)", old.NameLabel)
	}
	if fo, _ := spec["fullnameOverride"].(string); fo == "" && old.Fullname != "" {
		if got := fullname(old.ReleaseName, nameOverride); got != old.Fullname {
			spec["fullnameOverride"] = old.Fullname
			note("fullnameOverride: %s (keeps the names of the running objects; the chart would name them %s-...)", old.Fullname, got)
		}
	}
}

// rewriteGateway rewrites the gateway settings the new chart reads
// differently: its port lists become maps (name -> port), so a stack can
// change one of them, and the setting it has no use for is dropped.
func rewriteGateway(spec map[string]any, note noteFunc) error {
	gw, ok := spec["gateway"].(map[string]any)
	if !ok {
		return nil
	}
	if ports, ok := gw["ports"].([]any); ok {
		m, err := portMap(ports, "gateway.ports", func(p map[string]any) (any, error) {
			return p["containerPort"], nil
		})
		if err != nil {
			return err
		}
		gw["ports"] = m
		note("gateway.ports: the list rewritten as a map of name to port")
	}
	if svc, ok := gw["service"].(map[string]any); ok {
		if ports, ok := svc["ports"].([]any); ok {
			m, err := portMap(ports, "gateway.service.ports", func(p map[string]any) (any, error) {
				return map[string]any{"port": p["port"], "targetPort": p["targetPort"]}, nil
			})
			if err != nil {
				return err
			}
			svc["ports"] = m
			note("gateway.service.ports: the list rewritten as a map of name to {port, targetPort}")
		}
	}
	if _, ok := gw["exportPrometheusMetrics"]; ok {
		delete(gw, "exportPrometheusMetrics")
		note("gateway.exportPrometheusMetrics: dropped (the inference-stack chart renders no ServiceMonitor)")
	}
	return nil
}

// dropApplicationSettings drops the per application settings the new
// chart dropped, from the template and every application.
func dropApplicationSettings(spec map[string]any, note noteFunc) {
	apps := map[string]map[string]any{}
	if t, ok := spec["applicationTemplate"].(map[string]any); ok {
		apps["applicationTemplate"] = t
	}
	if as, ok := spec["applications"].(map[string]any); ok {
		for n, a := range as {
			if am, ok := a.(map[string]any); ok {
				apps["applications."+n] = am
			}
		}
	}
	for _, path := range sortedKeys(apps) {
		a := apps[path]
		if mv, ok := a["modelsVolume"].(map[string]any); ok {
			if _, named := mv["name"]; named {
				delete(mv, "name")
				note("%s.modelsVolume.name: dropped (the volume is always called models)", path)
			}
		}
		if sc, ok := a["scaling"].(map[string]any); ok {
			if mt, ok := sc["metricTarget"].(map[string]any); ok {
				if _, named := mt["name"]; named {
					delete(mt, "name")
					note("%s.scaling.metricTarget.name: dropped (the chart has one metric)", path)
				}
			}
		}
	}
}

// pinImageTags pins the image tags the old chart defaulted from its own
// appVersion, so the InferenceStack names the Takeoff version that runs;
// a newer Takeoff is then a change made on purpose.
func pinImageTags(spec map[string]any, old oldRelease, note noteFunc) {
	if old.AppVersion == "" {
		return
	}
	for _, p := range []struct{ path, suffix string }{{"gateway", "cpu"}, {"applicationTemplate", "gpu"}} {
		section, _ := spec[p.path].(map[string]any)
		if section == nil {
			section = map[string]any{}
			spec[p.path] = section
		}
		img, _ := section["image"].(map[string]any)
		if img == nil {
			img = map[string]any{}
			section["image"] = img
		}
		if tag, _ := img["tag"].(string); tag == "" {
			img["tag"] = old.AppVersion + "-" + p.suffix
			note("%s.image.tag: %s (the tag the old chart ran; the inference-stack chart's default differs)", p.path, img["tag"])
		}
	}
}

// portMap turns a list of named ports into a map keyed by name.
func portMap(list []any, path string, value func(map[string]any) (any, error)) (map[string]any, error) {
	out := map[string]any{}
	for i, item := range list {
		p, ok := item.(map[string]any)
		name, _ := p["name"].(string)
		if !ok || name == "" {
			return nil, fmt.Errorf("%s[%d]: a port without a name cannot be carried over (the inference-stack chart keys ports by name)", path, i)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("%s: two ports named %q", path, name)
		}
		v, err := value(p)
		if err != nil {
			return nil, err
		}
		out[name] = v
	}
	return out, nil
}

// fullname is the inference-stack chart's fullname rule without
// fullnameOverride: the release name if it contains the chart name (or
// nameOverride), else <release>-<name>, cut to 63 characters.
func fullname(releaseName, nameOverride string) string {
	name := nameOverride
	if name == "" {
		name = newChartName
	}
	s := releaseName
	if !strings.Contains(releaseName, name) {
		s = releaseName + "-" + name
	}
	if len(s) > 63 {
		s = s[:63]
	}
	return strings.TrimSuffix(s, "-")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
