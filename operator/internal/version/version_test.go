package version

import "testing"

// The version the binary reports (the VERSION file unless stamped) must
// give a major: Major panics otherwise.
func TestMajor(t *testing.T) {
	if m := Major(); m == "" || m[0] != 'v' {
		t.Fatalf("Major() = %q", m)
	}
}
