// The client against opledger serve (the Go server) over Connect, gRPC and
// gRPC-Web: concurrent calls of one key, answers lost after commit at three
// places, and the outcomes the server gives.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Code, ConnectError, createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import * as web from "@connectrpc/connect-web";

import { Payments } from "../gen/payments_pb.js";
import { createKeyedInterceptor, KeyedCallError, newKey, RetryBudget, withKey, type CallInfo, type KeyedClientOptions } from "../src/index.js";
import { pool, startServe, type Serve } from "./serve.js";

type Make = (s: Serve, interceptors: Interceptor[]) => Transport;

/** The connect-node transports, one per protocol. */
const nodeTransports: Record<string, Make> = {
  connect: (s, interceptors) => createConnectTransport({ baseUrl: s.connect, httpVersion: "1.1", interceptors }),
  grpc: (s, interceptors) => createGrpcTransport({ baseUrl: s.grpc, interceptors }),
  "grpc-web": (s, interceptors) => createGrpcWebTransport({ baseUrl: s.connect, httpVersion: "1.1", interceptors }),
};

function options(extra: Partial<KeyedClientOptions> = {}): KeyedClientOptions {
  return {
    maxRuns: 12,
    backoff: { initialMs: 5, maxMs: 50 },
    budget: new RetryBudget({ percent: 10, minRetriesPerSecond: 1000 }),
    ...extra,
  };
}

function client(s: Serve, make: Make, opts: KeyedClientOptions, inner: Interceptor[] = []): Client<typeof Payments> {
  return createClient(Payments, make(s, [createKeyedInterceptor(opts), s.auth, ...inner]));
}

let plain: Serve;

before(async () => {
  plain = await startServe();
});

after(async () => {
  await plain?.stop();
});

test("64 concurrent calls per key on 50 keys, over Connect, gRPC and gRPC-Web: one transfer per key, every call answered with it", async (t) => {
  const ends = new Map<string, number>();
  let runs = 0;
  const count = (i: CallInfo): void => {
    runs += i.runs;
    ends.set(i.outcome.name, (ends.get(i.outcome.name) ?? 0) + 1);
  };
  const clients = Object.values(nodeTransports).map((m) => client(plain, m, options({ onCallEnd: count })));
  const keys = Array.from({ length: 50 }, () => newKey());
  const answers = new Map<number, Set<bigint>>();
  await pool(50, 10, async (k) => {
    const ids = new Set<bigint>();
    answers.set(k, ids);
    await Promise.all(
      Array.from({ length: 64 }, async (_, j) => {
        const c = clients[j % clients.length]!;
        const r = await c.transfer(
          { fromAccount: "alice", toAccount: "bob", amountCents: 100n, reference: `herd-${k}` },
          { contextValues: withKey(keys[k]!), timeoutMs: 60_000 },
        );
        assert.equal(r.reference, `herd-${k}`);
        ids.add(r.transferId);
      }),
    );
  });
  const rows = plain.transfers();
  for (let k = 0; k < 50; k++) {
    const ids = rows.get(`herd-${k}`) ?? [];
    assert.equal(ids.length, 1, `key ${k}: ${ids.length} transfers`);
    assert.deepEqual([...answers.get(k)!], [ids[0]!], `key ${k}: every call's answer is the one transfer`);
  }
  t.diagnostic(`herd: ${JSON.stringify(Object.fromEntries(ends))}, ${runs} runs (a run beyond a call's first met the key in progress)`);
  assert.deepEqual(Object.fromEntries(ends), { executed: 50, replayed: 50 * 63 }, "one execution per key, every other call a replay");
});

test("a key reused for another request is idempotency-key-reused; the same request again replays", async () => {
  for (const [name, make] of Object.entries(nodeTransports)) {
    const ends: CallInfo[] = [];
    const c = client(plain, make, options({ onCallEnd: (i) => ends.push(i) }));
    const key = newKey();
    const req = { fromAccount: "carol", toAccount: "dan", amountCents: 5n, reference: `reuse-${name}` };
    const first = await c.transfer(req, { contextValues: withKey(key) });
    const again = await c.transfer(req, { contextValues: withKey(key) });
    assert.equal(again.transferId, first.transferId);
    await assert.rejects(
      c.transfer({ ...req, amountCents: 6n }, { contextValues: withKey(key) }),
      (e: unknown) => e instanceof KeyedCallError && e.outcome.name === "idempotency-key-reused" && e.code === Code.FailedPrecondition && e.runs === 1,
    );
    assert.deepEqual(
      ends.map((i) => i.outcome.name),
      ["executed", "replayed", "idempotency-key-reused"],
      name,
    );
  }
});

