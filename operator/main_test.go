package main

import (
	"runtime/debug"
	"testing"
)

func TestSetGCPercent(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	for _, tc := range []struct {
		env  map[string]string
		want int
	}{
		{map[string]string{}, defaultGCPercent},
		{map[string]string{"GOGC": "100"}, 100}, // the user's choice is the runtime's; left alone
	} {
		debug.SetGCPercent(100)
		setGCPercent(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
		if got := debug.SetGCPercent(100); got != tc.want {
			t.Errorf("env %v: GC percent %d, want %d", tc.env, got, tc.want)
		}
	}
}
