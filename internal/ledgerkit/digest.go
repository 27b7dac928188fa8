package ledgerkit

import (
	"crypto/sha256"
	"encoding/binary"
)

// Digest is an entry's primary key: SHA-256 over the length-prefixed
// (caller, method, key hash) triple, so two different triples never
// produce the same input. keyHash is the SHA-256 of the raw key. Package
// ledger's identities use it, and so does opledger console, which gets
// only the key's hash from the page's form.
func Digest(caller, method string, keyHash [32]byte) [32]byte {
	h := sha256.New()
	var n [8]byte
	h.Write([]byte("opledger/v1\x00"))
	binary.BigEndian.PutUint64(n[:], uint64(len(caller)))
	h.Write(n[:])
	h.Write([]byte(caller))
	binary.BigEndian.PutUint64(n[:], uint64(len(method)))
	h.Write(n[:])
	h.Write([]byte(method))
	binary.BigEndian.PutUint64(n[:], uint64(len(keyHash)))
	h.Write(n[:])
	h.Write(keyHash[:])
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// DigestFirstSent is the primary key of an identity whose birth is a
// first-sent time (ledger.Identity.WithFirstSent): the triple's encoding
// followed by the length-prefixed birth (Unix microseconds), so that it
// never equals a triple's digest. opledger console computes it from the
// find form's first-sent time, as the servers do from the header.
func DigestFirstSent(caller, method string, keyHash [32]byte, birth int64) [32]byte {
	h := sha256.New()
	var n [8]byte
	h.Write([]byte("opledger/v1\x00"))
	for _, part := range [][]byte{[]byte(caller), []byte(method), keyHash[:]} {
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	binary.BigEndian.PutUint64(n[:], 8)
	h.Write(n[:])
	binary.BigEndian.PutUint64(n[:], uint64(birth))
	h.Write(n[:])
	var out [32]byte
	h.Sum(out[:0])
	return out
}
