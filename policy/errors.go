package policy

import (
	"errors"
	"fmt"
)

// Sentinel errors. Errors returned by this package wrap one of them, so that
// callers can test with errors.Is.
var (
	// ErrInvalidMethodName reports a full method name that is not of the form
	// /package.Service/Method.
	ErrInvalidMethodName = errors.New("policy: invalid full method name")
	// ErrDuplicateMethod reports a method listed twice in a catalog.
	ErrDuplicateMethod = errors.New("policy: duplicate method")
	// ErrUnknownMethod reports a method that is not in the catalog.
	ErrUnknownMethod = errors.New("policy: unknown method")
	// ErrInvalidOwner reports a RetryOwner value or name that is not one of
	// the four owners.
	ErrInvalidOwner = errors.New("policy: invalid retry owner")
	// ErrInvalidDescriptors reports proto descriptors that cannot be read.
	ErrInvalidDescriptors = errors.New("policy: invalid descriptors")
	// ErrInvalidServiceConfig reports a service config that grpc-go would
	// reject, or that cannot be represented.
	ErrInvalidServiceConfig = errors.New("policy: invalid service config")
	// ErrRetryNotOwned reports a retry or hedging entry in the service config
	// of a channel whose retry owner is not the service config.
	ErrRetryNotOwned = errors.New("policy: retry entry on a channel the service config does not own")
	// ErrInvalidSettings reports settings (budget, throttle, backoff) that are
	// out of range.
	ErrInvalidSettings = errors.New("policy: invalid settings")
	// ErrPushbackStop reports server pushback that says not to retry: a
	// negative, unparseable or repeated grpc-retry-pushback-ms value.
	ErrPushbackStop = errors.New("policy: server pushback says do not retry")
	// ErrDeadlineTooClose reports a retry whose wait would pass the call's
	// deadline.
	ErrDeadlineTooClose = errors.New("policy: retry wait would pass the call deadline")
)

// OwnershipError is returned by CheckOwnership when a service config carries
// a retry or hedging entry that its channel's owner forbids. It wraps
// ErrRetryNotOwned.
type OwnershipError struct {
	// Owner is the channel's retry owner.
	Owner RetryOwner
	// Name is the first offending method config name, in the form grpc-go
	// uses for lookups: "/pkg.Service/Method", "/pkg.Service/" or "" for the
	// channel default.
	Name string
	// Policy is "retryPolicy" or "hedgingPolicy".
	Policy string
}

// Error implements error.
func (e *OwnershipError) Error() string {
	return fmt.Sprintf("policy: %s for name %q on a channel whose retry owner is %s: only the %s owner may retry in the service config",
		e.Policy, e.Name, e.Owner, OwnerServiceConfig)
}

// Unwrap returns ErrRetryNotOwned.
func (e *OwnershipError) Unwrap() error { return ErrRetryNotOwned }
