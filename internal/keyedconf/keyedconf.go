// Package keyedconf is the configuration that package keyed's options
// build: one [Server] for the keyed servers of grpcint, connectint and
// httpint, one [Client] for the clients of grpcint and connectint. The
// options are keyed.ServerOption, keyed.ClientOption and keyed.Option,
// whose methods take these types, so that only the kit implements them;
// a transport's own options are built here too ([OwnServer],
// [OwnClient]) and mix with the shared ones in one list.
//
// A transport sets its name and the shared options it cannot honour
// before it applies the options ([ApplyServer], [ApplyClient]): such an
// option, another transport's own option, an option given twice and a nil
// option are errors.
package keyedconf

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/opledger/opledger/policy"
	"github.com/opledger/opledger/txmiddleware"
)

// The defaults of the shared options.
const (
	// DefaultLockWait is how long a keyed call waits before its claim is
	// decided (keyed.WithLockWait).
	DefaultLockWait = 2 * time.Second
	// DefaultInProgressPushback is the pushback of the RPC transports'
	// in-progress and storage-busy answers (keyed.WithInProgressPushback).
	DefaultInProgressPushback = 200 * time.Millisecond
	// DefaultMaxAttempts bounds the attempts of a client's call
	// (keyed.WithMaxAttempts).
	DefaultMaxAttempts = 5
	// DefaultResolveWindow bounds a client's resolves of a call without a
	// deadline (keyed.WithResolveWindow).
	DefaultResolveWindow = 30 * time.Second
)

// Telemetry is what the telemetry options (keyed.WithMeterProvider,
// keyed.WithTracerProvider, keyed.WithLogger) set.
type Telemetry struct {
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	Logger         *slog.Logger
}

// common is what both configurations share: who applies the options,
// what it refuses, and what was given.
type common struct {
	// Transport names the transport that applies the options
	// ("grpcint", "connectint", "httpint"), for error messages.
	Transport string
	// Refuse names the shared options the transport cannot honour, with
	// why.
	Refuse map[string]string
	// Own is the transport's own settings, which its own options set
	// (see OwnServer, OwnClient).
	Own any
	// Telemetry is the telemetry options'; nil when none was given.
	Telemetry *Telemetry

	seen map[string]bool
}

// tel returns the telemetry, made on first use.
func (c *common) tel() *Telemetry {
	if c.Telemetry == nil {
		c.Telemetry = &Telemetry{}
	}
	return c.Telemetry
}

// Tel returns the telemetry options' settings; zero when none was given.
func (c *common) Tel() Telemetry {
	if c.Telemetry == nil {
		return Telemetry{}
	}
	return *c.Telemetry
}

