package xdstest

import (
	"context"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Recorder is a unary server interceptor that records every attempt a
// server receives, per method, with its grpc-previous-rpc-attempts header
// (grpc-go numbers its retries with it), and fails the first attempts of
// each method with a chosen code before the handler runs.
type Recorder struct {
	mu        sync.Mutex
	failFirst int
	code      codes.Code
	attempts  map[string][]string
}

// NewRecorder returns a recorder that fails the first failFirst attempts of
// each method with code; failFirst 0 fails nothing.
func NewRecorder(failFirst int, code codes.Code) *Recorder {
	return &Recorder{failFirst: failFirst, code: code, attempts: map[string][]string{}}
}

// Interceptor returns the interceptor; install it with grpc.UnaryInterceptor
// or grpc.ChainUnaryInterceptor (first, so that it sees every attempt).
func (r *Recorder) Interceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		prev := ""
		if v := md.Get("grpc-previous-rpc-attempts"); len(v) > 0 {
			prev = v[0]
		}
		r.mu.Lock()
		r.attempts[info.FullMethod] = append(r.attempts[info.FullMethod], prev)
		n := len(r.attempts[info.FullMethod])
		fail := n <= r.failFirst
		r.mu.Unlock()
		if fail {
			return nil, status.Errorf(r.code, "xdstest: attempt %d fails on purpose", n)
		}
		return handler(ctx, req)
	}
}

// Attempts returns the grpc-previous-rpc-attempts value of each attempt of
// a method, in order; "" where the header was absent (a first attempt).
func (r *Recorder) Attempts(fullMethod string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.attempts[fullMethod]...)
}

// Reset forgets the attempts and sets how many to fail.
func (r *Recorder) Reset(failFirst int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failFirst = failFirst
	r.attempts = map[string][]string{}
}

// Backend starts a gRPC server on a loopback port with the given options,
// lets register add its services, and stops it when the test ends. It
// returns the server's address, for Service.Endpoints.
func Backend(t testing.TB, register func(*grpc.Server), opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("xdstest: listen: %v", err)
	}
	s := grpc.NewServer(opts...)
	register(s)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(lis)
	}()
	t.Cleanup(func() {
		s.Stop()
		<-done
	})
	return lis.Addr().String()
}
