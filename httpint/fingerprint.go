package httpint

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"

	"github.com/opledger/opledger/ledger"
)

// fingerprint is the SHA-256 of the request as the ledger compares it:
// the method, the path, the query (parameters sorted by name), the
// configured headers and the body (canonicalised when configured), each
// length-prefixed.
func (m *Middleware) fingerprint(r *http.Request, body []byte) (ledger.Fingerprint, error) {
	if m.cfg.canon != nil {
		c, err := m.cfg.canon(body)
		if err != nil {
			return ledger.Fingerprint{}, err
		}
		body = c
	}
	h := sha256.New()
	field(h, "opledger/httpint/v1")
	field(h, r.Method)
	field(h, r.URL.EscapedPath())
	if q, err := url.ParseQuery(r.URL.RawQuery); err == nil {
		field(h, "q:"+q.Encode())
	} else {
		field(h, "raw:"+r.URL.RawQuery)
	}
	for _, name := range m.cfg.fpHeaders {
		vs := r.Header[name]
		field(h, name)
		field(h, fmt.Sprint(len(vs)))
		for _, v := range vs {
			field(h, v)
		}
	}
	field(h, string(body))
	var fp ledger.Fingerprint
	h.Sum(fp[:0])
	return fp, nil
}

func field(h hash.Hash, s string) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(s)))
	h.Write(n[:])
	io.WriteString(h, s)
}

// CanonicalJSON is a body canonicaliser for JSON bodies (see
// WithBodyCanonicalizer): it returns the body re-encoded with object keys
// sorted and insignificant whitespace removed, so that two encodings of
// the same document fingerprint alike. Numbers keep their spelling (1 and
// 1.0 differ); of duplicate keys the last counts. An empty body stays
// empty; a body that is not one JSON value is an error.
func CanonicalJSON(body []byte) ([]byte, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("httpint: body is not JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("httpint: body holds more than one JSON value")
	}
	return json.Marshal(v)
}
