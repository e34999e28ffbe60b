package helmrecord

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// A release record lives where the namespace's editors may write Secrets,
// so a record is authenticated before Helm acts on it: the operator signs
// every record it writes with a key only the operators hold (an HMAC over
// what Helm and the operator read of the Secret: its namespace and name,
// the labels Helm queries by, the payload), and a record that does not
// verify is refused. The key of a major lives in a Secret of the
// namespace its operator runs in, which tenants cannot read or write.

// SignatureAnnotation holds a record's signature: the signing major, the
// ID of its key (hex of the first bytes of the key's SHA-256), and the
// base64 (URL alphabet, no padding) of the HMAC-SHA256, separated by dots.
const SignatureAnnotation = "models.takeoff.co/release-signature"

// KeySecret is the name of the Secret holding a major's key, in the
// namespace its operator runs in.
const KeySecret = "inference-stack-release-key"

// keyBytes is the size of a key: SHA-256's block-size-safe 256 bits.
const keyBytes = 32

// signedLabels are the record labels a signature covers: those Helm
// queries records by, and the one naming the operator that wrote it. Other
// labels (a backup tool's, say) may come and go.
var signedLabels = []string{"name", "owner", "status", "version", "models.takeoff.co/reconciled-by"}

// mac is the HMAC of what a signature covers, each part length-prefixed so
// that no two records share an input.
func mac(key []byte, s *corev1.Secret) []byte {
	h := hmac.New(sha256.New, key)
	part := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	part([]byte("inference-stack release record v1"))
	part([]byte(s.Namespace))
	part([]byte(s.Name))
	for _, l := range signedLabels {
		v, ok := s.Labels[l]
		if ok {
			part([]byte(l + "=" + v))
		} else {
			part([]byte(l))
		}
	}
	payload := sha256.Sum256(s.Data["release"])
	part(payload[:])
	return h.Sum(nil)
}

// Verdict is what a record's signature says of it.
type Verdict int

const (
	// Signed: the signature verifies with its major's key.
	Signed Verdict = iota
	// Legacy: no signature (or one by a key since replaced), on a record
	// created before any major signed records (written by an operator
	// that did not sign them yet, or before the key was replaced). A Legacy record is trusted only where what
	// the operator recorded elsewhere vouches for it (see
	// Secrets.WithLegacy): a Secret's creation time says nothing of what
	// was written into it since.
	Legacy
	// Unsigned: no signature, on a record created after records were
	// signed, or signed by a major whose key cannot be read.
	Unsigned
	// Forged: a signature that does not verify.
	Forged
)

// Keys finds the key of each major.
type Keys struct {
	// Own is the major that signs.
	Own string
	// Namespace says where a major's operator runs, and so its key.
	Namespace func(ctx context.Context, major string) (string, error)
	// Secrets is a client of the Secrets of a namespace.
	Secrets func(namespace string) corev1client.SecretInterface
	// Majors lists the majors whose keys count for the cut-over (Own
	// included or not).
	Majors func(ctx context.Context) ([]string, error)

	mu      sync.Mutex
	keys    map[string]key
	missing map[string]time.Time // listed majors whose key could not be read, and when
	cutover time.Time
	// majors are the listed majors, read at majorsAt.
	majors   []string
	majorsAt time.Time
}

// missingRecheck bounds how often the key of another major that could not
// be read is looked for again: a record may name any major.
const missingRecheck = time.Minute

type key struct {
	value   []byte
	id      string
	created time.Time
}

// keyID names a key in signatures, so that a record signed with a key
// since replaced is told from a forged one.
func keyID(value []byte) string {
	sum := sha256.Sum256(value)
	return hex.EncodeToString(sum[:6])
}

// key returns major's key, creating the own major's if it has none yet.
// Keys once read are kept: a key is never changed in place.
func (k *Keys) key(ctx context.Context, major string) (key, error) {
	k.mu.Lock()
	got, ok := k.keys[major]
	missing, gone := k.missing[major]
	k.mu.Unlock()
	if ok {
		return got, nil
	}
	if gone && time.Since(missing) < missingRecheck {
		return key{}, fmt.Errorf("the release-record key of %s could not be read a moment ago", major)
	}
	got, err := k.read(ctx, major)
	k.mu.Lock()
	defer k.mu.Unlock()
	if err != nil {
		if major != k.Own {
			if k.missing == nil {
				k.missing = map[string]time.Time{}
			}
			k.missing[major] = time.Now()
		}
		return key{}, err
	}
	if k.keys == nil {
		k.keys = map[string]key{}
	}
	k.keys[major] = got
	delete(k.missing, major)
	return got, nil
}

