package controller_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inferencestackchart "github.com/titanml/inference-stack-operator/charts/inference-stack"
	"github.com/titanml/inference-stack-operator/operator/internal/controller"
	"github.com/titanml/inference-stack-operator/operator/internal/watches"
)

// Whatever a tenant puts in the metadata of objects the operator caches
// (Secrets labelled as Helm release records, Helm-labelled objects of the
// chart's kinds) costs the operator no more memory than the same objects
// without it: the caches, built as the operator builds them, hold as much
// for 1,000 of each carrying 100 KB of labels and annotations as for 1,000
// plain ones, within 10% (or 2 MiB, what the rest of the test process may
// allocate meanwhile; the metadata itself is 200 MB).
func TestTenantMetadataCostsNoMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 4,000 objects on a real API server")
	}
	e := newEnv(t)
	ctx := t.Context()
	cfg := rest.CopyConfig(e.cluster.RESTConfig())
	cfg.QPS, cfg.Burst = -1, 0 // no client-side limit: 4,000 creates
	cs := kubernetes.NewForConfigOrDie(cfg)
	const count = 1000
	// fat is 100 KB of metadata: 60 labels of 63 characters, 80 KB of
	// annotations.
	fat := func(m *metav1.ObjectMeta) {
		for i := range 60 {
			m.Labels[fmt.Sprintf("padding-%d", i)] = strings.Repeat("l", 63)
		}
		m.Annotations = map[string]string{"example.com/padding": strings.Repeat("a", 80<<10)}
	}
	populate := func(namespace string, withMetadata bool) {
		t.Helper()
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < count; i += 8 {
					secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("sh.helm.release.v1.s%d.v1", i),
						Labels: map[string]string{"owner": "helm", "name": fmt.Sprintf("s%d", i), "status": "deployed", "version": "1"}}}
					cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%d", i),
						Labels: map[string]string{"app.kubernetes.io/managed-by": "Helm"}}}
					if withMetadata {
						fat(&secret.ObjectMeta)
						fat(&cm.ObjectMeta)
					}
					if _, err := cs.CoreV1().Secrets(namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
						errs <- err
						return
					}
					if _, err := cs.CoreV1().ConfigMaps(namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	populate("plain", false)
	populate("padded", true)

	ws, err := watches.Load(watches.Default, "v0", watches.Charts{"inference-stack": inferencestackchart.Load})
	if err != nil {
		t.Fatal(err)
	}
	// held is the live heap of a cache built as the operator's (its
	// options, limited to namespace) once it holds the release Secrets' and
	// the ConfigMaps' metadata, less the heap before it.
	held := func(namespace string) uint64 {
		t.Helper()
		before := liveHeap()
		opts, err := controller.CacheOptions(ws, controller.Options{Namespaces: namespace})
		if err != nil {
			t.Fatal(err)
		}
		scheme := clientgoscheme.Scheme
		opts.Scheme = scheme
		c, err := cache.New(e.cluster.RESTConfig(), opts)
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() { _ = c.Start(cctx) }()
		for _, kind := range []string{"Secret", "ConfigMap"} {
			m := &metav1.PartialObjectMetadata{}
			m.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: kind})
			if _, err := c.GetInformer(cctx, m); err != nil {
				t.Fatal(err)
			}
		}
		if !c.WaitForCacheSync(cctx) {
			t.Fatal("the cache did not sync")
		}
		for _, kind := range []string{"SecretList", "ConfigMapList"} {
			l := &metav1.PartialObjectMetadataList{}
			l.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: kind})
			if err := c.List(cctx, l, client.InNamespace(namespace)); err != nil || len(l.Items) != count {
				t.Fatalf("%s in %s: %d cached (%v), want %d", kind, namespace, len(l.Items), err, count)
			}
		}
		after := liveHeap()
		runtime.KeepAlive(c)
		if after < before {
			return 0
		}
		return after - before
	}
	plain, padded := held("plain"), held("padded")
	t.Logf("the caches hold %d KiB for %d plain Secrets and ConfigMaps, %d KiB with 100 KB of metadata each (%.2f×)",
		plain>>10, count, padded>>10, float64(padded)/float64(plain))
	if padded > plain+max(plain/10, 2<<20) {
		t.Errorf("tenant metadata grew the caches from %d to %d KiB", plain>>10, padded>>10)
	}
}

// liveHeap is the heap in use after a collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
