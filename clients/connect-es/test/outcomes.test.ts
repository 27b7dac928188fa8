// One test per row of the kit's outcome table, against an in-memory
// connect server (createRouterTransport) that answers as the kit's servers
// render each row; and the table itself against docs/protocol.md's, which a
// Go test generates from the Go classification.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, createRouterTransport, type Interceptor } from "@connectrpc/connect";

import { ErrorInfoSchema } from "../gen/google/rpc/error_details_pb.js";
import { ErrorReason } from "../gen/opledger/v1/opledger_pb.js";
import { Payments, TransferReplySchema } from "../gen/payments_pb.js";
import { createKeyedInterceptor, KeyedCallError, outcomes, RetryBudget, type CallInfo, type OutcomeName } from "../src/index.js";

/** An answer of the fake server: a reply (maybe marked replayed) or an error. */
type Answer =
  | { ok: true; replayed?: boolean }
  | { code: Code; reason?: string; pushbackMs?: number; replayed?: boolean; replayedCode?: number };

const ok: Answer = { ok: true };
const stored: Answer = { ok: true, replayed: true };
const notFound: Answer = { code: Code.NotFound, reason: "OPERATION_NOT_FOUND" };

interface Scenario {
  /** The answers to runs, in order (the last repeats). */
  runs: Answer[];
  /** The answers to resolves, in order (the last repeats). */
  resolves?: Answer[];
  /** A fault before the server: every attempt fails before it is sent. */
  notSent?: boolean;
  /** The outcome the call ends with. */
  want: OutcomeName;
  /** The runs and resolves the server sees. */
  wantRuns: number;
  wantResolves: number;
}

function reasonError(a: Exclude<Answer, { ok: true }>): ConnectError {
  const md = new Headers();
  if (a.pushbackMs !== undefined) {
    md.set("grpc-retry-pushback-ms", String(a.pushbackMs));
  }
  if (a.replayed === true) {
    md.set("idempotency-replayed", "true");
    md.set("idempotency-replayed-code", String(a.replayedCode ?? a.code));
  }
  const details = a.reason === undefined ? [] : [{ desc: ErrorInfoSchema, value: { reason: a.reason, domain: "opledger.grpcint" } }];
  return new ConnectError("fake: " + (a.reason ?? Code[a.code]), a.code, md, details);
}

