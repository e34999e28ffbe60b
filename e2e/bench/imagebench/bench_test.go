package imagebench

import (
	"strings"
	"testing"
	"time"

	"github.com/titanml/inference-stack-operator/internal/oci"
)

func TestMarkdown(t *testing.T) {
	r := &Report{
		GoCache: "empty", Cold: 10 * time.Minute, NoOp: 5 * time.Second, NoOpSameRefs: true, Cores: 2,
		Sizes: map[string][]oci.PlatformSize{
			"operator": {{Platform: "linux/amd64", Bytes: 22_570_000}, {Platform: "linux/arm64/v8", Bytes: 41_000_000}},
			"bundle":   {{Platform: "linux/amd64", Bytes: 3_500}},
		},
		Refs: map[string]string{"operator": "r@sha256:x"},
	}
	md := r.Markdown()
	for _, want := range []string{"| cold `make images` | 10m0s |", "0.8% of cold: meets the goal", "22.57 MB (goal < 40 MB: met)", "41.00 MB (goal < 40 MB: missed)", "| bundle | linux/amd64 | 3.5 kB |"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}
