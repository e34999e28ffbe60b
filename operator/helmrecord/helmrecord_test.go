package helmrecord

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/release"
)

// gzipped is data as a record payload: gzip at Helm's level, base64.
func gzipped(t *testing.T, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return []byte(base64.StdEncoding.EncodeToString(buf.Bytes()))
}

// A record decodes as Helm wrote it: compressed (Encode's), or
// uncompressed as Helm stored records before it compressed them.
func TestDecodeReadsHelmsRecords(t *testing.T) {
	rls := &release.Release{Name: "stack", Namespace: "tenant", Version: 2, Manifest: "---\nkind: ConfigMap\n",
		Info: &release.Info{Status: release.StatusDeployed}}
	encoded, err := Encode(rls)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := json.Marshal(rls)
	if err != nil {
		t.Fatal(err)
	}
	for name, payload := range map[string][]byte{
		"compressed":   encoded,
		"uncompressed": []byte(base64.StdEncoding.EncodeToString(plain)),
	} {
		got, err := Decode(payload, MaxRecordBytes)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got.Name != rls.Name || got.Version != rls.Version || got.Manifest != rls.Manifest || got.Info.Status != release.StatusDeployed {
			t.Errorf("%s: decoded %+v", name, got)
		}
	}
	if _, err := Decode([]byte("not base64!"), MaxRecordBytes); err == nil || IsTooLarge(err) {
		t.Errorf("a payload that is not base64: %v", err)
	}
}

// A gzip bomb (256 MiB of zeros in about 256 KiB) is refused once it has
// inflated past the limit, having cost about the limit in memory, not its
// size.
func TestDecodeRefusesABomb(t *testing.T) {
	const limit = 1 << 20
	var buf bytes.Buffer
	w, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	zeros := make([]byte, 1<<20)
	for range 256 {
		if _, err := w.Write(zeros); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	payload := []byte(base64.StdEncoding.EncodeToString(buf.Bytes()))

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = Decode(payload, limit)
	runtime.ReadMemStats(&after)
	var tooLarge *TooLargeError
	if !IsTooLarge(err) {
		t.Fatalf("a bomb of %d compressed bytes decoded: %v", len(payload), err)
	}
	if tooLarge = err.(*TooLargeError); !tooLarge.Inflated || tooLarge.Limit != limit {
		t.Errorf("error %+v, want inflated past %d", tooLarge, limit)
	}
	// The payload's own decoding (base64 to about 1 MiB) and the inflated
	// bytes up to the limit, with io.ReadAll's growth: a few times the
	// limit, three orders of magnitude below what Helm's driver allocates.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8*limit {
		t.Errorf("decoding the bomb allocated %d bytes, want at most %d", alloc, 8*limit)
	}

	// Stored larger than the limit: refused before anything is decoded.
	if _, err := Decode(payload, 1024); !IsTooLarge(err) || err.(*TooLargeError).Inflated {
		t.Errorf("a payload larger than the limit as stored: %v", err)
	}
}

// A budget bounds the records of a history together.
func TestBudget(t *testing.T) {
	record := func(size int) []byte {
		b, err := Encode(&release.Release{Name: "stack", Manifest: strings.Repeat("x", size), Info: &release.Info{}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	b := Budget{PerRecord: 3000, Left: 4000}
	if _, err := b.Decode(record(2000)); err != nil {
		t.Fatal(err)
	}
	if b.Left >= 2000 || b.Left <= 1000 {
		t.Errorf("left %d after a record of about 2,100 bytes", b.Left)
	}
	// Within the per-record limit, past what is left.
	if _, err := b.Decode(record(2000)); !IsTooLarge(err) {
		t.Errorf("a second record past the total: %v", err)
	}
	if _, err := (&Budget{PerRecord: 1000, Left: 1 << 20}).Decode(record(2000)); !IsTooLarge(err) {
		t.Errorf("a record past the per-record limit: %v", err)
	}
}
