package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inferencestack "github.com/titanml/inference-stack-operator"
	"github.com/titanml/inference-stack-operator/operator/helmrecord"
)

// Records an operator wrote before records were signed (an upgrade from a
// version that did not sign them), or signed with a key since lost (the
// operator's namespace deleted and created again), are read if the
// stack's status vouches for them, and signed when the stack's release is
// next written; the pods keep running. A record created since is refused
// unless signed (TestTenantWrittenReleaseRecords), and so is one created
// before the key whose content the status does not vouch for.
func TestRecordsWrittenBeforeSigning(t *testing.T) {
	e := startEnv(t, operatorBuild{})
	ctx := t.Context()
	cs := kubernetes.NewForConfigOrDie(e.cluster.RESTConfig())
	e.apply("older", "v0", `{applications: {a: {}}}`)
	// A plain-text token, which the status holds redacted.
	e.apply("rekeyed", "v0", `{applications: {a: {readerConfig: {accessToken: hf_plain_token}}}}`)
	e.waitDeployed("older")
	e.waitDeployed("rekeyed")
	pods := e.podUIDs("older-inference-stack-a")
	e.stopOperator()

	// As an operator that did not sign left them: no signature on the
	// records, no key.
	records, err := cs.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=older"})
	if err != nil || len(records.Items) != 1 {
		t.Fatalf("the stack's records: %d, %v", len(records.Items), err)
	}
	for _, r := range records.Items {
		if r.Annotations[helmrecord.SignatureAnnotation] == "" {
			t.Fatalf("the operator left record %s unsigned", r.Name)
		}
		delete(r.Annotations, helmrecord.SignatureAnnotation)
		if _, err := cs.CoreV1().Secrets(ns).Update(ctx, &r, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// A tenant's Secret of before the key, to be made a record after it.
	decoy := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sh.helm.release.v1.older.v9", Namespace: ns}}
	decoy, err = cs.CoreV1().Secrets(ns).Create(ctx, decoy, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Creation times have seconds: a Secret of the key's own second is not
	// older than the key.
	e.eventually("a second past the decoy's creation", 5*time.Second, func(context.Context) (bool, string) {
		return time.Now().Truncate(time.Second).After(decoy.CreationTimestamp.Time), "now " + time.Now().String()
	})
	if err := cs.CoreV1().Secrets(inferencestack.Namespace("v0")).Delete(ctx, helmrecord.KeySecret, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	e.stopOperator = startOperator(t, e.opCfg, e.log, operatorBuild{})
	keys := testKeys(cs)
	for _, stack := range []string{"older", "rekeyed"} {
		replicas(e, stack, 2)
		e.waitDeployedAtGeneration(stack)
		signedWithTheNewKey(t, e, keys, cs, stack)
	}

	// The decoy, older than the key, becomes the release's newest
	// revision: its creation time vouches for nothing.
	rels, err := helmrecord.NewSecrets(cs.CoreV1().Secrets(ns), nil).Query(map[string]string{"name": "older", "owner": "helm", "status": "deployed"})
	if err != nil || len(rels) != 1 {
		t.Fatalf("the deployed revision: %v, %v", rels, err)
	}
	forged := rels[0]
	forged.Version = 9
	forged.Manifest += "\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: planted\n"
	payload, err := helmrecord.Encode(forged)
	if err != nil {
		t.Fatal(err)
	}
	decoy, err = cs.CoreV1().Secrets(ns).Get(ctx, decoy.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	decoy.Labels = map[string]string{"owner": "helm", "name": "older", "status": "deployed", "version": "9"}
	decoy.Data = map[string][]byte{"release": payload}
	if _, err := cs.CoreV1().Secrets(ns).Update(ctx, decoy, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	replicas(e, "older", 3)
	e.eventually("older says why its release fails", 60*time.Second, func(ctx context.Context) (bool, string) {
		_, _, m := condition(e.getStack("older"), "Ready")
		return strings.Contains(m, "refusing release record sh.helm.release.v1.older.v9: it is not signed by an operator"), m
	})
	if err := e.cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "planted"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("the decoy's ConfigMap: %v", err)
	}

	after := e.podUIDs("older-inference-stack-a")
	for uid := range pods {
		if !after[uid] {
			t.Errorf("pod %s of the stack was replaced: %v -> %v", uid, pods, after)
		}
	}
}

// signedWithTheNewKey waits until both revisions of stack's release are
// signed with the key keys reads.
func signedWithTheNewKey(t *testing.T, e *env, keys *helmrecord.Keys, cs kubernetes.Interface, stack string) {
	t.Helper()
	e.eventually("both revisions of "+stack+" signed", 30*time.Second, func(ctx context.Context) (bool, string) {
		records, err := cs.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=" + stack})
		if err != nil {
			return false, err.Error()
		}
		var got []string
		for _, r := range records.Items {
			v, err := keys.Verify(ctx, &r)
			if err != nil {
				return false, err.Error()
			}
			got = append(got, fmt.Sprintf("%s %s signed=%v", r.Name, r.Labels["status"], v == helmrecord.Signed))
			if v != helmrecord.Signed {
				return false, fmt.Sprint(got)
			}
		}
		return len(records.Items) == 2, fmt.Sprint(got)
	})
}
