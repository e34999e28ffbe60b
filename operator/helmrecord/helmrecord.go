// Package helmrecord reads and writes the payload of a Helm release record
// (the "release" key of a helm.sh/release.v1 Secret: base64 of gzipped
// JSON), as Helm's Secrets driver does, but bounded on the way in.
//
// A release record lives in the stack's namespace, where whoever may edit
// the namespace may write Secrets, and Helm inflates every record it lists
// with no bound: a 1 MiB Secret can inflate to gigabytes. Decode refuses a
// payload before it grows past a limit, so a forged record costs its reader
// at most that much memory.
package helmrecord

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"helm.sh/helm/v3/pkg/release"
)

// MaxRecordBytes bounds a record's JSON once inflated. The operator's own
// records hold a manifest of at most 1 MiB (the operator refuses larger
// renders), the stack's spec (bounded by the CRD) and the chart's
// metadata: about 15 KB for a typical stack, well under 4 MiB for any.
const MaxRecordBytes = 4 << 20

// TooLargeError says a record's payload is larger than the limit its reader
// set.
type TooLargeError struct {
	Limit int64
	// Inflated tells whether the limit was passed once decompressed rather
	// than as stored.
	Inflated bool
}

func (e *TooLargeError) Error() string {
	if e.Inflated {
		return fmt.Sprintf("the release record inflates to more than %d bytes, the most a record of this operator holds", e.Limit)
	}
	return fmt.Sprintf("the release record is larger than %d bytes, the most a record of this operator holds", e.Limit)
}

// gzipMagic starts every gzip stream; Helm stored records uncompressed
// before it compressed them, and reads both.
var gzipMagic = []byte{0x1f, 0x8b, 0x08}

// Decode reads a record's payload, refusing one whose JSON is, or inflates
// to, more than limit bytes.
func Decode(payload []byte, limit int64) (*release.Release, error) {
	rel, _, err := decode(payload, limit)
	return rel, err
}

// Budget decodes several records (a release's history) within a total: each
// within PerRecord bytes, all within what is Left.
type Budget struct {
	PerRecord, Left int64
}

// Decode reads one record and counts its size against b.
func (b *Budget) Decode(payload []byte) (*release.Release, error) {
	limit := min(b.PerRecord, b.Left)
	rel, n, err := decode(payload, limit)
	if err != nil {
		return nil, err
	}
	b.Left -= n
	return rel, nil
}

// decode is Decode, also returning the size of the record's JSON.
func decode(payload []byte, limit int64) (*release.Release, int64, error) {
	if int64(base64.StdEncoding.DecodedLen(len(payload))) > limit {
		return nil, 0, &TooLargeError{Limit: limit}
	}
	b := make([]byte, base64.StdEncoding.DecodedLen(len(payload)))
	n, err := base64.StdEncoding.Decode(b, payload)
	if err != nil {
		return nil, 0, fmt.Errorf("decoding a release record: %w", err)
	}
	b = b[:n]
	if bytes.HasPrefix(b, gzipMagic) {
		if b, err = inflate(b, limit); err != nil {
			return nil, 0, err
		}
	}
	var rel release.Release
	if err := json.Unmarshal(b, &rel); err != nil {
		return nil, 0, fmt.Errorf("reading a release record: %w", err)
	}
	return &rel, int64(len(b)), nil
}

// inflate decompresses b, stopping as soon as it passes limit bytes.
func inflate(b []byte, limit int64) ([]byte, error) {
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("decompressing a release record: %w", err)
	}
	defer r.Close()
	out, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("decompressing a release record: %w", err)
	}
	if int64(len(out)) > limit {
		return nil, &TooLargeError{Limit: limit, Inflated: true}
	}
	return out, nil
}

// IsTooLarge tells whether err is a TooLargeError.
func IsTooLarge(err error) bool {
	var e *TooLargeError
	return errors.As(err, &e)
}

// gzipWriters holds writers at Helm's level; one is reset for each record.
// Helm's driver makes a new writer per record, which allocates and clears
// about 800 KB of tables to compress about 12 KB; a pooled writer reset for
// each record writes the same bytes (same level, no name, no time).
var gzipWriters = sync.Pool{New: func() any {
	w, _ := gzip.NewWriterLevel(nil, gzip.BestCompression) // a valid level: no error
	return w
}}

// Encode writes rls as Helm's driver does: JSON, gzip at BestCompression,
// standard base64 (which a Secret's data then holds as bytes).
func Encode(rls *release.Release) ([]byte, error) {
	b, err := json.Marshal(rls)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	w := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(w)
	w.Reset(&buf)
	if _, err := w.Write(b); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	out := make([]byte, base64.StdEncoding.EncodedLen(buf.Len()))
	base64.StdEncoding.Encode(out, buf.Bytes())
	return out, nil
}
