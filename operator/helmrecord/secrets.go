package helmrecord

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage/driver"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// maxHistoryBytes bounds what one read of a release's history may hold
// and inflate in all: a few of the largest records a stack can have. A
// history holds at most --max-release-history records of about 15 KB
// each; more is forged.
const maxHistoryBytes = 4 * MaxRecordBytes

// Secrets is Helm's Secrets driver with its own reads, each record bounded
// before it is decoded and a release's history as a whole too, and its own
// writes, compressed by a pooled writer; it stores records as Helm's does
// (labels, type, encoding), so Helm's own driver and the helm CLI read
// them.
type Secrets struct {
	*driver.Secrets
	impl corev1client.SecretInterface
}

// NewSecrets returns the driver of the records impl holds, logging to log
// (nil: nowhere).
func NewSecrets(impl corev1client.SecretInterface, log func(format string, v ...any)) *Secrets {
	d := driver.NewSecrets(impl)
	if log == nil {
		log = func(string, ...any) {}
	}
	d.Log = log
	return &Secrets{Secrets: d, impl: impl}
}

// Get is Helm's, with the record bounded.
func (s *Secrets) Get(key string) (*release.Release, error) {
	obj, err := s.impl.Get(context.Background(), key, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, driver.ErrReleaseNotFound
		}
		return nil, fmt.Errorf("get: failed to get %q: %w", key, err)
	}
	rls, err := Decode(obj.Data["release"], MaxRecordBytes)
	if err != nil {
		return nil, fmt.Errorf("get: failed to decode data %q: %w", key, err)
	}
	rls.Labels = withoutSystemLabels(obj.Labels)
	return rls, nil
}

// List is Helm's, with each record bounded and the whole list too.
func (s *Secrets) List(filter func(*release.Release) bool) ([]*release.Release, error) {
	rels, _, err := s.records("owner=helm")
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	out := rels[:0]
	for _, r := range rels {
		if filter(r) {
			out = append(out, r)
		}
	}
	return out, nil
}

// Query is Helm's, with each record bounded and the whole answer too.
func (s *Secrets) Query(lbls map[string]string) ([]*release.Release, error) {
	set := labels.Set{}
	for k, v := range lbls {
		if errs := validation.IsValidLabelValue(v); len(errs) != 0 {
			return nil, fmt.Errorf("invalid label value: %q: %s", v, strings.Join(errs, "; "))
		}
		set[k] = v
	}
	rels, found, err := s.records(set.AsSelector().String())
	if err != nil {
		return nil, fmt.Errorf("query: %w", err)
	}
	if found == 0 {
		return nil, driver.ErrReleaseNotFound
	}
	return rels, nil
}

// listPage is how many Secrets one request for a release's records asks
// for: whatever a namespace's editors have labelled as its records, one
// page holds at most this many Secrets of at most 1 MiB each.
const listPage = 4

// records lists and decodes the records selector selects, a page at a
// time, each record within MaxRecordBytes and all within
// maxHistoryBytes, counted as stored and as inflated: a read of a
// release's history holds a few MiB at most, however many Secrets carry
// its labels. It also returns how many Secrets were found. A record that
// does not decode is skipped, as Helm skips it; going past a bound is an
// error naming the Secret, since a history missing a revision could be
// acted on as if it were whole.
func (s *Secrets) records(selector string) ([]*release.Release, int, error) {
	budget := Budget{PerRecord: MaxRecordBytes, Left: maxHistoryBytes}
	var rels []*release.Release
	found := 0
	opts := metav1.ListOptions{LabelSelector: selector, Limit: listPage}
	for {
		list, err := s.impl.List(context.Background(), opts)
		if err != nil {
			return nil, 0, fmt.Errorf("failed to list the release records: %w", err)
		}
		found += len(list.Items)
		for i := range list.Items {
			item := &list.Items[i]
			payload := item.Data["release"]
			if int64(len(payload)) > budget.Left {
				return nil, 0, fmt.Errorf("release record %s: the release's records hold more than %d bytes; delete the release Secrets this operator did not write", item.Name, maxHistoryBytes)
			}
			budget.Left -= int64(len(payload))
			rls, err := budget.Decode(payload)
			if IsTooLarge(err) {
				return nil, 0, fmt.Errorf("release record %s: %w (or the release's records together inflate to more than %d bytes); delete the release Secrets this operator did not write", item.Name, err, maxHistoryBytes)
			}
			if err != nil {
				s.Log("failed to decode release %s: %v", item.Name, err)
				continue
			}
			rls.Labels = item.Labels
			rels = append(rels, rls)
		}
		if list.Continue == "" {
			return rels, found, nil
		}
		opts.Continue = list.Continue
	}
}

// Delete is Helm's: the record, read bounded, then its Secret.
func (s *Secrets) Delete(key string) (*release.Release, error) {
	rls, err := s.Get(key)
	if err != nil {
		return nil, err
	}
	if err := s.impl.Delete(context.Background(), key, metav1.DeleteOptions{}); err != nil {
		return rls, err
	}
	return rls, nil
}

// withoutSystemLabels is what Helm's Get leaves of a record Secret's
// labels: those it did not set itself.
func withoutSystemLabels(l map[string]string) map[string]string {
	out := make(map[string]string, len(l))
	for k, v := range l {
		if !driver.ContainsSystemLabels(map[string]string{k: v}) {
			out[k] = v
		}
	}
	return out
}

func (s *Secrets) Create(key string, rls *release.Release) error {
	obj, err := secret(key, rls, "createdAt")
	if err != nil {
		return fmt.Errorf("create: failed to encode release %q: %w", rls.Name, err)
	}
	if _, err := s.impl.Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		if apierrors.IsAlreadyExists(err) {
			// Helm's callers (and historyOnce) test for this error.
			return driver.ErrReleaseExists
		}
		return fmt.Errorf("create: failed to create: %w", err)
	}
	return nil
}

func (s *Secrets) Update(key string, rls *release.Release) error {
	obj, err := secret(key, rls, "modifiedAt")
	if err != nil {
		return fmt.Errorf("update: failed to encode release %q: %w", rls.Name, err)
	}
	if _, err := s.impl.Update(context.Background(), obj, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update: failed to update: %w", err)
	}
	return nil
}

// secret is the Secret Helm's driver stores rls in: the release's
// own labels, then Helm's (the write's time under stamp, "createdAt" or
// "modifiedAt"), type helm.sh/release.v1, the record under "release".
func secret(key string, rls *release.Release, stamp string) (*corev1.Secret, error) {
	if rls.Info == nil {
		return nil, errors.New("the release has no info")
	}
	data, err := Encode(rls)
	if err != nil {
		return nil, err
	}
	labels := make(map[string]string, len(rls.Labels)+5)
	for k, v := range rls.Labels {
		labels[k] = v
	}
	labels[stamp] = strconv.FormatInt(time.Now().Unix(), 10)
	labels["name"] = rls.Name
	labels["owner"] = "helm"
	labels["status"] = rls.Info.Status.String()
	labels["version"] = strconv.Itoa(rls.Version)
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: key, Labels: labels},
		Type:       "helm.sh/release.v1",
		Data:       map[string][]byte{"release": data},
	}, nil
}
