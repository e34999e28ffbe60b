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
	// keys, when set, sign every record written and authenticate every
	// record read (see signature.go); namespace is impl's. vouched says
	// whether a Legacy record is one the reader trusts.
	keys      *Keys
	namespace string
	vouched   func(*release.Release) bool
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

// WithKeys makes s sign the records it writes and refuse those it reads that
// no operator wrote, the records being those of namespace. A Legacy
// record is trusted only if vouched says so (nil: none is).
func (s *Secrets) WithKeys(keys *Keys, namespace string, vouched func(*release.Release) bool) *Secrets {
	s.keys, s.namespace, s.vouched = keys, namespace, vouched
	if s.vouched == nil {
		s.vouched = func(*release.Release) bool { return false }
	}
	return s
}

// verdict is what obj's signature says of it; Legacy is left to trusted.
func (s *Secrets) verdict(obj *corev1.Secret) (Verdict, error) {
	if s.keys == nil {
		return Signed, nil
	}
	return s.keys.Verify(context.Background(), obj)
}

// trusted says whether rls, decoded from the record obj whose signature
// says v, may be acted on. A Legacy record must also be what Helm would
// have written: the deployed revision, named and labelled for the release
// and revision its payload holds (whatever a tenant wrote into a Secret
// before records were signed is Legacy too).
func (s *Secrets) trusted(v Verdict, rls *release.Release, obj *corev1.Secret) bool {
	if v == Signed {
		return true
	}
	return v == Legacy && rls.Info != nil && rls.Info.Status == release.StatusDeployed &&
		rls.Version > 0 && rls.Version <= maxLegacyRevision &&
		obj.Name == fmt.Sprintf("sh.helm.release.v1.%s.v%d", rls.Name, rls.Version) &&
		obj.Labels["name"] == rls.Name && obj.Labels["version"] == strconv.Itoa(rls.Version) &&
		s.vouched(rls)
}

// maxLegacyRevision bounds the revision of a record of before signing: the
// next revision is one more, and a record may say anything.
const maxLegacyRevision = 1 << 20

// Get is Helm's, with the record bounded.
func (s *Secrets) Get(key string) (*release.Release, error) {
	obj, err := s.impl.Get(context.Background(), key, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, driver.ErrReleaseNotFound
		}
		return nil, fmt.Errorf("get: failed to get %q: %w", key, err)
	}
	v, err := s.verdict(obj)
	if err != nil {
		return nil, fmt.Errorf("get: %w", err)
	}
	if v == Unsigned || v == Forged {
		return nil, fmt.Errorf("get: %w", &RefusedError{Secret: obj.Name, Verdict: v})
	}
	rls, err := Decode(obj.Data["release"], MaxRecordBytes)
	if err != nil {
		return nil, fmt.Errorf("get: failed to decode data %q: %w", key, err)
	}
	if !s.trusted(v, rls, obj) {
		return nil, fmt.Errorf("get: %w", &RefusedError{Secret: obj.Name, Verdict: Unsigned})
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

// minRecordCharge is the least a Secret labelled as a release's record
// counts against maxHistoryBytes: a history holds at most 256 of them
// (--max-release-history is 5 by default), read in at most 65 requests (the 257th ends it).
const minRecordCharge = 64 << 10

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
//
// With keys, a record no operator signed (a Legacy one the reader does not
// vouch for included) is left out if a trusted record of a later revision
// supersedes it (history an operator that did not sign wrote, or a
// tenant's: Helm acts on the latest revisions alone, and the stack's owner
// reference on every record collects them), and refused otherwise, as is
// a record whose signature does not verify.
func (s *Secrets) records(selector string) ([]*release.Release, int, error) {
	budget := Budget{PerRecord: MaxRecordBytes, Left: maxHistoryBytes}
	var rels []*release.Release
	var unsigned []unsignedRecord
	newestTrusted := -1
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
			// Every Secret costs at least minRecordCharge: a tenant's empty
			// ones, however many, end the read as surely as large ones.
			payload := item.Data["release"]
			charge := max(int64(len(payload)), minRecordCharge)
			if charge > budget.Left {
				return nil, 0, fmt.Errorf("release record %s: the release's records hold more than %d bytes, or are more than %d; delete the release Secrets this operator did not write", item.Name, maxHistoryBytes, maxHistoryBytes/minRecordCharge)
			}
			budget.Left -= charge
			v, err := s.verdict(item)
			if err != nil {
				return nil, 0, err
			}
			switch v {
			case Forged:
				return nil, 0, &RefusedError{Secret: item.Name, Verdict: v}
			case Unsigned:
				unsigned = append(unsigned, unsignedRecord{item.Name, item.Labels["version"]})
				continue
			}
			rls, err := budget.Decode(payload)
			if IsTooLarge(err) {
				return nil, 0, fmt.Errorf("release record %s: %w (or the release's records together inflate to more than %d bytes); delete the release Secrets this operator did not write", item.Name, err, maxHistoryBytes)
			}
			if err != nil {
				s.Log("failed to decode release %s: %v", item.Name, err)
				continue
			}
			rls.Labels = item.Labels
			if !s.trusted(v, rls, item) {
				unsigned = append(unsigned, unsignedRecord{item.Name, strconv.Itoa(rls.Version)})
				continue
			}
			newestTrusted = max(newestTrusted, rls.Version)
			rels = append(rels, rls)
		}
		if list.Continue == "" {
			break
		}
		opts.Continue = list.Continue
	}
	for _, r := range unsigned {
		// The label, not the payload, dates a record left out: it is never
		// decoded, and a record that lies about its revision is only left
		// out the sooner.
		if v, err := strconv.Atoi(r.version); err == nil && v < newestTrusted {
			s.Log("leaving out release record %s, which no operator signed, superseded by revision %d", r.name, newestTrusted)
			continue
		}
		return nil, 0, &RefusedError{Secret: r.name, Verdict: Unsigned}
	}
	return rels, found, nil
}

// unsignedRecord is what is kept of a record no operator signed until the
// newest trusted revision is known: its Secret's name and version label.
type unsignedRecord struct{ name, version string }

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
	obj, err := s.secret(key, rls, "createdAt")
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
	obj, err := s.secret(key, rls, "modifiedAt")
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
// "modifiedAt"), type helm.sh/release.v1, the record under "release";
// signed, with keys.
func (s *Secrets) secret(key string, rls *release.Release, stamp string) (*corev1.Secret, error) {
	obj, err := secret(key, rls, stamp)
	if err != nil || s.keys == nil {
		return obj, err
	}
	obj.Namespace = s.namespace
	return obj, s.keys.Sign(context.Background(), obj)
}

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
