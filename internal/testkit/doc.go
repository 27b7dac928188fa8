// Package testkit is a room, not a library: its sub-packages are the kits
// that only tests import (testdb: the databases of a test run; outboxtest,
// natstest, keyedtest, badledgers, testcerts, xdstest; doccheck, the tests
// that keep README and docs/ true). They may import any package of the
// module; no library package imports them (checked in .ci/run).
// protocolnode is not Go: a Node.js test whose plain grpc-js client runs
// docs/protocol.md's resolve-before-retry algorithm against opledger serve.
//
// The runtime helpers the library itself uses (options, wait, telemetry,
// methodname, memfs, suggest) sit directly under internal/; the harness of
// the chaos and demo commands under internal/harness.
package testkit
