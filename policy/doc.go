// Package policy decides who retries a gRPC call, whether a failed call may be
// retried at all, and how much retrying a client may do. Build a catalog of
// methods with [NewCatalog] or [CatalogFromFiles], and a retry budget with
// [NewBudget].
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
//     standard idempotency_level method option, and marks keyed the
//     methods that carry the option (opledger.v1.keyed) of the published
//     proto package proto/opledger/v1 and the mutations whose request has
//     Google's AIP-155 request_id ([KeyedByRequestID]).
//   - [Eligible] decides, from the method, the [Evidence] and the status
//     code, whether to retry, not to retry (with a [DecisionReason]) or to
//     resolve the outcome of a keyed mutation first.
//   - [Budget] bounds retries to a fraction of traffic over a sliding window
//     with a small floor. It is safe for concurrent use and does not
//     allocate.
//   - [Backoff] computes the gRFC A6 exponential backoff with jitter, honours
//     server pushback (grpc-retry-pushback-ms) and never waits past the
//     call's deadline.
//
// The channel's service config is the business of the sub-package
// policy/serviceconfig: a typed form of the gRPC service config, its
// generation from a catalog and an owner, the ownership check, and a
// validator that reports every problem of a service config file. It
// imports this package; this package does not import it.
//
// The package depends only on the standard library, grpc-go (codes) and the
// protobuf runtime (descriptors). It knows nothing of SQL: a keyed method
// states in its [MethodPolicy] whether a durable ledger records its
// completions. It keeps no global mutable state, logs nothing and returns
// errors that wrap the sentinel errors declared here, for use with
// [errors.Is] and [errors.As].
package policy
