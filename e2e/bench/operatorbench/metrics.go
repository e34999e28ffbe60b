package operatorbench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The counters read from both operators' metrics endpoints. Both link
// controller-runtime, which registers client-go's request metrics and its
// own reconcile metrics in the registry it serves.
const (
	// requestsMetric counts every request of every client-go client in the
	// process (the operator's, Helm's, discovery), whatever its outcome.
	requestsMetric = "rest_client_requests_total"
	// cacheAnsweredMetric counts this operator's reads that its cache
	// answered without a request, which requestsMetric counts too (the
	// stock operator has none).
	cacheAnsweredMetric = "inference_stack_cache_answered_reads_total"
	// reconcilesMetric counts finished reconciles by controller and result.
	reconcilesMetric = "controller_runtime_reconcile_total"
	// activeWorkersMetric is the number of reconciles in flight.
	activeWorkersMetric = "controller_runtime_active_workers"
	// stackController is the controller that reconciles InferenceStacks in
	// both operators: helm-operator-plugins names it after the kind, and
	// this operator keeps that name.
	stackController = "inferencestack-controller"
)

// counters is one reading of an operator's metrics: API requests the API
// server received (and of them the writes) and reconciles so far, and reconciles in flight now.
type counters struct {
	Requests, Writes, Reconciles, ActiveWorkers float64
}

// get is the body of a GET of url that answered 200 OK.
func get(ctx context.Context, url string) (io.ReadCloser, error) {
	return getWith(ctx, http.DefaultClient, url)
}

// getWith GETs url with hc and returns the body of a 200 answer.
func getWith(ctx context.Context, hc *http.Client, url string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return resp.Body, nil
}

// writeMethods are the HTTP methods of the API's writes.
var writeMethods = []string{"POST", "PUT", "PATCH", "DELETE"}

// scrape reads the counters from a metrics endpoint.
func scrape(ctx context.Context, url string) (counters, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	body, err := get(ctx, url)
	if err != nil {
		return counters{}, fmt.Errorf("scraping: %w", err)
	}
	defer body.Close()
	c, err := parseCounters(body)
	if err != nil {
		return counters{}, fmt.Errorf("scraping %s: %w", url, err)
	}
	return c, nil
}

// parseCounters reads the counters from the Prometheus text format. A
// missing request counter is an error (a figure of zero would look like a
// result); the reconcile counter appears once the controller has started.
func parseCounters(r io.Reader) (counters, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(r)
	if err != nil {
		return counters{}, fmt.Errorf("parsing metrics: %w", err)
	}
	requests, ok := families[requestsMetric]
	if !ok {
		return counters{}, fmt.Errorf("no %s among the metrics", requestsMetric)
	}
	stack := map[string]string{"controller": stackController}
	c := counters{
		Requests:      sum(requests, nil) - sum(families[cacheAnsweredMetric], nil),
		Reconciles:    sum(families[reconcilesMetric], stack),
		ActiveWorkers: sum(families[activeWorkersMetric], stack),
	}
	for _, m := range writeMethods {
		c.Writes += sum(requests, map[string]string{"method": m})
	}
	return c, nil
}

// sum adds up the values of the counters or gauges of family whose labels
// include every label of match.
func sum(family *dto.MetricFamily, match map[string]string) float64 {
	total := 0.0
	for _, m := range family.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		ok := true
		for k, v := range match {
			ok = ok && labels[k] == v
		}
		if ok {
			total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return total
}
