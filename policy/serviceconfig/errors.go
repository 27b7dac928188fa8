package serviceconfig

import (
	"errors"
	"fmt"

	"github.com/opledger/opledger/policy"
)

// Sentinel errors. Errors returned by this package wrap one of them, or one
// of package policy's (policy.ErrInvalidOwner, policy.ErrInvalidConfig),
// so that callers can test with errors.Is.
var (
	// ErrInvalid reports a service config that grpc-go would reject, or that
	// cannot be represented.
	ErrInvalid = errors.New("serviceconfig: invalid service config")
	// ErrRetryNotOwned reports a retry or hedging entry in the service config
	// of a channel whose retry owner is not the service config.
	ErrRetryNotOwned = errors.New("serviceconfig: retry entry on a channel the service config does not own")
)

// OwnershipError is returned by CheckOwnership when a service config carries
// a retry or hedging entry that its channel's owner forbids. It wraps
// ErrRetryNotOwned.
type ownershipError struct {
	// Owner is the channel's retry owner.
	Owner policy.RetryOwner
	// Name is the first offending method config name, in the form grpc-go
	// uses for lookups: "/pkg.Service/Method", "/pkg.Service/" or "" for the
	// channel default.
	Name string
	// Policy is "retryPolicy" or "hedgingPolicy".
	Policy string
}

// Error implements error.
func (e *ownershipError) Error() string {
	return fmt.Sprintf("serviceconfig: %s for name %q on a channel whose retry owner is %s: only the %s owner may retry in the service config",
		e.Policy, e.Name, e.Owner, policy.OwnerServiceConfig)
}

// Unwrap returns ErrRetryNotOwned.
func (e *ownershipError) Unwrap() error { return ErrRetryNotOwned }
