// Package policy decides who retries a gRPC call, whether a failed call may be
// retried at all, and how much retrying a client may do.
//
// Retries multiply across layers: an application, a channel's service config
// and a service mesh that each make three attempts turn one call into 27
// requests, and they arrive exactly when the dependency is failing. This
// package makes the owner of retries explicit and keeps retries bounded:
//
//   - [RetryOwner] names the single layer that retries on a channel:
//     [OwnerApplication], [OwnerServiceConfig], [OwnerMesh] or [OwnerNone].
//     None is a decision, not an omission.
//   - A [Catalog] records, for every full method name (/pkg.Service/Method),
//     whether the method has no side effects, is idempotent, is a keyed
//     mutation or is not idempotent, and its streaming shape. It is built in
//     code ([NewCatalog]) or from proto descriptors ([CatalogFromFiles],
//     [CatalogFromDescriptorSet], [LoadDescriptorSetFile]) by reading the
//     standard idempotency_level method option.
//   - [ServiceConfig] is a typed form of the gRPC service config that
//     marshals to the JSON grpc-go accepts. [GenerateServiceConfig] derives
//     it from a catalog and an owner; [CheckOwnership] refuses any retry or
//     hedging entry on a channel that the service config does not own.
//   - [Validate] checks a service config file against a catalog and an owner,
//     more strictly than grpc-go does, and reports every problem as a
//     [Finding] naming the exact entry.
//   - [Eligible] decides, from the method, the [Evidence] and the status
//     code, whether to retry, not to retry (with a [Reason]) or to resolve
//     the outcome of a keyed mutation first.
//   - [Budget] bounds retries to a fraction of traffic over a sliding window
//     with a small floor; [Throttle] is the gRPC retry-throttling token
//     bucket (gRFC A6). Both are safe for concurrent use and do not allocate.
//   - [Backoff] computes the gRFC A6 exponential backoff with jitter, honours
//     server pushback (grpc-retry-pushback-ms) and never waits past the
//     call's deadline.
//
// The package depends only on the standard library, grpc-go (codes, status)
// and the protobuf runtime (descriptors). It knows nothing of SQL: a keyed
// method states in its [MethodPolicy] whether a durable ledger records its
// completions. It keeps no global mutable state, logs nothing and returns
// errors that wrap the sentinel errors declared here, for use with
// [errors.Is] and [errors.As].
package policy
