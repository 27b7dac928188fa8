package connectint_test

import (
	"context"
	"testing"

	"google.golang.org/protobuf/proto"
)

// TestReplayEveryProtocol: a keyed Deposit runs once and replays, with
// the marker, on the Connect, gRPC and gRPC-Web protocols.
func TestReplayEveryProtocol(t *testing.T) {
	e, _ := sqliteEnv(t, nil, nil)
	ctx := context.Background()
	for _, p := range protocols {
		t.Run(p, func(t *testing.T) {
			c := e.client(p)
			first, err := c.CallUnary(ctx, request("alice", "k-"+p, "r-"+p, 1))
			if err != nil {
				t.Fatal(err)
			}
			if replayed(first.Trailer()) {
				t.Fatal("the first answer is marked replayed")
			}
			again, err := c.CallUnary(ctx, request("alice", "k-"+p, "r-"+p, 1))
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(first.Msg, again.Msg) || !replayed(again.Trailer()) {
				t.Fatalf("replay %v (trailer %v), first %v", again.Msg, again.Trailer(), first.Msg)
			}
			if n := e.BizRows(t, "r-"+p); n != 1 {
				t.Fatalf("%d rows", n)
			}
		})
	}
}