/** Every row of the table, as the fake server renders it on a first run. */
const scenarios: Record<OutcomeName, Scenario> = {
  executed: { runs: [ok], want: "executed", wantRuns: 1, wantResolves: 0 },
  replayed: { runs: [stored], want: "replayed", wantRuns: 1, wantResolves: 0 },
  // The handler's own transient error, not stored: no reason; ABORTED may have run: retried.
  "not-stored": { runs: [{ code: Code.Aborted }, ok], want: "executed", wantRuns: 2, wantResolves: 0 },
  // A panic reaches the client as the transport's INTERNAL or UNKNOWN: retried.
  "handler-panic": { runs: [{ code: Code.Unknown }, ok], want: "executed", wantRuns: 2, wantResolves: 0 },
  "caller-not-identified": { runs: [{ code: Code.Unauthenticated, reason: "CALLER_NOT_IDENTIFIED" }], want: "caller-not-identified", wantRuns: 1, wantResolves: 0 },
  "idempotency-key-missing": { runs: [{ code: Code.InvalidArgument, reason: "MISSING_IDEMPOTENCY_KEY" }], want: "idempotency-key-missing", wantRuns: 1, wantResolves: 0 },
  "idempotency-key-invalid": { runs: [{ code: Code.InvalidArgument, reason: "INVALID_IDEMPOTENCY_KEY" }], want: "idempotency-key-invalid", wantRuns: 1, wantResolves: 0 },
  // The transport's RESOURCE_EXHAUSTED without a reason: may have run, retried to the same
  // answer, then resolved (not found): ends with the last run's error, nothing committed.
  "request-too-large": { runs: [{ code: Code.ResourceExhausted }], resolves: [notFound], want: "operation-not-found", wantRuns: 3, wantResolves: 1 },
  "request-unreadable": { runs: [{ code: Code.InvalidArgument, reason: "INVALID_KEYED_REQUEST" }], want: "request-unreadable", wantRuns: 1, wantResolves: 0 },
  // Shares request-unreadable's reason, and its meaning to a client.
  "route-not-keyed": { runs: [{ code: Code.InvalidArgument, reason: "INVALID_KEYED_REQUEST" }], want: "request-unreadable", wantRuns: 1, wantResolves: 0 },
  "keyed-method-served-as-stream": { runs: [{ code: Code.Unimplemented, reason: "KEYED_METHOD_SERVED_AS_STREAM" }], want: "keyed-method-served-as-stream", wantRuns: 1, wantResolves: 0 },
  "idempotency-key-reused": { runs: [{ code: Code.FailedPrecondition, reason: "IDEMPOTENCY_KEY_REUSED" }], want: "idempotency-key-reused", wantRuns: 1, wantResolves: 0 },
  "operation-in-progress": { runs: [{ code: Code.Aborted, reason: "OPERATION_IN_PROGRESS", pushbackMs: 5 }, stored], want: "replayed", wantRuns: 2, wantResolves: 0 },
  "operation-incomplete": { runs: [{ code: Code.FailedPrecondition, reason: "OPERATION_INCOMPLETE" }], want: "operation-incomplete", wantRuns: 1, wantResolves: 0 },
  "idempotency-key-expired": { runs: [{ code: Code.FailedPrecondition, reason: "IDEMPOTENCY_KEY_EXPIRED" }], want: "idempotency-key-expired", wantRuns: 1, wantResolves: 0 },
  "transaction-aborted": { runs: [{ code: Code.Aborted, reason: "TRANSACTION_ABORTED" }, ok], want: "executed", wantRuns: 2, wantResolves: 0 },
  "storage-busy": { runs: [{ code: Code.Unavailable, reason: "STORAGE_BUSY", pushbackMs: 5 }, ok], want: "executed", wantRuns: 2, wantResolves: 0 },
  "storage-unavailable": { runs: [{ code: Code.Unavailable, reason: "STORAGE_UNAVAILABLE" }, ok], want: "executed", wantRuns: 2, wantResolves: 0 },
  "commit-outcome-unknown": { runs: [{ code: Code.Unavailable, reason: "COMMIT_OUTCOME_UNKNOWN" }], resolves: [stored], want: "replayed", wantRuns: 1, wantResolves: 1 },
  // The server saw its request end (the context's code, no reason): it may have run, so resolve.
  "request-ended": { runs: [{ code: Code.DeadlineExceeded }, ok], resolves: [notFound], want: "executed", wantRuns: 2, wantResolves: 1 },
  // Never rendered on gRPC or connect: the server answers result-not-storable instead.
  "response-too-large": { runs: [{ code: Code.Internal, reason: "RESULT_NOT_STORABLE" }], want: "result-not-storable", wantRuns: 1, wantResolves: 0 },
  "result-not-storable": { runs: [{ code: Code.Internal, reason: "RESULT_NOT_STORABLE" }], want: "result-not-storable", wantRuns: 1, wantResolves: 0 },
  "ledger-misuse": { runs: [{ code: Code.Internal, reason: "LEDGER_MISUSE" }], want: "ledger-misuse", wantRuns: 1, wantResolves: 0 },
  "stored-result-unreadable": { runs: [{ code: Code.Internal, reason: "STORED_RESULT_UNREADABLE" }], want: "stored-result-unreadable", wantRuns: 1, wantResolves: 0 },
  // A resolve's answer: a lost answer resolved, not found, run again with the same key.
  "operation-not-found": { runs: [{ code: Code.Unavailable }, ok], resolves: [notFound], want: "executed", wantRuns: 2, wantResolves: 1 },
  "request-not-executed": { runs: [{ code: Code.Unavailable, reason: "REQUEST_NOT_EXECUTED" }, ok], want: "executed", wantRuns: 2, wantResolves: 0 },
  "request-not-sent": { runs: [ok], notSent: true, want: "request-not-sent", wantRuns: 0, wantResolves: 0 },
  "server-answered": { runs: [{ code: Code.InvalidArgument }], want: "server-answered", wantRuns: 1, wantResolves: 0 },
  "call-outcome-unknown": { runs: [{ code: Code.Unavailable }], resolves: [{ code: Code.Unavailable }], want: "call-outcome-unknown", wantRuns: 1, wantResolves: -1 },
};

