package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A stack left saying its upgrade waits for a wave (the operator that
// held it was rolled back or hot-fixed, its change no longer touches pod
// templates) is told it no longer waits by the next reconcile that finds
// nothing to hold.
func TestStaleWaitForWaveIsCleared(t *testing.T) {
	e := startEnv(t, operatorBuild{})
	const stack = "stale-wave"
	e.apply(stack, "v0", `{applications: {a: {}}}`)
	e.waitDeployed(stack)
	// What the held operator left behind, as its status write left it.
	u := e.getStack(stack)
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	conds = append(conds, map[string]any{"type": "OperatorUpgrade", "status": "True", "reason": "WaitingForWave",
		"message": "waiting for a place in the operator's upgrade waves", "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)})
	if err := unstructured.SetNestedSlice(u.Object, conds, "status", "conditions"); err != nil {
		t.Fatal(err)
	}
	if err := e.cl.Status().Update(t.Context(), u); err != nil {
		t.Fatal(err)
	}
	// Any event brings the stack back (its status write is the
	// operator's own kind, which does not).
	e.update(stack, func(u *unstructured.Unstructured) { u.SetAnnotations(map[string]string{"touched": "yes"}) })
	e.eventually("the stale wait cleared", 60*time.Second, func(ctx context.Context) (bool, string) {
		s, r, m := condition(e.getStack(stack), "OperatorUpgrade")
		return s == "False" && r == "NoWaveNeeded", fmt.Sprintf("OperatorUpgrade=%s %s: %s", s, r, m)
	})
}
