package keyedcore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/opledger/opledger/internal/keyedconf"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/policy"
	"github.com/opledger/opledger/txmiddleware"
)

// SQL is keyed.SQL(db, l) for a transport's NewServer (New), which
// refuses a nil database or ledger; the error is the transport's to wrap.
func SQL(db *sql.DB, l ledger.Ledger) (keyed.Transactions, error) {
	switch {
	case db == nil:
		return nil, errors.New("nil database")
	case l == nil:
		return nil, errors.New("nil ledger")
	}
	return keyed.SQL(db, l), nil
}

// ViaSQL is a transport's NewServer (New) on database/sql: newFor (its
// NewServerFor) on keyed.SQL(db, l), after refusing a nil database or
// ledger with an error wrapping invalid (its ErrInvalidConfig).
func ViaSQL[S any](db *sql.DB, l ledger.Ledger, invalid error, newFor func(keyed.Transactions) (S, error)) (S, error) {
	tx, err := SQL(db, l)
	if err != nil {
		var zero S
		return zero, fmt.Errorf("%w: %w", invalid, err)
	}
	return newFor(tx)
}

// RPC is what an RPC transport (grpcint, connectint) renders its server
// with.
type RPC struct {
	// Transport is its name ("grpcint").
	Transport string
	// Noun names a method in its messages ("method", "procedure").
	Noun string
	// Codec is its default error codec.
	Codec txmiddleware.ErrorCodec
	// Answered reports an error of the handler's own (ServerConfig).
	Answered func(error) bool
	// KeyHeader names its key header in messages.
	KeyHeader string
	// Invalid is its ErrInvalidConfig, which NewRPCServer's errors wrap.
	Invalid error
}

// NewRPCServer is the common part of grpcint's and connectint's
// NewServerFor: it refuses a nil argument (noCaller: the caller function
// is nil), applies opts, refuses a keyed method of catalog that is not
// unary and a WithClaimAtCommit name that is not a keyed method, and
// builds the core, with the telemetry of the global providers when no
// telemetry option was given. The error wraps the transport's
// ErrInvalidConfig (r.Invalid).
func NewRPCServer(tx keyed.Transactions, catalog *policy.Catalog, noCaller bool, r RPC, opts []keyed.ServerOption) (*Server, keyedconf.Server, error) {
	core, cfg, err := newRPCServer(tx, catalog, noCaller, r, opts)
	if err != nil {
		return nil, cfg, fmt.Errorf("%w: %w", r.Invalid, err)
	}
	return core, cfg, nil
}

// newRPCServer is NewRPCServer before its error is wrapped.
func newRPCServer(tx keyed.Transactions, catalog *policy.Catalog, noCaller bool, r RPC, opts []keyed.ServerOption) (*Server, keyedconf.Server, error) {
	cfg := keyedconf.NewServer(r.Transport, nil, nil)
	switch {
	case tx == nil:
		return nil, cfg, errors.New("nil transactions")
	case catalog == nil:
		return nil, cfg, errors.New("nil method catalog")
	case noCaller:
		return nil, cfg, errors.New("nil caller function")
	case tx.Dialect() == nil:
		return nil, cfg, errors.New("the ledger has no dialect")
	}
	cfg.Codec = r.Codec
	if err := keyedconf.ApplyServer(&cfg, opts); err != nil {
		return nil, cfg, err
	}
	for _, p := range catalog.Methods() {
		if p.Kind == policy.KindKeyed && p.Shape != policy.ShapeUnary {
			return nil, cfg, fmt.Errorf("keyed %s %s is %s; only unary %ss can be keyed", r.Noun, p.FullMethod, p.Shape, r.Noun)
		}
	}
	for _, m := range cfg.AtCommit {
		if p, ok := catalog.Lookup(m); !ok || p.Kind != policy.KindKeyed {
			return nil, cfg, fmt.Errorf("WithClaimAtCommit: %q is not a keyed %s of the catalog", m, r.Noun)
		}
	}
	tel := cfg.Tel() // recorded with the global providers without the options
	core, err := NewServer(tx, ServerConfig{
		Codec: cfg.Codec, TxOptions: cfg.TxOptions, LockWait: cfg.LockWait, AtCommit: cfg.AtCommit,
		Answered: r.Answered, KeyHeader: r.KeyHeader, KeyNoun: "idempotency key",
		Telemetry: TelemetryOf(&tel, r.Transport), RetryOwner: cfg.RetryOwner, Catalog: catalog,
	})
	return core, cfg, err
}

// RetriesOf is Retries for a call of an RPC transport's catalog: a resolve
// request (which runs nothing), a call with no count header (every
// layer's first attempt) and a method the catalog does not know are not
// judged; a layer may retry a method whose kind is no side effects,
// idempotent or keyed (the server has the ledger). It returns the
// judgement (empty when none was made), whose SecondOwners the transport
// sends in SecondOwnerHeader.
func (s *Server) RetriesOf(ctx context.Context, catalog *policy.Catalog, method string, h RetryHeaders, resolve bool) RetryJudgement {
	if h.Attempt == nil && h.EnvoyAttempt == nil && h.PreviousAttempts == nil || resolve {
		return RetryJudgement{}
	}
	p, known := catalog.Lookup(method)
	if !known {
		return RetryJudgement{}
	}
	return s.Retries(ctx, method, h, retrySafe(p))
}

// retrySafe reports whether a layer may retry a method the kit's server
// serves: no side effects, idempotent, or keyed (the server has the
// ledger).
func retrySafe(p policy.MethodPolicy) bool {
	switch p.Kind {
	case policy.KindNoSideEffects, policy.KindIdempotent, policy.KindKeyed:
		return true
	}
	return false
}
