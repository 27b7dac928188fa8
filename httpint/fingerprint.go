package httpint

import (
	"crypto/sha256"
	"encoding/binary"
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
