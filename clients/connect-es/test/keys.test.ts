// Keys, derived keys, and which methods the interceptor owns: the kit's
// option in the .proto, keyedMethods, a key field, idempotent reads, plain
// methods.

import assert from "node:assert/strict";
import { test } from "node:test";

import { create, hasOption } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, createRouterTransport } from "@connectrpc/connect";

import { ErrorInfoSchema } from "../gen/google/rpc/error_details_pb.js";
import { KeyedTest, PutReplySchema } from "../gen/keyedtest_pb.js";
import { keyed } from "../gen/opledger/v1/opledger_pb.js";
import { Fraud, Payments } from "../gen/payments_pb.js";
import { createKeyedInterceptor, downstreamKey, keyBirth, newKey, RetryBudget, withKey } from "../src/index.js";

test("newKey makes a UUIDv7 that carries its birth, read back by keyBirth as the Go kit reads it", () => {
  const at = new Date(Date.UTC(2026, 11, 6, 12, 0, 0, 123));
  const k = newKey(at);
  assert.match(k, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.equal(keyBirth(k)?.getTime(), at.getTime());
  assert.notEqual(newKey(at), k);
  // The Go kit's reading: a version 4 UUID, another length, or time zero carry no birth.
  assert.equal(keyBirth("0b4d0a10-7e4c-4e5a-9d0c-3f1f6e2a9b11"), undefined);
  assert.equal(keyBirth("00000000-0000-7000-8000-000000000000"), undefined);
  assert.equal(keyBirth(k.toUpperCase())?.getTime(), at.getTime());
  assert.equal(keyBirth(k + "0"), undefined);
});

test("downstreamKey is deterministic, per key and step, and keeps the upstream's birth", async () => {
  const up = newKey(new Date(Date.UTC(2026, 0, 2)));
  const a = await downstreamKey(up, "charge");
  assert.equal(await downstreamKey(up, "charge"), a);
  assert.notEqual(await downstreamKey(up, "fraud-check"), a);
  assert.notEqual(await downstreamKey(newKey(), "charge"), a);
  assert.equal(keyBirth(a)?.getTime(), keyBirth(up)?.getTime());
  const noBirth = await downstreamKey("order-17", "charge");
  assert.match(noBirth, /^dk1-[a-z2-7]{52}$/);
  await assert.rejects(downstreamKey(up, ""), TypeError);
});

function fakeKeyedTest(failFirst: Code, keyedMethods: string[] = []) {
  const seen: { method: string; key: string | null; requestId: string; resolve: boolean }[] = [];
  const counts = new Map<string, number>();
  const handle = (method: string) => (req: { requestId: string; value: string }, ctx: { requestHeader: Headers }) => {
    const resolve = ctx.requestHeader.get("idempotency-resolve") === "1";
    seen.push({ method, key: ctx.requestHeader.get("idempotency-key"), requestId: req.requestId, resolve });
    const n = (counts.get(method) ?? 0) + 1;
    counts.set(method, n);
    if (resolve) {
      throw new ConnectError("not found", Code.NotFound, undefined, [
        { desc: ErrorInfoSchema, value: { reason: "OPERATION_NOT_FOUND", domain: "opledger.grpcint" } },
      ]);
    }
    if (n === 1) {
      throw new ConnectError("first attempt fails", failFirst);
    }
    return create(PutReplySchema, { value: req.value });
  };
  const transport = createRouterTransport(
    ({ service }) => {
      service(KeyedTest, { put: handle("put"), putWithID: handle("putWithID"), get: handle("get"), plain: handle("plain") });
    },
    {
      transport: {
        interceptors: [createKeyedInterceptor({ keyedMethods, backoff: { initialMs: 1, maxMs: 2 }, budget: new RetryBudget({ percent: 10 }) })],
      },
    },
  );
  return { client: createClient(KeyedTest, transport), seen };
}

test("a method marked (opledger.v1.keyed) gets one key across its attempts; its key field is filled with it", async () => {
  const { client, seen } = fakeKeyedTest(Code.Aborted);
  await client.put({ value: "v" });
  assert.equal(seen.length, 2);
  assert.ok(keyBirth(seen[0]!.key ?? "") !== undefined, "a UUIDv7 key");
  assert.equal(seen[1]!.key, seen[0]!.key);

  await client.putWithID({ value: "w" });
  const w = seen.filter((s) => s.method === "putWithID");
  assert.equal(w.length, 2);
  assert.equal(w[0]!.requestId, w[0]!.key);
  assert.equal(w[1]!.requestId, w[0]!.key);

  const mine = newKey();
  await client.put({ value: "x" }, { contextValues: withKey(mine) });
  assert.equal(seen.at(-1)!.key, mine);
});

test("a request's own key field is the key", async () => {
  const { client, seen } = fakeKeyedTest(Code.Aborted);
  await client.putWithID({ requestId: "order-17", value: "v" });
  assert.deepEqual(
    seen.map((s) => s.key),
    ["order-17", "order-17"],
  );
});

test("an idempotent read is retried without a key; a plain method is never retried", async () => {
  const { client, seen } = fakeKeyedTest(Code.Unavailable);
  await client.get({ value: "g" });
  assert.deepEqual(
    seen.map((s) => [s.method, s.key, s.resolve]),
    [
      ["get", null, false],
      ["get", null, false],
    ],
  );
  await assert.rejects(client.plain({ value: "p" }), (e: unknown) => e instanceof ConnectError && e.code === Code.Unavailable);
  assert.equal(seen.filter((s) => s.method === "plain").length, 1);
});

test("keyedMethods makes a method without the option keyed: one key, resolve before it runs again", async () => {
  const { client, seen } = fakeKeyedTest(Code.Unavailable, ["/opledger.clienttest.v1.KeyedTest/Plain"]);
  await client.plain({ value: "p" });
  assert.deepEqual(
    seen.map((s) => [s.method, s.resolve]),
    [
      ["plain", false],
      ["plain", true],
      ["plain", false],
    ],
  );
  assert.ok(keyBirth(seen[0]!.key ?? "") !== undefined, "a UUIDv7 key");
  assert.equal(new Set(seen.map((s) => s.key)).size, 1);
});

test("the generated descriptors carry the kit's option: Payments.Transfer and Fraud.Check are keyed, GetTransfer is not", () => {
  assert.ok(hasOption(Payments.method.transfer, keyed));
  assert.ok(hasOption(Fraud.method.check, keyed));
  assert.equal(hasOption(Payments.method.getTransfer, keyed), false);
  assert.equal(hasOption(KeyedTest.method.plain, keyed), false);
});

test("a lost answer of a keyed method is resolved before it runs again, with the same key", async () => {
  const { client, seen } = fakeKeyedTest(Code.Unavailable);
  await client.put({ value: "v" });
  assert.deepEqual(
    seen.map((s) => s.resolve),
    [false, true, false],
  );
  assert.equal(new Set(seen.map((s) => s.key)).size, 1);
});
