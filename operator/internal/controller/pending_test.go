package controller_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/release"
	helmtime "helm.sh/helm/v3/pkg/time"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"github.com/titanml/inference-stack-operator/operator/helmrecord"
	"github.com/titanml/inference-stack-operator/operator/internal/controller"
)

// TestForeignPendingRevisions puts another writer's revision in flight on
// a stack's release, as Helm writes it when an upgrade or rollback starts:
// the next revision, pending, with the deployed revision's labels (Helm
// copies them, the operator's writer label included) and no owner
// reference. The writer holds the major's key (a record nobody signed is
// refused outright, see TestTenantWrittenReleaseRecords): Helm's library
// run by another process of the operator's, as the helm CLI would run it.
// The operator must not take it for one of its own crashed operations: it
// waits, says so, and only after the grace period marks it failed and
// rolls forward.
func TestForeignPendingRevisions(t *testing.T) {
	const grace = 20 * time.Second
	e := startEnv(t, operatorBuild{opts: controller.Options{ForeignPendingGrace: grace}})
	cs := kubernetes.NewForConfigOrDie(e.cluster.RESTConfig())
	secrets := helmrecord.NewSecrets(cs.CoreV1().Secrets(ns), nil).WithKeys(testKeys(cs), ns, nil)
	key := func(stack string, v int) string { return fmt.Sprintf("sh.helm.release.v1.%s.v%d", stack, v) }
	get := func(stack string, v int) *release.Release {
		t.Helper()
		rel, err := secrets.Get(key(stack, v))
		if err != nil {
			t.Fatal(err)
		}
		return rel
	}
	inFlight := func(stack string, status release.Status, started ...helmtime.Time) *release.Release {
		t.Helper()
		last := get(stack, 1)
		rel := *last
		rel.Version = 2
		rel.Info = &release.Info{FirstDeployed: last.Info.FirstDeployed, LastDeployed: helmtime.Now(), Status: status, Description: "Preparing upgrade"}
		if len(started) > 0 {
			rel.Info.LastDeployed = started[0]
		}
		rel.Labels = maps.Clone(last.Labels)
		if err := secrets.Create(key(stack, 2), &rel); err != nil {
			t.Fatal(err)
		}
		if rel.Labels[controller.ReconciledByLabel] != "v0" {
			t.Fatalf("the copied labels %v lack the operator's writer label: the case is not the one under test", rel.Labels)
		}
		return &rel
	}
	// waits makes the operator look at the release (an annotation change
	// reconciles the stack) and waits until it reports that it is waiting.
	waits := func(stack string) {
		t.Helper()
		e.update(stack, func(u *unstructured.Unstructured) { u.SetAnnotations(map[string]string{"nudge": "1"}) })
		e.eventually(stack+" waiting for revision 2", 60*time.Second, func(context.Context) (bool, string) {
			s, _, m := condition(e.getStack(stack), "Retrying")
			return s == "True" && strings.Contains(m, "revision 2 has been pending"), fmt.Sprintf("Retrying=%s: %s", s, m)
		})
		if got := get(stack, 2).Info.Status; !got.IsPending() {
			t.Fatalf("revision 2 is %s while its writer may still be running", got)
		}
	}

	t.Run("a helm upgrade in flight is left to finish", func(t *testing.T) {
		e.t = t
		const stack = "cli-upgrade"
		e.apply(stack, "v0", `{applications: {a: {}}}`)
		e.waitDeployed(stack)
		rel := inFlight(stack, release.StatusPendingUpgrade)
		waits(stack)
		// The upgrade finishes as Helm finishes one.
		last := get(stack, 1)
		last.SetStatus(release.StatusSuperseded, "Superseded")
		if err := secrets.Update(key(stack, 1), last); err != nil {
			t.Fatal(err)
		}
		rel.SetStatus(release.StatusDeployed, "Upgrade complete")
		if err := secrets.Update(key(stack, 2), rel); err != nil {
			t.Fatal(err)
		}
		e.update(stack, func(u *unstructured.Unstructured) { u.SetAnnotations(map[string]string{"nudge": "2"}) })
		e.waitCondition(stack, "Retrying", "False", "ReleaseSucceeded")
		if ev, ok := hasEvent(e.events(stack), "RecoveredPendingRelease"); ok {
			t.Errorf("the operator marked the helm CLI's revision failed: %s", ev.Message)
		}
		if got := get(stack, 2).Info.Status; got != release.StatusDeployed {
			t.Errorf("revision 2 is %s, want deployed", got)
		}
	})

	t.Run("a revision dated long ago is waited for from when the operator first sees it", func(t *testing.T) {
		e.t = t
		// Its start time is the writer's clock, which anyone who may
		// write the namespace's Secrets may set.
		const stack = "cli-dated"
		e.apply(stack, "v0", `{applications: {a: {}}}`)
		e.waitDeployed(stack)
		inFlight(stack, release.StatusPendingUpgrade, helmtime.Time{Time: time.Now().Add(-time.Hour)})
		waits(stack)
	})

	t.Run("a rollback left pending is recovered after the grace period", func(t *testing.T) {
		e.t = t
		const stack = "cli-rollback"
		e.apply(stack, "v0", `{applications: {a: {}}}`)
		e.waitDeployed(stack)
		pods := e.podUIDs(stack + "-inference-stack-a")
		rel := inFlight(stack, release.StatusPendingRollback)
		waits(stack)
		e.waitCondition(stack, "Recovered", "True", "PendingReleaseMarkedFailed")
		_, _, msg := condition(e.getStack(stack), "Recovered")
		if !strings.Contains(msg, "left pending-rollback by a rollback, which no operator runs") {
			t.Errorf("Recovered: %s", msg)
		}
		ev, ok := hasEvent(e.events(stack), "RecoveredPendingRelease")
		if !ok {
			t.Fatal("no RecoveredPendingRelease event")
		}
		// Event times have seconds; the revision's start has more.
		if waited := ev.FirstTimestamp.Sub(rel.Info.LastDeployed.Time); waited < grace-time.Second {
			t.Errorf("recovered %s after the rollback started, before the grace period (%s) ended", waited, grace)
		}
		if got := get(stack, 2).Info.Status; got != release.StatusFailed {
			t.Errorf("revision 2 is %s, want failed", got)
		}
		e.eventually(stack+" rolled forward", 60*time.Second, func(ctx context.Context) (bool, string) {
			p := e.releaseProblems(ctx, stack)
			return p == "", p
		})
		e.samePods(stack+"-inference-stack-a", pods)
	})
}