// read reads major's key, creating the own major's if it has none yet.
func (k *Keys) read(ctx context.Context, major string) (key, error) {
	if !isMajor(major) {
		return key{}, fmt.Errorf("%q is not a major (v0, v1, ...)", major)
	}
	ns, err := k.Namespace(ctx, major)
	if err != nil {
		return key{}, err
	}
	secrets := k.Secrets(ns)
	s, err := secrets.Get(ctx, KeySecret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && major == k.Own {
		s, err = createKey(ctx, secrets)
	}
	if err != nil {
		return key{}, fmt.Errorf("reading the release-record key of %s (Secret %s/%s): %w", major, ns, KeySecret, err)
	}
	v := s.Data["key"]
	if len(v) < keyBytes {
		return key{}, fmt.Errorf("the release-record key of %s (Secret %s/%s) holds %d bytes, fewer than %d", major, ns, KeySecret, len(v), keyBytes)
	}
	return key{value: v, id: keyID(v), created: s.CreationTimestamp.Time}, nil
}

// isMajor tells whether m is of the form v<digits>, as every major is,
// with at most two digits.
func isMajor(m string) bool {
	if len(m) < 2 || len(m) > 3 || m[0] != 'v' {
		return false
	}
	for _, c := range m[1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// createKey creates a new random key, or reads the one another replica
// created first.
func createKey(ctx context.Context, secrets corev1client.SecretInterface) (*corev1.Secret, error) {
	v := make([]byte, keyBytes)
	if _, err := rand.Read(v); err != nil {
		return nil, err
	}
	s, err := secrets.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: KeySecret, Labels: map[string]string{"app.kubernetes.io/part-of": "inference-stack-operator"}},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{"key": v},
		Immutable:  ptrTo(true),
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return secrets.Get(ctx, KeySecret, metav1.GetOptions{})
	}
	return s, err
}

func ptrTo[T any](v T) *T { return &v }

// Sign sets s's signature with the own major's key.
func (k *Keys) Sign(ctx context.Context, s *corev1.Secret) error {
	own, err := k.key(ctx, k.Own)
	if err != nil {
		return err
	}
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[SignatureAnnotation] = k.Own + "." + own.id + "." + base64.RawURLEncoding.EncodeToString(mac(own.value, s))
	return nil
}

// Verify says what s's signature says of it; an error is one of reading
// the keys, not of the record.
func (k *Keys) Verify(ctx context.Context, s *corev1.Secret) (Verdict, error) {
	sig, ok := s.Annotations[SignatureAnnotation]
	if !ok {
		return k.beforeSigning(ctx, s)
	}
	parts := strings.Split(sig, ".")
	if len(parts) != 3 {
		return Forged, nil
	}
	major, id := parts[0], parts[1]
	got, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || !isMajor(major) {
		return Forged, nil
	}
	// Only the keys of the majors the CRD's annotation lists (which only
	// cluster admins write) are looked for, or of any major where it lists
	// none: a record may name any major, and each would cost requests and
	// memory (at most a hundred majors, each looked for once a minute).
	if listed, err := k.listed(ctx, major); err != nil {
		return 0, err
	} else if !listed {
		return Unsigned, nil
	}
	signer, err := k.key(ctx, major)
	if err != nil {
		if major == k.Own {
			return 0, err
		}
		// Another major's key that cannot be read (its operator was
		// removed) proves nothing.
		return Unsigned, nil
	}
	if id != signer.id {
		// Signed with a key since replaced (a major's namespace deleted
		// and created again): as good as no signature.
		return k.beforeSigning(ctx, s)
	}
	if !hmac.Equal(got, mac(signer.value, s)) {
		return Forged, nil
	}
	return Signed, nil
}

// beforeSigning is the verdict on a record without a usable signature:
// Legacy if it was created before records were signed, Unsigned if since.
func (k *Keys) beforeSigning(ctx context.Context, s *corev1.Secret) (Verdict, error) {
	cutover, err := k.since(ctx)
	if err != nil {
		return 0, err
	}
	if s.CreationTimestamp.Time.Before(cutover) {
		return Legacy, nil
	}
	return Unsigned, nil
}

// majorsRecheck bounds how often the listed majors are read again.
const majorsRecheck = time.Minute

// listed tells whether major is the own one or one the CRD's annotation
// lists (any, where it lists none: an operator installed without the
// catalog chart), read at most every majorsRecheck.
func (k *Keys) listed(ctx context.Context, major string) (bool, error) {
	if major == k.Own {
		return true, nil
	}
	k.mu.Lock()
	majors, at := k.majors, k.majorsAt
	k.mu.Unlock()
	if at.IsZero() || time.Since(at) > majorsRecheck {
		var err error
		if majors, err = k.Majors(ctx); err != nil {
			return false, err
		}
		k.mu.Lock()
		k.majors, k.majorsAt = majors, time.Now()
		k.mu.Unlock()
	}
	return len(majors) == 0 || slices.Contains(majors, major), nil
}

// since is when records began to be signed: the creation of the earliest
// key of the majors. The API server sets a Secret's creation time, so no
// record a tenant creates is dated before it.
func (k *Keys) since(ctx context.Context) (time.Time, error) {
	k.mu.Lock()
	cutover := k.cutover
	k.mu.Unlock()
	if !cutover.IsZero() {
		return cutover, nil
	}
	own, err := k.key(ctx, k.Own)
	if err != nil {
		return time.Time{}, err
	}
	cutover = own.created
	majors, err := k.Majors(ctx)
	if err != nil {
		return time.Time{}, err
	}
	for _, m := range majors {
		if other, err := k.key(ctx, m); err == nil && other.created.Before(cutover) {
			cutover = other.created
		}
	}
	k.mu.Lock()
	k.cutover = cutover
	k.mu.Unlock()
	return cutover, nil
}

// RefusedError says a record is not one an operator wrote.
type RefusedError struct {
	Secret  string
	Verdict Verdict
}

func (e *RefusedError) Error() string {
	why := "carries a signature that does not verify"
	if e.Verdict == Unsigned {
		why = "is not signed by an operator (it was written after the operators began signing their records, or by an operator whose key is gone)"
	}
	return fmt.Sprintf("refusing release record %s: it %s; someone with write access to the namespace's Secrets wrote or changed it: delete it", e.Secret, why)
}
