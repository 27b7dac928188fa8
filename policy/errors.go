package policy

import "errors"

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
	// ErrInvalidConfig reports settings (budget, backoff, or the retry
	// settings of a generated service config) that are out of range: the
	// configuration error every package of the kit names ErrInvalidConfig.
	ErrInvalidConfig = errors.New("policy: invalid configuration")
	// ErrInvalidSettings is ErrInvalidConfig, under its old name.
	//
	// Deprecated: use [ErrInvalidConfig] (the same value); this name goes
	// in the next minor release.
	ErrInvalidSettings = ErrInvalidConfig
	// ErrPushbackStop reports server pushback that says not to retry: a
	// negative, unparseable or repeated grpc-retry-pushback-ms value.
	ErrPushbackStop = errors.New("policy: server pushback says do not retry")
	// ErrDeadlineTooClose reports a retry whose wait would pass the call's
	// deadline.
	ErrDeadlineTooClose = errors.New("policy: retry wait would pass the call deadline")
)

// truncate shortens untrusted text quoted in an error message.
func truncate(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
