// The algorithm's edges (docs/protocol.md, "Resolve before retry"): the
// deadline over an unknown outcome, the budget, a malformed pushback, the
// first-sent value of a key without a birth.

import assert from "node:assert/strict";
import { test } from "node:test";

import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, createRouterTransport } from "@connectrpc/connect";

import { ErrorInfoSchema } from "../gen/google/rpc/error_details_pb.js";
import { Payments, TransferReplySchema } from "../gen/payments_pb.js";
import { createKeyedInterceptor, KeyedCallError, RetryBudget, withKey, type KeyedClientOptions } from "../src/index.js";

interface Seen {
  resolve: boolean;
  key: string | null;
  firstSent: string | null;
  attempt: string | null;
  owner: string | null;
}

/** A fake Payments whose Transfer answers with answer(n, resolve) for the n-th request. */
function fake(answer: (n: number, resolve: boolean) => ConnectError | undefined, opts: Partial<KeyedClientOptions> = {}) {
  const seen: Seen[] = [];
  const transport = createRouterTransport(
    ({ service }) => {
      service(Payments, {
        transfer(req, ctx) {
          const h = ctx.requestHeader;
          const resolve = h.get("idempotency-resolve") === "1";
          seen.push({ resolve, key: h.get("idempotency-key"), firstSent: h.get("idempotency-key-first-sent"), attempt: h.get("opledger-attempt"), owner: h.get("opledger-retry-owner") });
          const err = answer(seen.length, resolve);
          if (err !== undefined) {
            throw err;
          }
          return create(TransferReplySchema, { transferId: 1n, reference: req.reference });
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
            backoff: { initialMs: 1, maxMs: 5 },
            budget: new RetryBudget({ percent: 10 }),
            ...opts,
          }),
        ],
      },
    },
  );
  return { client: createClient(Payments, transport), seen };
}

function kit(code: Code, reason: string, md?: HeadersInit): ConnectError {
  return new ConnectError("fake: " + reason, code, md, [{ desc: ErrorInfoSchema, value: { reason, domain: "opledger.grpcint" } }]);
}

const req = { fromAccount: "a", toAccount: "b", amountCents: 1n, reference: "r" };

test("an unknown outcome resolves until the call's deadline, then ends unknown with its key, never failed", async () => {
  const { client, seen } = fake(() => new ConnectError("lost", Code.Unavailable));
  const start = Date.now();
  // A deadline long enough for two resolves on a loaded machine (CI has two
  // cores and runs Go tests beside); the bound below only catches a call
  // that ignores its deadline.
  const err = await client.transfer(req, { timeoutMs: 1500 }).catch((e: unknown) => e);
  assert.ok(err instanceof KeyedCallError);
  assert.equal(err.outcome.name, "call-outcome-unknown");
  assert.equal(err.key, seen[0]!.key);
  assert.ok(err.resolves >= 2, `${err.resolves} resolves`);
  assert.equal(err.runs, 1, "an unknown call never runs again before a resolve says not found");
  assert.ok(Date.now() - start < 8000, `${Date.now() - start} ms`);
});

test("every attempt and resolve sends the same key, the owner declaration, and attempts their number", async () => {
  const { client, seen } = fake((n, resolve) =>
    n === 1 ? new ConnectError("lost", Code.Unavailable) : resolve ? kit(Code.NotFound, "OPERATION_NOT_FOUND") : undefined,
  );
  await client.transfer(req);
  assert.deepEqual(
    seen.map((s) => [s.resolve, s.attempt, s.owner]),
    [
      [false, "1", "application"],
      [true, null, "application"],
      [false, "2", "application"],
    ],
  );
  assert.equal(new Set(seen.map((s) => s.key)).size, 1);
  assert.equal(seen[0]!.firstSent, null, "a UUIDv7 key needs no first-sent value");
});

test("a key without a birth is sent with one first-sent value, the same on every attempt", async () => {
  const { client, seen } = fake((n) => (n === 1 ? kit(Code.Unavailable, "STORAGE_UNAVAILABLE") : undefined));
  await client.transfer(req, { contextValues: withKey("order-17") });
  assert.equal(seen.length, 2);
  assert.match(seen[0]!.firstSent ?? "", /^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d\d:\d\d:\d\d GMT$/);
  assert.equal(seen[1]!.firstSent, seen[0]!.firstSent);
  assert.deepEqual(
    seen.map((s) => s.key),
    ["order-17", "order-17"],
  );
});

test("a budget that refuses ends a retryable failure without another run; with an unknown outcome it resolves instead", async () => {
  const none = new RetryBudget({ percent: 0, minRetriesPerSecond: 0 });
  const a = fake(() => kit(Code.Unavailable, "STORAGE_UNAVAILABLE"), { budget: none });
  const err = await a.client.transfer(req).catch((e: unknown) => e);
  assert.ok(err instanceof KeyedCallError);
  assert.equal(err.outcome.name, "storage-unavailable");
  assert.equal(a.seen.length, 1);

  const b = fake((n, resolve) => (resolve ? undefined : kit(Code.Aborted, "OPERATION_IN_PROGRESS", { "grpc-retry-pushback-ms": "1" })), { budget: none });
  await b.client.transfer(req);
  assert.deepEqual(
    b.seen.map((s) => s.resolve),
    [false, true],
  );
});

test("the pushback replaces the backoff; a malformed one ends a call that is not unknown", async () => {
  const slow = { backoff: { initialMs: 5000, maxMs: 5000 } };
  const a = fake((n) => (n === 1 ? kit(Code.Unavailable, "STORAGE_BUSY", { "grpc-retry-pushback-ms": "10" }) : undefined), slow);
  const start = Date.now();
  await a.client.transfer(req);
  assert.ok(Date.now() - start < 2000, "the backoff was used in place of the pushback");

  const b = fake(() => kit(Code.Unavailable, "STORAGE_BUSY", { "grpc-retry-pushback-ms": "-1" }));
  const err = await b.client.transfer(req).catch((e: unknown) => e);
  assert.ok(err instanceof KeyedCallError);
  assert.equal(err.outcome.name, "storage-busy");
  assert.equal(b.seen.length, 1);
});

test("a refusal with nothing committed after an earlier attempt may have committed resolves first (step 6)", async () => {
  const { client, seen } = fake((n, resolve) =>
    resolve ? undefined : n === 1 ? new ConnectError("lost", Code.Internal) : kit(Code.InvalidArgument, "INVALID_KEYED_REQUEST"),
  );
  const r = await client.transfer(req);
  assert.equal(r.transferId, 1n);
  assert.deepEqual(
    seen.map((s) => s.resolve),
    [false, false, true],
  );
});
