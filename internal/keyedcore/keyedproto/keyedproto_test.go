package keyedproto_test

import (
	"errors"
	"testing"

	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/opledger/opledger/internal/keyedcore/keyedproto"
	"github.com/opledger/opledger/ledger"
)

func TestResponseRoundTrip(t *testing.T) {
	m := wrapperspb.String("hello")
	r, err := keyedproto.EncodeResponse(m)
	if err != nil || r.TypeName != "google.protobuf.StringValue" || r.Code != 0 {
		t.Fatalf("%+v, %v", r, err)
	}
	back, err := keyedproto.DecodeResponse(r, nil)
	if err != nil || !proto.Equal(back, m) {
		t.Fatalf("%v, %v", back, err)
	}
	if _, err := keyedproto.DecodeResponse(r, new(protoregistry.Types)); !errors.Is(err, keyedproto.ErrUnreadable) {
		t.Errorf("unknown type: %v", err)
	}
	if _, err := keyedproto.DecodeResponse(ledger.Result{TypeName: r.TypeName, Response: []byte{0xff}}, nil); !errors.Is(err, keyedproto.ErrUnreadable) {
		t.Errorf("bad bytes: %v", err)
	}
	if _, err := keyedproto.EncodeResponse("not a message"); !errors.Is(err, keyedproto.ErrNotMessage) {
		t.Errorf("not a message: %v", err)
	}
}

func TestFingerprint(t *testing.T) {
	a, err1 := keyedproto.Fingerprint(wrapperspb.String("x"))
	b, err2 := keyedproto.Fingerprint(wrapperspb.String("x"))
	c, _ := keyedproto.Fingerprint(wrapperspb.String("y"))
	if err1 != nil || err2 != nil || a != b || a == c || a == (ledger.Fingerprint{}) {
		t.Fatalf("%x %x %x", a, b, c)
	}
	if _, err := keyedproto.Fingerprint(42); err == nil {
		t.Error("a request that is not a message")
	}
}

func TestStatusRoundTrip(t *testing.T) {
	p := &statuspb.Status{Code: 9, Message: "declined"}
	r, ok := keyedproto.EncodeStatus(p)
	if !ok || r.Code != 9 || r.TypeName != keyedproto.StatusTypeName {
		t.Fatalf("%+v, %v", r, ok)
	}
	back, err := keyedproto.DecodeStatus(r)
	if err != nil || !proto.Equal(back, p) {
		t.Fatalf("%v, %v", back, err)
	}
	if _, ok := keyedproto.EncodeStatus(&statuspb.Status{}); ok {
		t.Error("an OK status is not a final error")
	}
	if got, err := keyedproto.DecodeStatus(ledger.Result{Code: 5, TypeName: "other"}); err != nil || got.GetCode() != 5 {
		t.Errorf("code without a status: %v, %v", got, err)
	}
	for _, bad := range []ledger.Result{{Code: 9, TypeName: keyedproto.StatusTypeName, Response: []byte{0xff}}, {Code: 9, TypeName: keyedproto.StatusTypeName}} {
		if _, err := keyedproto.DecodeStatus(bad); !errors.Is(err, keyedproto.ErrUnreadable) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}
