package poll

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	ctx := context.Background()
	n := 0
	if err := Until(ctx, time.Second, "the third check", Check(func() (bool, string) { n++; return n == 3, "not yet" }), Every(time.Millisecond)); err != nil || n != 3 {
		t.Errorf("holding on the third check: err %v after %d checks", err, n)
	}

	err := Until(ctx, 20*time.Millisecond, "never", Check(func() (bool, string) { return false, "still 0 of 2" }), Every(time.Millisecond))
	if err == nil || !strings.Contains(err.Error(), "timed out after 20ms waiting for never (last: still 0 of 2)") {
		t.Errorf("a timeout: got %v, want the last reason", err)
	}

	boom := errors.New("boom")
	err = Until(ctx, time.Minute, "x", func(context.Context) (bool, string, error) { return false, "", boom })
	if !errors.Is(err, boom) {
		t.Errorf("a failing condition: got %v, want it wrapped", err)
	}

	gone := errors.New("the operator exited")
	err = Until(ctx, time.Minute, "x", Check(func() (bool, string) { return false, "" }), While(func() error { return gone }))
	if !errors.Is(err, gone) {
		t.Errorf("a dead dependency: got %v, want it at once", err)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	err = Until(cctx, time.Minute, "x", Check(func() (bool, string) { return false, "why" }))
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "(last: why)") {
		t.Errorf("a cancelled context: got %v", err)
	}
}
