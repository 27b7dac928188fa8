package connectint_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/opledger/opledger/connectint"
	"github.com/opledger/opledger/policy"
)

// resetOnce lets the first keyed call through to the server and then
// fails it as a connection reset while its response was read: the answer
// is lost after commit, as when the server's process dies.
type resetOnce struct {
	base http.RoundTripper
	done atomic.Bool
}

func (r *resetOnce) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.base.RoundTrip(req)
	if err != nil || req.Header.Get(connectint.ResolveHeader) != "" || r.done.Swap(true) {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
}

// TestConnectionReset: connect-go's client names a connection reset
// CANCELED (for a server, a client that went away). The kit's client
// reads it, while the call's context is live, as an answer lost on the
// way: it resolves and returns the committed answer, instead of stopping
// with the outcome unknown and the deadline left.
func TestConnectionReset(t *testing.T) {
	t.Parallel()
	e, _ := sqliteEnv(t, nil, nil)
	for i, p := range []string{"connect", "grpc"} {
		reset := func(c *http.Client) *http.Client { return &http.Client{Transport: &resetOnce{base: c.Transport}} }
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := depositClient(e.url, reset(e.h1), reset(e.h2), p).CallUnary(ctx, request("alice", "k-raw-"+p, "raw-"+p, 5))
		live := ctx.Err() == nil
		cancel()
		if connect.CodeOf(err) != connect.CodeCanceled || !live {
			t.Fatalf("%s without the kit: %v; want connect-go's CANCELED with the context live", p, err)
		}
		kit, err := connectint.NewClient(catalog(t), policy.OwnerApplication, fastClient()...)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := depositClient(e.url, reset(e.h1), reset(e.h2), p, kit.ClientOptions()...).CallUnary(ctx, request("alice", "", "reset-"+p, 5))
		cancel()
		if err != nil {
			t.Fatalf("%s through the kit: %v; want the committed answer", p, err)
		}
		if st := kit.Stats(); st.Resolved != 1 || resp.Msg.GetReference() != "reset-"+p {
			t.Errorf("%s: client %+v, reply %v; want the answer from one resolve", p, st, resp.Msg)
		}
		if n := e.runs.Load(); n != int64(2*(i+1)) {
			t.Errorf("%s: the handler ran %d times in all, want %d (once per call)", p, n, 2*(i+1))
		}
	}
}
