package migrate

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// fieldChanges lists where two JSON-like values differ, as paths such as
// spec.containers[reader].securityContext or
// metadata.annotations["checksum/config"], descending into objects and
// into lists of named items (containers, volumes, env, ports) by name. A
// list of unnamed items is compared whole.
func fieldChanges(from, to any) []string {
	var out []string
	diffAt("", from, to, &out)
	sort.Strings(out)
	return out
}

func diffAt(path string, from, to any, out *[]string) {
	if reflect.DeepEqual(from, to) {
		return
	}
	// An absent object or list is compared as an empty one, so that what
	// is added or removed is named field by field.
	fm, fok := from.(map[string]any)
	tm, tok := to.(map[string]any)
	if from == nil && tok {
		fm, fok = map[string]any{}, true
	}
	if to == nil && fok {
		tm, tok = map[string]any{}, true
	}
	if fok && tok {
		keys := map[string]bool{}
		for k := range fm {
			keys[k] = true
		}
		for k := range tm {
			keys[k] = true
		}
		for _, k := range sortedKeys(keys) {
			diffAt(join(path, k), fm[k], tm[k], out)
		}
		return
	}
	fl, fok := from.([]any)
	tl, tok := to.([]any)
	if from == nil && tok {
		fl, fok = []any{}, true
	}
	if to == nil && fok {
		tl, tok = []any{}, true
	}
	if fok && tok {
		if fn, ok := byName(fl); ok || len(fl) == 0 {
			if tn, ok := byName(tl); ok || len(tl) == 0 {
				names := map[string]bool{}
				for k := range fn {
					names[k] = true
				}
				for k := range tn {
					names[k] = true
				}
				for _, n := range sortedKeys(names) {
					item := fmt.Sprintf("%s[%s]", path, n)
					if fn[n] == nil || tn[n] == nil {
						// A whole container, volume, port... added or removed.
						*out = append(*out, describe(item, fn[n], tn[n]))
						continue
					}
					diffAt(item, fn[n], tn[n], out)
				}
				return
			}
		}
	}
	*out = append(*out, describe(path, from, to))
}

// describe says how the value at path changes.
func describe(path string, from, to any) string {
	switch {
	case from == nil:
		return path + " (added)"
	case to == nil:
		return path + " (removed)"
	}
	if isScalar(from) && isScalar(to) {
		return fmt.Sprintf("%s: %v → %v", path, from, to)
	}
	return path
}

func isScalar(v any) bool {
	switch v.(type) {
	case string, bool, float64, int64, int:
		return true
	}
	return false
}

// byName indexes a list whose items all have a distinct string "name".
func byName(l []any) (map[string]any, bool) {
	m := map[string]any{}
	if len(l) == 0 {
		return m, false
	}
	for _, item := range l {
		o, ok := item.(map[string]any)
		if !ok {
			return nil, false
		}
		n, ok := o["name"].(string)
		if !ok || n == "" {
			return nil, false
		}
		if _, dup := m[n]; dup {
			return nil, false
		}
		m[n] = o
	}
	return m, true
}

// join appends key to path, quoting keys that are not plain identifiers
// (label and annotation keys).
func join(path, key string) string {
	if strings.ContainsAny(key, "./") {
		return fmt.Sprintf("%s[%q]", path, key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}
