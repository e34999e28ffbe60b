package main

import (
	"fmt"
	"reflect"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/titanml/inference-stack-operator/operator/api/v1alpha1"
)

// apiPackage is the package of the InferenceStack's own types. Fields of
// other packages' types (corev1.Volume, corev1.Probe, ...) are "embedded
// Kubernetes types" below.
var apiPackage = reflect.TypeFor[v1alpha1.InferenceStack]().PkgPath()

// postProcessCRD rewrites controller-gen's CRD:
//
//   - metadata.name is limited to v1alpha1.MaxStackName characters (a CRD
//     may constrain metadata.name, and nothing else of metadata, in its
//     schema, which controller-gen has no marker for);
//   - descriptions inside embedded Kubernetes types are dropped, while
//     every field of the InferenceStack's own types, and the field that
//     embeds a Kubernetes type, keeps its description (kubectl explain
//     stays useful; the Kubernetes types are documented upstream). The
//     upstream descriptions were ~80% of the CRD: with them its JSON was
//     over 600 KB, too large for client-side `kubectl apply` (whose
//     last-applied annotation is limited to 256 KiB) and for a second
//     served version within etcd's request limit. Validation is untouched.
//   - the rules of v1alpha1.SchemaRules, which markers cannot express, are
//     added (see applyRules), and the name formats of v1alpha1.NameRules
//     (see applyNames).
//
// The output is marshalled like controller-gen's (sigs.k8s.io/yaml, sorted
// keys), so a CRD that needs no change comes out byte for byte the same.
func postProcessCRD(in []byte) ([]byte, error) {
	var crd map[string]any
	if err := yaml.Unmarshal(in, &crd); err != nil {
		return nil, fmt.Errorf("parsing controller-gen's CRD: %w", err)
	}
	versions, _, err := nestedSlice(crd, "spec", "versions")
	if err != nil {
		return nil, err
	}
	if len(versions) == 0 {
		return nil, fmt.Errorf("the CRD has no versions")
	}
	for _, v := range versions {
		vm, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("spec.versions holds a %T", v)
		}
		root, _, err := nestedMap(vm, "schema", "openAPIV3Schema")
		if err != nil {
			return nil, fmt.Errorf("version %v: %w", vm["name"], err)
		}
		if err := limitName(root); err != nil {
			return nil, fmt.Errorf("version %v: %w", vm["name"], err)
		}
		walkSchema(root, reflect.TypeFor[v1alpha1.InferenceStack](), "", false, false, func(s map[string]any, t reflect.Type, path string, inside bool) {
			if inside {
				delete(s, "description")
				// The parent's rules bounded s already, if any did.
				applyDefaults(s)
			}
			applyRules(s, t, path)
			applyNames(s, t, openAPI)
		})
	}
	out, err := yaml.Marshal(crd)
	if err != nil {
		return nil, fmt.Errorf("writing the CRD: %w", err)
	}
	return append([]byte("---\n"), out...), nil
}

// limitName replaces the schema of metadata (controller-gen writes a bare
// `type: object`) with one that limits the name.
func limitName(root map[string]any) error {
	meta, _, err := nestedMap(root, "properties", "metadata")
	if err != nil {
		return err
	}
	if len(meta) != 1 || meta["type"] != "object" {
		return fmt.Errorf("expected metadata's schema to be a bare object, found %v: update limitName", meta)
	}
	meta["properties"] = map[string]any{"name": map[string]any{"type": "string", "maxLength": v1alpha1.MaxStackName}}
	return nil
}

// visitFunc sees one schema node with the Go type it was generated from
// and its path (".spec.gateway.volumes[*].name"); inside tells whether the
// node lies below a field whose type is an embedded Kubernetes type.
type visitFunc func(s map[string]any, t reflect.Type, path string, inside bool)

// walkSchema visits the schema s of Go type t and its descendants that
// correspond to Go fields, list items and map values; below tells whether
// the descendants are inside an embedded Kubernetes type. Nodes without a
// Go counterpart (properties controller-gen derived from custom
// marshalling, such as resource.Quantity's) are left alone.
func walkSchema(s map[string]any, t reflect.Type, path string, inside, below bool, visit visitFunc) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	visit(s, t, path, inside)
	switch t.Kind() {
	case reflect.Struct:
		props, _ := s["properties"].(map[string]any)
		eachJSONField(t, func(name string, ft reflect.Type) {
			p, ok := props[name].(map[string]any)
			if !ok {
				return
			}
			// The field that embeds a Kubernetes type is not inside it (it
			// keeps its description); everything below it is.
			walkSchema(p, ft, path+"."+name, below, below || embedsKubernetesType(ft), visit)
		})
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return // []byte is a string
		}
		if items, ok := s["items"].(map[string]any); ok {
			walkSchema(items, t.Elem(), path+"[*]", below, below, visit)
		}
	case reflect.Map:
		if ap, ok := s["additionalProperties"].(map[string]any); ok {
			walkSchema(ap, t.Elem(), path+".*", below, below, visit)
		}
	}
}

// embedsKubernetesType reports whether t, once pointers, slices and maps
// are looked through, is a struct declared outside the API package.
func embedsKubernetesType(t reflect.Type) bool {
	for {
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map:
			t = t.Elem()
			continue
		case reflect.Struct:
			return t.PkgPath() != apiPackage
		}
		return false
	}
}

// eachJSONField calls f for every field of struct t as encoding/json sees
// it: embedded structs without a name (or tagged ",inline") contribute
// their fields, fields tagged "-" are skipped.
func eachJSONField(t reflect.Type, f func(name string, ft reflect.Type)) {
	for i := range t.NumField() {
		field := t.Field(i)
		if !field.IsExported() {
			continue
		}
		tag := field.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" && opts == "" {
			continue
		}
		if name == "" && (field.Anonymous || strings.Contains(opts, "inline")) {
			ft := field.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				eachJSONField(ft, f)
				continue
			}
		}
		if name == "" {
			name = field.Name
		}
		f(name, field.Type)
	}
}

func nestedMap(m map[string]any, path ...string) (map[string]any, string, error) {
	cur := m
	for i, k := range path {
		next, ok := cur[k].(map[string]any)
		if !ok {
			return nil, "", fmt.Errorf("the CRD has no object at %s", strings.Join(path[:i+1], "."))
		}
		cur = next
	}
	return cur, strings.Join(path, "."), nil
}

func nestedSlice(m map[string]any, path ...string) ([]any, string, error) {
	parent, _, err := nestedMap(m, path[:len(path)-1]...)
	if err != nil {
		return nil, "", err
	}
	s, ok := parent[path[len(path)-1]].([]any)
	if !ok {
		return nil, "", fmt.Errorf("the CRD has no list at %s", strings.Join(path, "."))
	}
	return s, strings.Join(path, "."), nil
}
