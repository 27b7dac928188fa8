package policy

import (
	"fmt"
	"strings"
)

// RetryOwner names the one layer that retries calls on a channel. The zero
// value is not a valid owner: every channel needs an explicit decision.
type RetryOwner uint8

// The four retry owners.
const (
	// OwnerApplication: the application retries (through the kit's client
	// interceptor, with eligibility, budget and backoff); the channel's own
	// retries are disabled and the service config carries no retry policy.
	OwnerApplication RetryOwner = iota + 1
	// OwnerServiceConfig: grpc-go retries according to the channel's service
	// config (retryPolicy and retryThrottling); the application does not.
	OwnerServiceConfig
	// OwnerMesh: a service mesh (a sidecar or proxy) retries; neither the
	// application nor the service config may.
	OwnerMesh
	// OwnerNone: nobody retries. This is a decision, not an omission.
	OwnerNone
)

// String returns the owner's name as accepted by parseRetryOwner:
// "application", "service-config", "mesh" or "none".
func (o RetryOwner) String() string {
	switch o {
	case OwnerApplication:
		return "application"
	case OwnerServiceConfig:
		return "service-config"
	case OwnerMesh:
		return "mesh"
	case OwnerNone:
		return "none"
	default:
		return fmt.Sprintf("RetryOwner(%d)", uint8(o))
	}
}

// Valid reports whether o is one of the four owners.
func (o RetryOwner) Valid() bool { return o >= OwnerApplication && o <= OwnerNone }

// parseRetryOwner parses an owner name. It accepts the names String returns,
// in any letter case, and "service_config" or "serviceconfig" for
// OwnerServiceConfig. Anything else is an error wrapping ErrInvalidOwner.
func parseRetryOwner(s string) (RetryOwner, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "application", "app":
		return OwnerApplication, nil
	case "service-config", "service_config", "serviceconfig":
		return OwnerServiceConfig, nil
	case "mesh":
		return OwnerMesh, nil
	case "none":
		return OwnerNone, nil
	}
	return 0, fmt.Errorf("%w: %q (want application, service-config, mesh or none)", ErrInvalidOwner, s)
}

// MarshalText implements encoding.TextMarshaler. An invalid owner is an
// error wrapping ErrInvalidOwner.
func (o RetryOwner) MarshalText() ([]byte, error) {
	if !o.Valid() {
		return nil, fmt.Errorf("%w: %d", ErrInvalidOwner, uint8(o))
	}
	return []byte(o.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler using parseRetryOwner.
func (o *RetryOwner) UnmarshalText(b []byte) error {
	v, err := parseRetryOwner(string(b))
	if err != nil {
		return err
	}
	*o = v
	return nil
}
