package v1alpha1

import (
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// TestNameFormats: each format accepts exactly what Kubernetes' own
// validation accepts, over names that probe its edges.
func TestNameFormats(t *testing.T) {
	names := []string{
		"a", "A", "0", "-", "a-", "-a", "a-b", "a--b", "a.b", "a..b", ".a", "a_b", "a/b", "a/b/c", "example.com/a", "Example.com/a",
		"example.com/", "/a", "a b", "a\nb", "a:b", "*.example.com", "*", "a*", "80", "http", "http-80", "h-", "web-2",
		"abcdefghijklmno", "abcdefghijklmnop", strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a", 63) + ".b",
		"A_b", "_a", "a1", "1a", "a.b/c_d.e-F", "a/" + strings.Repeat("b", 63), "a/" + strings.Repeat("b", 64),
		"a.", "a-.b", "x'y", `x"y`, "{x}", "é",
	}
	for _, c := range []struct {
		f    NameFormat
		kube func(string) []string
	}{
		{DNSLabel, validation.IsDNS1123Label},
		{DNSSubdomain, validation.IsDNS1123Subdomain},
		{WildcardDNSSubdomain, func(s string) []string {
			if strings.HasPrefix(s, "*.") {
				return validation.IsWildcardDNS1123Subdomain(s)
			}
			return validation.IsDNS1123Subdomain(s)
		}},
		{IANAServiceName, validation.IsValidPortName},
		{CIdentifier, validation.IsCIdentifier},
		{QualifiedName, validation.IsQualifiedName},
		{LabelValue, func(s string) []string {
			if s == "" {
				return []string{"empty"} // the format's values may not be empty; the schema allows "" separately
			}
			return validation.IsValidLabelValue(s)
		}},
	} {
		re := regexp.MustCompile("^(" + c.f.Pattern + ")$")
		for _, name := range names {
			ours := re.MatchString(name) && (c.f.MaxLength == 0 || len(name) <= c.f.MaxLength)
			theirs := len(c.kube(name)) == 0
			if ours != theirs {
				t.Errorf("%s: %q accepted by the format %v, by Kubernetes %v (%v)", c.f.Name, name, ours, theirs, c.kube(name))
			}
		}
	}
}

// TestNameRulesName: every rule names a field its owner has.
func TestNameRulesName(t *testing.T) {
	for _, r := range NameRules {
		found := false
		for i := range r.Owner.NumField() {
			tag, _, _ := strings.Cut(r.Owner.Field(i).Tag.Get("json"), ",")
			found = found || tag == r.Field
		}
		if !found {
			t.Errorf("%s has no field %q", r.Owner, r.Field)
		}
		if r.Key == nil && r.Value == nil {
			t.Errorf("%s.%s: a rule without a format", r.Owner.Name(), r.Field)
		}
	}
}
