package controller

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/kube"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage/driver"
)

// What a Helm action costs the API server and the CPU, trimmed without
// changing what it does. Each action client serves one reconcile of one
// stack, so whatever is remembered here lives for one reconcile.

// lean returns the chart the operator installs: chrt without what every
// release revision would store for nothing (the README) and without its
// values schema, which Helm would compile again for every render; the
// schema is compiled once into the returned validator instead.
func lean(chrt *chart.Chart) (*chart.Chart, *valuesSchema, error) {
	c := *chrt
	c.Files = nil
	for _, f := range chrt.Files {
		if !strings.EqualFold(f.Name, "README.md") {
			c.Files = append(c.Files, f)
		}
	}
	c.Schema = nil
	if len(chrt.Schema) == 0 {
		return &c, nil, nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(chrt.Schema))
	if err != nil {
		return nil, nil, fmt.Errorf("reading the values schema of chart %s: %w", chrt.Name(), err)
	}
	compiler := jsonschema.NewCompiler()
	const url = "file:///values.schema.json"
	if err := compiler.AddResource(url, doc); err != nil {
		return nil, nil, fmt.Errorf("loading the values schema of chart %s: %w", chrt.Name(), err)
	}
	schema, err := compiler.Compile(url)
	if err != nil {
		return nil, nil, fmt.Errorf("compiling the values schema of chart %s: %w", chrt.Name(), err)
	}
	return &c, &valuesSchema{chart: chrt.Name(), schema: schema}, nil
}

// valuesSchema validates a release's values as Helm would with the chart's
// values.schema.json, with the schema compiled once. That schema is
// generated from the API types (operator/api/v1alpha1): this is no rule
// of its own.
type valuesSchema struct {
	chart  string
	schema *jsonschema.Schema
}

func (v *valuesSchema) validate(vals map[string]any) error {
	if v == nil {
		return nil
	}
	if err := v.schema.Validate(vals); err != nil {
		msg := strings.TrimPrefix(err.Error(), "jsonschema validation failed with 'file:///values.schema.json#'\n")
		return fmt.Errorf("values don't meet the specifications of the schema(s) in the following chart(s):\n%s:\n%s", v.chart, msg)
	}
	return nil
}

// reachableClient is Helm's Kubernetes client without the /version request
// Helm makes before every Get, Install and Upgrade to check the cluster is
// reachable: the action client was created from the cluster's
// capabilities moments ago, and a request that fails reports it anyway.
type reachableClient struct {
	*kube.Client
}

func (reachableClient) IsReachable() error { return nil }

// historyOnce remembers, within one reconcile, the release history queries
// Helm repeats (the library's two Gets and Helm's own checks each list the
// release's Secrets); any write forgets them.
type historyOnce struct {
	driver.Driver
	mu      sync.Mutex
	queries map[string][]*release.Release
	errs    map[string]error
}

func newHistoryOnce(d driver.Driver) *historyOnce {
	return &historyOnce{Driver: d, queries: map[string][]*release.Release{}, errs: map[string]error{}}
}

func (h *historyOnce) Query(labels map[string]string) ([]*release.Release, error) {
	keys := make([]string, 0, len(labels))
	for k, v := range labels {
		keys = append(keys, k+"="+v)
	}
	sort.Strings(keys)
	key := strings.Join(keys, ",")
	h.mu.Lock()
	defer h.mu.Unlock()
	if rels, ok := h.queries[key]; ok {
		return copies(rels), h.errs[key]
	}
	rels, err := h.Driver.Query(labels)
	if err != nil && !errors.Is(err, driver.ErrReleaseNotFound) {
		return nil, err
	}
	h.queries[key], h.errs[key] = rels, err
	return copies(rels), err
}

// copies lets callers change a release's Info (as Helm does before it
// writes) without changing what is remembered.
func copies(rels []*release.Release) []*release.Release {
	out := make([]*release.Release, len(rels))
	for i, r := range rels {
		c := *r
		if r.Info != nil {
			info := *r.Info
			c.Info = &info
		}
		out[i] = &c
	}
	return out
}

func (h *historyOnce) forget() {
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.queries)
	clear(h.errs)
}

func (h *historyOnce) Create(key string, rls *release.Release) error {
	h.forget()
	return h.Driver.Create(key, rls)
}

func (h *historyOnce) Update(key string, rls *release.Release) error {
	h.forget()
	return h.Driver.Update(key, rls)
}

func (h *historyOnce) Delete(key string) (*release.Release, error) {
	h.forget()
	return h.Driver.Delete(key)
}
