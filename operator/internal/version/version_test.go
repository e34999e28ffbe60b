package version

import "testing"

func TestParseMajor(t *testing.T) {
	for v, want := range map[string]string{"0.1.0": "v0", "1.2.3": "v1", "12.0.0-rc.1": "v12", "2.0.0+build.5": "v2"} {
		if got, err := ParseMajor(v); err != nil || got != want {
			t.Errorf("ParseMajor(%q) = %q, %v; want %q", v, got, err, want)
		}
	}
	for _, bad := range []string{"", "1", "1.2", "v1.2.3", "1.2.3.4", "01.2.3", "1.x.3", "-1.2.3"} {
		if got, err := ParseMajor(bad); err == nil {
			t.Errorf("ParseMajor(%q) = %q, want an error", bad, got)
		}
	}
}

// The repository's VERSION file must be a valid version: every build derives
// the reconciled major from it.
func TestRepositoryVersion(t *testing.T) {
	if _, err := ParseMajor(Get()); err != nil {
		t.Fatal(err)
	}
}