// apply applies one named option.
func (c *common) apply(name string, f func() error) error {
	if why, ok := c.Refuse[name]; ok {
		return fmt.Errorf("%s: %s cannot honour it: %s", name, c.Transport, why)
	}
	if c.seen == nil {
		c.seen = map[string]bool{}
	}
	if c.seen[name] {
		return fmt.Errorf("option %s given twice", name)
	}
	c.seen[name] = true
	if err := f(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// Server is a keyed server's configuration, with the defaults of
// NewServer.
type Server struct {
	common
	// TxOptions are keyed.WithTxOptions'.
	TxOptions []txmiddleware.Option
	// AtCommit names the methods (routes) keyed.WithClaimAtCommit runs
	// claim at commit.
	AtCommit []string
	// LockWait is keyed.WithLockWait's.
	LockWait time.Duration
	// Codec is keyed.WithErrorCodec's; nil: the transport's default.
	Codec txmiddleware.ErrorCodec
	// Pushback is keyed.WithInProgressPushback's.
	Pushback time.Duration
	// Types is keyed.WithTypeResolver's.
	Types protoregistry.MessageTypeResolver
	// RetryOwner is keyed.WithRetryOwner's; zero without it.
	RetryOwner policy.RetryOwner
}

// NewServer returns the defaults of transport's server, which cannot
// honour the shared options of refuse (name: why); own is its own
// settings.
func NewServer(transport string, own any, refuse map[string]string) Server {
	return Server{common: common{Transport: transport, Refuse: refuse, Own: own},
		LockWait: DefaultLockWait, Pushback: DefaultInProgressPushback, Types: protoregistry.GlobalTypes}
}

// Client is a keyed client's configuration, with the defaults of
// NewClient.
type Client struct {
	common
	// Budget is keyed.WithBudget's; nil: a default budget.
	Budget *policy.Budget
	// FundBySuccess is keyed.WithBudgetFundedBySuccess's.
	FundBySuccess bool
	// Backoff is keyed.WithBackoff's.
	Backoff policy.Backoff
	// MaxAttempts is keyed.WithMaxAttempts'.
	MaxAttempts int
	// ResolveWindow is keyed.WithResolveWindow's.
	ResolveWindow time.Duration
	// DownstreamKeys is keyed.WithDownstreamKeys'.
	DownstreamKeys bool
}

// NewClient returns the defaults of transport's client, as NewServer.
func NewClient(transport string, own any, refuse map[string]string) Client {
	return Client{common: common{Transport: transport, Refuse: refuse, Own: own},
		MaxAttempts: DefaultMaxAttempts, ResolveWindow: DefaultResolveWindow}
}

// ServerOpt is an option of a keyed server only.
type ServerOpt struct {
	name string
	f    func(*Server) error
}

// ApplyToServer applies the option to c.
func (o ServerOpt) ApplyToServer(c *Server) error {
	return c.apply(o.name, func() error { return o.f(c) })
}

// ClientOpt is an option of a keyed client only.
type ClientOpt struct {
	name string
	f    func(*Client) error
}

// ApplyToClient applies the option to c.
func (o ClientOpt) ApplyToClient(c *Client) error {
	return c.apply(o.name, func() error { return o.f(c) })
}

// BothOpt is an option of both sides (the telemetry's).
type BothOpt struct {
	name string
	f    func(*common) error
}

// ApplyToServer applies the option to c.
func (o BothOpt) ApplyToServer(c *Server) error {
	return c.apply(o.name, func() error { return o.f(&c.common) })
}

// ApplyToClient applies the option to c.
func (o BothOpt) ApplyToClient(c *Client) error {
	return c.apply(o.name, func() error { return o.f(&c.common) })
}

// ServerOption returns a shared server option called name.
func ServerOption(name string, f func(*Server) error) ServerOpt { return ServerOpt{name, f} }

// ClientOption returns a shared client option called name.
func ClientOption(name string, f func(*Client) error) ClientOpt { return ClientOpt{name, f} }

// TelemetryOption returns an option of both sides that sets the
// telemetry with f.
func TelemetryOption(name string, f func(*Telemetry) error) BothOpt {
	return BothOpt{name, func(c *common) error { return f(c.tel()) }}
}

// notOwn is the error of a transport's own option given to another.
func notOwn(home string, c *common) error {
	return fmt.Errorf("an option of %s; %s cannot honour it", home, c.Transport)
}

// OwnServer returns transport home's own server option called name: f
// sets home's own settings (*T, the Own of its Server). Given to another
// transport it is an error.
func OwnServer[T any](home, name string, f func(*T) error) ServerOpt {
	return ServerOpt{name, func(c *Server) error {
		t, ok := c.Own.(*T)
		if !ok {
			return notOwn(home, &c.common)
		}
		return f(t)
	}}
}

// OwnClient is OwnServer for a client.
func OwnClient[T any](home, name string, f func(*T) error) ClientOpt {
	return ClientOpt{name, func(c *Client) error {
		t, ok := c.Own.(*T)
		if !ok {
			return notOwn(home, &c.common)
		}
		return f(t)
	}}
}

// ErrNilOption is returned (wrapped) for a nil option.
var ErrNilOption = errors.New("nil option")

// ApplyServer applies opts to c in order, stopping at the first error.
func ApplyServer[O interface{ ApplyToServer(*Server) error }](c *Server, opts []O) error {
	for i, o := range opts {
		if any(o) == nil {
			return fmt.Errorf("option %d: %w", i+1, ErrNilOption)
		}
		if err := o.ApplyToServer(c); err != nil {
			return err
		}
	}
	return nil
}

// ApplyClient applies opts to c in order, stopping at the first error.
func ApplyClient[O interface{ ApplyToClient(*Client) error }](c *Client, opts []O) error {
	for i, o := range opts {
		if any(o) == nil {
			return fmt.Errorf("option %d: %w", i+1, ErrNilOption)
		}
		if err := o.ApplyToClient(c); err != nil {
			return err
		}
	}
	return nil
}
