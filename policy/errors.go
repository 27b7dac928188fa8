package policy

import "errors"

// Sentinel errors. Errors returned by this package wrap one of them, so that
// callers can test with errors.Is.
var (
	// ErrInvalidOwner reports a RetryOwner value or name that is not one of
	// the four owners.
	ErrInvalidOwner = errors.New("policy: invalid retry owner")
	// ErrInvalidConfig reports settings (budget, backoff, or the retry
	// settings of a generated service config) that are out of range: the
	// configuration error every package of the kit names ErrInvalidConfig.
	ErrInvalidConfig = errors.New("policy: invalid configuration")
	// ErrPushbackStop reports server pushback that says not to retry: a
	// negative, unparseable or repeated grpc-retry-pushback-ms value.
	ErrPushbackStop = errors.New("policy: server pushback says do not retry")
	// errDeadlineTooClose reports a retry whose wait would pass the call's
	// deadline.
	errDeadlineTooClose = errors.New("policy: retry wait would pass the call deadline")
)

// The errors of a catalog: each matches ErrInvalidConfig.
var (
	// errInvalidMethodName reports a full method name that is not of the
	// form /package.Service/Method.
	errInvalidMethodName error = configError("policy: invalid full method name")
	// errDuplicateMethod reports a method listed twice in a catalog.
	errDuplicateMethod error = configError("policy: duplicate method")
	// errUnknownMethod reports a method that is not in the catalog.
	errUnknownMethod error = configError("policy: unknown method")
	// errInvalidDescriptors reports proto descriptors that cannot be read.
	errInvalidDescriptors error = configError("policy: invalid descriptors")
)

// configError is an error of the configuration that matches
// ErrInvalidConfig, with a message of its own.
type configError string

func (e configError) Error() string { return string(e) }

// Is reports whether target is ErrInvalidConfig.
func (e configError) Is(target error) bool { return target == ErrInvalidConfig }

// truncate shortens untrusted text quoted in an error message.
func truncate(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
