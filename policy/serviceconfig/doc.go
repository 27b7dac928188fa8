// Package serviceconfig generates, parses and checks the part of a gRPC
// service config that decides retries, for a channel whose retry owner
// (policy.RetryOwner) and method catalog (policy.Catalog) are known.
// Create a config with [Generate] or [Parse], and check one with
// [Validate].
//
//   - [Config] is a service config that marshals to the JSON grpc-go
//     accepts ([Config.JSON], for grpc.WithDefaultServiceConfig); [Parse]
//     reads one, checking it the way grpc-go does and a little more
//     strictly.
//   - [Generate] derives a channel's config from a catalog and an owner:
//     retry entries only for no-side-effects and idempotent methods, named
//     one by one, plus retryThrottling, and no retry entry at all unless
//     the service config owns the channel's retries. [RetrySettings] shape
//     the retry policy it writes.
//   - [CheckOwnership] refuses any retry or hedging entry on a channel that
//     the service config does not own ([ErrRetryNotOwned]).
//   - [Validate] checks a service config file against a catalog and an
//     owner, more strictly than grpc-go does, and reports every problem as a
//     [Finding] naming the exact entry, with a stable [FindingKind]. It is
//     what "opledger policy check" runs in CI.
//
// The range rules of a retry policy (maxAttempts, initialBackoff,
// maxBackoff, backoffMultiplier, retryableStatusCodes) and of
// retryThrottling (maxTokens, tokenRatio) are the same for [Parse] and
// for the validator. Whether a status code is worth retrying is
// policy.Eligible's decision for an idempotent method.
//
// The package builds on package policy, which does not import it. It keeps
// no global mutable state, logs nothing, never panics on bad input, and
// returns errors that wrap [ErrInvalid], [ErrRetryNotOwned],
// policy.ErrInvalidOwner or policy.ErrInvalidConfig.
package serviceconfig