/** A fault in front of the transport: every attempt fails before a byte is sent. */
const refuse: Interceptor = () => async () => {
  const cause = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:1"), { code: "ECONNREFUSED" });
  throw new ConnectError("fake: connection refused", Code.Unavailable, undefined, undefined, cause);
};

async function run(sc: Scenario): Promise<{ info: CallInfo | undefined; err: unknown; runs: number; resolves: number; keys: Set<string> }> {
  let runs = 0;
  let resolves = 0;
  const keys = new Set<string>();
  const pick = (list: Answer[], n: number): Answer => list[Math.min(n, list.length - 1)]!;
  const transport = createRouterTransport(
    ({ service }) => {
      service(Payments, {
        transfer(req, ctx) {
          keys.add(ctx.requestHeader.get("idempotency-key") ?? "");
          const resolve = ctx.requestHeader.get("idempotency-resolve") === "1";
          const a = resolve ? pick(sc.resolves ?? [notFound], resolves++) : pick(sc.runs, runs++);
          if ("ok" in a) {
            if (a.replayed === true) {
              ctx.responseTrailer.set("idempotency-replayed", "true");
              ctx.responseTrailer.set("idempotency-replayed-code", "0");
            }
            return create(TransferReplySchema, { transferId: 7n, reference: req.reference });
          }
          throw reasonError(a);
        },
        getTransfer() {
          throw new ConnectError("unused", Code.Unimplemented);
        },
      });
    },
    {
      transport: {
        interceptors: [
          createKeyedInterceptor({
            maxRuns: 3,
            backoff: { initialMs: 1, maxMs: 5 },
            budget: new RetryBudget({ percent: 10, minRetriesPerSecond: 1000 }),
            resolveForMs: 1500,
            onCallEnd: (i) => (info = i),
          }),
          ...(sc.notSent === true ? [refuse] : []),
        ],
      },
    },
  );
  let info: CallInfo | undefined;
  let err: unknown;
  try {
    await createClient(Payments, transport).transfer({ fromAccount: "a", toAccount: "b", amountCents: 1n, reference: "r" });
  } catch (e) {
    err = e;
  }
  return { info, err, runs, resolves, keys };
}

for (const row of outcomes) {
  test(`outcome row ${row.name}`, async () => {
    const sc = scenarios[row.name];
    const got = await run(sc);
    assert.ok(got.info, "onCallEnd was not called");
    assert.equal(got.info.outcome.name, sc.want);
    assert.equal(got.runs, sc.wantRuns, "runs the server saw");
    if (sc.wantResolves >= 0) {
      assert.equal(got.resolves, sc.wantResolves, "resolves the server saw");
    } else {
      assert.ok(got.resolves >= 1, "an unknown outcome was never resolved");
    }
    assert.ok(got.keys.size <= 1, `one key per logical call, got ${[...got.keys].join(", ")}`);
    const want = outcomes.find((o) => o.name === sc.want)!;
    if (want.name === "executed" || want.name === "replayed") {
      assert.equal(got.err, undefined);
      return;
    }
    assert.ok(got.err instanceof KeyedCallError, `want a KeyedCallError, got ${String(got.err)}`);
    assert.equal(got.err.outcome, want);
    if (want.name === "call-outcome-unknown") {
      assert.equal(got.err.key, [...got.keys][0], "an unknown outcome reports its key");
    }
  });
}

