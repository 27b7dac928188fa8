package keyedproto_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/opledger/opledger/internal/keyedcore"
	"github.com/opledger/opledger/internal/keyedcore/keyedproto"
	"github.com/opledger/opledger/internal/testkit/aippb"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
)

// TestRequestID: the request_id of AIP-155 is read from a top-level
// singular string field of that name (a proto3 optional one too), and
// from no other form of it.
func TestRequestID(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		req     any
		id      string
		has     bool
		filling bool // WithRequestID fills it
	}{
		{"string, empty", &aippb.CreateOrderRequest{Item: "book"}, "", true, true},
		{"string, set", &aippb.CreateOrderRequest{RequestId: "r-1"}, "r-1", true, false},
		{"optional, unset", &aippb.ShipOrderRequest{}, "", true, true},
		{"optional, set empty", &aippb.ShipOrderRequest{RequestId: proto.String("")}, "", true, true},
		{"optional, set", &aippb.ShipOrderRequest{RequestId: proto.String("r-2")}, "r-2", true, false},
		{"nil message", (*aippb.CreateOrderRequest)(nil), "", true, false},
		{"no field", &aippb.CancelOrderRequest{Order: "o"}, "", false, false},
		{"bytes", &aippb.TagOrderRequest{RequestId: []byte("r")}, "", false, false},
		{"repeated", &aippb.LabelOrderRequest{RequestId: []string{"r"}}, "", false, false},
		{"in a oneof", &aippb.MarkOrderRequest{Mark: &aippb.MarkOrderRequest_RequestId{RequestId: "r"}}, "", false, false},
		{"another message", wrapperspb.String("x"), "", false, false},
		{"not a message", "request_id", "", false, false},
		{"nil", nil, "", false, false},
	} {
		id, has := keyedproto.RequestID(c.req)
		if id != c.id || has != c.has {
			t.Errorf("%s: RequestID = %q, %v; want %q, %v", c.name, id, has, c.id, c.has)
		}
		var before []byte
		if m, ok := c.req.(proto.Message); ok && m != nil && m.ProtoReflect().IsValid() {
			before, _ = proto.Marshal(m)
		}
		out := keyedproto.WithRequestID(c.req, "the-key")
		switch got, _ := keyedproto.RequestID(out); {
		case c.filling && (got != "the-key" || out == c.req):
			t.Errorf("%s: WithRequestID gave %v (request_id %q), want a copy with the key", c.name, out, got)
		case !c.filling && out != c.req:
			t.Errorf("%s: WithRequestID gave %v, want the request itself", c.name, out)
		}
		if before != nil {
			after, _ := proto.Marshal(c.req.(proto.Message))
			if string(after) != string(before) {
				t.Errorf("%s: WithRequestID changed the caller's message", c.name)
			}
		}
	}
	// A filled copy keeps the rest of the request.
	out := keyedproto.WithRequestID(&aippb.CreateOrderRequest{Item: "book", Quantity: 2}, "k")
	if want := (&aippb.CreateOrderRequest{Item: "book", Quantity: 2, RequestId: "k"}); !proto.Equal(out.(proto.Message), want) {
		t.Errorf("filled: %v, want %v", out, want)
	}
	if out := keyedproto.WithRequestID(&aippb.CreateOrderRequest{}, ""); proto.Size(out.(proto.Message)) != 0 {
		t.Errorf("an empty key filled the field: %v", out)
	}
}

// TestIdentifyRequestID: the key of a keyed call whose request has a
// request_id: the key header, else the request_id; both must agree; a
// resolve takes the header; the caller is checked first.
func TestIdentifyRequestID(t *testing.T) {
	t.Parallel()
	tg := testdb.Targets()[0]
	db := tg.Open(t, 2)
	store, err := ledger.New(tg.Dialect, ledger.WithTable(testdb.NewTable(t, db, tg.Dialect)))
	if err != nil {
		t.Fatal(err)
	}
	s, err := keyedcore.NewServer(keyed.SQL(db, store), keyedcore.ServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	const method = aippb.CreateOrderMethod
	with := func(id string) *aippb.CreateOrderRequest {
		return &aippb.CreateOrderRequest{Item: "book", RequestId: id}
	}
	for _, c := range []struct {
		name    string
		caller  string
		keys    []string
		req     any
		resolve bool
		key     string        // the identity's key when the call is identified
		outcome keyed.Outcome // the refusal's otherwise
	}{
		{"request_id alone", "alice", nil, with("r-1"), false, "r-1", 0},
		{"header alone", "alice", []string{"h-1"}, with(""), false, "h-1", 0},
		{"both, the same", "alice", []string{"r-1"}, with("r-1"), false, "r-1", 0},
		{"both, different", "alice", []string{"h-1"}, with("r-1"), false, "", keyed.KeyInvalid},
		{"neither", "alice", nil, with(""), false, "", keyed.KeyMissing},
		{"two headers", "alice", []string{"r-1", "r-1"}, with("r-1"), false, "", keyed.KeyInvalid},
		{"no caller, different", "", []string{"h-1"}, with("r-1"), false, "", keyed.CallerMissing},
		{"no caller, neither", "", nil, with(""), false, "", keyed.CallerMissing},
		{"resolve, different", "alice", []string{"h-1"}, with("r-1"), true, "h-1", 0},
		{"resolve, request_id alone", "alice", nil, with("r-1"), true, "r-1", 0},
		{"request_id not printable", "alice", nil, with("r\n1"), false, "", keyed.KeyInvalid},
		{"no field: the header's rules", "alice", nil, &aippb.CancelOrderRequest{}, false, "", keyed.KeyMissing},
	} {
		_, call := s.Begin(context.Background(), method, c.resolve)
		id, ans := keyedproto.Identify(call, c.caller, c.caller != "", c.keys, nil, c.req, c.resolve)
		if ans.Outcome != c.outcome {
			t.Errorf("%s: outcome %v (%s), want %v", c.name, ans.Outcome, ans.Detail, c.outcome)
			continue
		}
		if c.outcome != 0 {
			if ans.Detail == "" || strings.Contains(ans.Detail, "r-1") || strings.Contains(ans.Detail, "h-1") {
				t.Errorf("%s: detail %q", c.name, ans.Detail)
			}
			continue
		}
		want, err := ledger.NewIdentity(c.caller, method, c.key)
		if err != nil || id != want {
			t.Errorf("%s: identity %v, want key %q's (%v)", c.name, id, c.key, err)
		}
	}
}