test("an idempotent read (GetTransfer, NO_SIDE_EFFECTS) goes through without a key", async () => {
  let key: string | null = "unset";
  const spy: Interceptor = (next) => (req) => {
    key = req.header.get("idempotency-key");
    return next(req);
  };
  const c = client(plain, nodeTransports["connect"]!, options(), [spy]);
  const t = await c.transfer({ fromAccount: "erin", toAccount: "frank", amountCents: 9n, reference: "read-1" });
  const r = await c.getTransfer({ transferId: t.transferId });
  assert.equal(r.reference, "read-1");
  assert.equal(key, null);
});

/** The client's faults: answers lost after the whole response arrived. */
function loseAfterResponse(rate: number, count: { n: number }): Interceptor {
  return (next) => async (req) => {
    const res = await next(req);
    if (Math.random() < rate) {
      count.n++;
      throw new ConnectError("injected: response lost after it arrived", Code.Unavailable);
    }
    return res;
  };
}

/** A fetch that loses the answer once its response headers arrived: the body is cut. */
function fetchLosingAfterHeaders(rate: number, count: { n: number }): typeof fetch {
  return async (input, init) => {
    const res = await fetch(input, init);
    if (Math.random() < rate) {
      count.n++;
      await res.body?.cancel();
      throw new TypeError("fetch failed: injected: connection lost after the response headers");
    }
    return res;
  };
}

test("2,000 calls with answers lost after commit at three places: 0 duplicates, 0 losses, 0 ambiguous returns, every call answered with its result", async (t) => {
  const faulty = await startServe("--faults", "0.1", "--faults-seed", "41");
  try {
    const afterResponse = { n: 0 };
    const afterHeaders = { n: 0 };
    let resolves = 0;
    const ends: CallInfo[] = [];
    const opts = options({
      onCallEnd: (i) => {
        ends.push(i);
        resolves += i.resolves;
      },
    });
    const inner = [loseAfterResponse(0.1, afterResponse)];
    const webFetch = fetchLosingAfterHeaders(0.2, afterHeaders);
    const clients = [
      ...Object.values(nodeTransports).map((m) => client(faulty, m, opts, inner)),
      client(faulty, (s, ics) => web.createConnectTransport({ baseUrl: s.connect, fetch: webFetch, interceptors: ics }), opts, inner),
      client(faulty, (s, ics) => web.createGrpcWebTransport({ baseUrl: s.connect, fetch: webFetch, interceptors: ics }), opts, inner),
    ];
    const n = 2000;
    const got = new Map<string, bigint>();
    const failed: string[] = [];
    await pool(n, 32, async (i) => {
      const ref = `loss-${i}`;
      try {
        const r = await clients[i % clients.length]!.transfer(
          { fromAccount: "gina", toAccount: "hal", amountCents: BigInt(i + 1), reference: ref },
          { timeoutMs: 60_000 },
        );
        assert.equal(r.reference, ref);
        assert.equal(r.amountCents, BigInt(i + 1));
        got.set(ref, r.transferId);
      } catch (e) {
        failed.push(`${ref}: ${e instanceof KeyedCallError ? e.outcome.name : "?"} ${String(e)}`);
      }
    });
    const rows = faulty.transfers();
    let duplicates = 0;
    let lost = 0;
    let wrong = 0;
    for (let i = 0; i < n; i++) {
      const ref = `loss-${i}`;
      const ids = rows.get(ref) ?? [];
      duplicates += Math.max(0, ids.length - 1);
      if (ids.length === 1 && !got.has(ref)) {
        lost++; // committed, and the caller never got it
      }
      if (got.has(ref) && (ids.length !== 1 || ids[0]! !== got.get(ref))) {
        wrong++;
      }
    }
    const ambiguous = ends.filter((e) => e.outcome.name === "call-outcome-unknown").length;
    assert.deepEqual({ duplicates, lost, wrong, ambiguous, failed: failed.slice(0, 5) }, { duplicates: 0, lost: 0, wrong: 0, ambiguous: 0, failed: [] });
    assert.equal(got.size, n);
    assert.equal(rows.size, n, "transfers beyond the calls'");
    assert.ok(afterResponse.n > 50 && afterHeaders.n > 20, `client faults: ${afterResponse.n} after the response, ${afterHeaders.n} after the headers`);
    assert.ok(resolves > 0, "no call resolved");
    const replayed = ends.filter((e) => e.outcome.name === "replayed").length;
    const runs = ends.reduce((a, e) => a + e.runs, 0);
    t.diagnostic(`${n} calls: ${runs} runs, ${resolves} resolves, ${replayed} ended replayed; answers lost: ${afterResponse.n} after the response, ${afterHeaders.n} after the headers, the rest on the server (--faults 0.1)`);
    assert.ok(replayed > 100, `${replayed} calls ended replayed: the server's losses (--faults) did not happen`);
  } finally {
    await faulty.stop();
  }
});