test("a replay marker whose code is not the error's is no stored answer: the resolve is sent again", async () => {
  // A fault after the kit set the marker (a proxy's status, a response that
  // failed to send) ends the resolve with another code than the stored one.
  const got = await run({
    runs: [{ code: Code.Unavailable }],
    resolves: [{ code: Code.Unavailable, replayed: true, replayedCode: Code.InvalidArgument }, { code: Code.InvalidArgument, replayed: true }],
    want: "replayed",
    wantRuns: 1,
    wantResolves: 2,
  });
  assert.equal(got.resolves, 2, "resolves the server saw");
  assert.equal(got.runs, 1);
  assert.ok(got.err instanceof KeyedCallError, `want a KeyedCallError, got ${String(got.err)}`);
  assert.equal(got.err.code, Code.InvalidArgument, "the stored error is the answer");
  assert.equal(got.err.outcome.name, "replayed");
});

for (const code of [Code.Unauthenticated, Code.PermissionDenied, Code.InvalidArgument, Code.FailedPrecondition]) {
  test(`request-not-executed with ${Code[code]}, a code a retry cannot change, stops (as policy.Eligible would)`, async () => {
    const got = await run({ runs: [{ code, reason: "REQUEST_NOT_EXECUTED" }, ok], want: "request-not-executed", wantRuns: 1, wantResolves: 0 });
    assert.equal(got.runs, 1, "runs the server saw");
    assert.equal(got.resolves, 0);
    assert.ok(got.err instanceof KeyedCallError, `want a KeyedCallError, got ${String(got.err)}`);
    assert.equal(got.err.outcome.name, "request-not-executed");
    assert.equal(got.err.code, code);
  });
}

test("request-not-executed with a final code after an attempt that may have committed resolves (step 6)", async () => {
  const got = await run({
    runs: [{ code: Code.Aborted, reason: "OPERATION_IN_PROGRESS", pushbackMs: 5 }, { code: Code.PermissionDenied, reason: "REQUEST_NOT_EXECUTED" }],
    resolves: [stored],
    want: "replayed",
    wantRuns: 2,
    wantResolves: 1,
  });
  assert.equal(got.err, undefined, `want the stored answer, got ${String(got.err)}`);
  assert.equal(got.runs, 2);
  assert.equal(got.resolves, 1);
  assert.equal(got.info?.outcome.name, "replayed");
});

test("the outcome table is docs/protocol.md's, which a Go test generates from keyed.Outcomes()", () => {
  const doc = readFileSync(new URL("../../../../docs/protocol.md", import.meta.url), "utf8");
  const begin = doc.indexOf("<!-- protocol-outcomes:begin -->");
  const end = doc.indexOf("<!-- protocol-outcomes:end -->");
  assert.ok(begin >= 0 && end > begin, "docs/protocol.md has no protocol-outcomes table");
  const rows = doc
    .slice(begin, end)
    .split("\n")
    .filter((l) => l.startsWith("| `"))
    .map((l) => l.split("|").slice(1, -1).map((c) => c.trim()));
  const fromDoc = rows.map((c) => ({
    name: c[0]!.replaceAll("`", ""),
    side: c[1],
    reason: c[3] === "—" ? "" : c[3]!.replaceAll("`", ""),
    committed: c[5],
    next: c[6],
  }));
  assert.deepEqual(
    outcomes.map((o) => ({ ...o })),
    fromDoc,
  );
});

test("the table's reasons are the published proto's ErrorReason values (proto/opledger/v1)", () => {
  const published = Object.keys(ErrorReason)
    .filter((k) => Number.isNaN(Number(k)) && k !== "ERROR_REASON_UNSPECIFIED")
    .sort();
  const ours = [...new Set(outcomes.filter((o) => o.reason !== "").map((o) => o.reason))].sort();
  assert.deepEqual(ours, published);
});
