// readme:begin
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { createKeyedInterceptor, KeyedCallError, newKey, withKey } from "../src/index.js";
import { Payments } from "../gen/payments_pb.js";

export async function pay(baseUrl: string, token: string): Promise<string> {
  const transport = createConnectTransport({
    baseUrl,
    httpVersion: "1.1",
    interceptors: [
      // First, so that it is the outermost: it owns the calls' retries.
      // Transfer is keyed in payments.proto (option (opledger.v1.keyed)),
      // which the generated descriptor carries: nothing to list here.
      createKeyedInterceptor(),
      (next) => (req) => {
        req.header.set("authorization", `Bearer ${token}`);
        return next(req);
      },
    ],
  });
  const payments = createClient(Payments, transport);
  // One key per payment (a UUIDv7): keep it to resolve the call later if need be.
  const key = newKey();
  try {
    const t = await payments.transfer(
      { fromAccount: "alice", toAccount: "bob", amountCents: 100n, reference: "order-17" },
      { contextValues: withKey(key), timeoutMs: 10_000 },
    );
    return `transfer ${t.transferId}`;
  } catch (e) {
    if (e instanceof KeyedCallError) {
      // The outcome from the kit's table: what was committed ("no", "answer",
      // "unknown": resolve later with withKey(e.key), "n/a") and what to do next.
      return `${e.outcome.name} (committed: ${e.outcome.committed}) after ${e.runs} run(s), key ${e.key}`;
    }
    throw e;
  }
}
// readme:end

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { repoRoot, startServe } from "./serve.js";

test("the README's example pays against opledger serve", async () => {
  const s = await startServe();
  try {
    assert.match(await pay(s.connect, s.token), /^transfer \d+$/);
    assert.match(await pay(s.connect, "wrong-token"), /^request-not-executed \(committed: no\) after 1 run\(s\), key [0-9a-f-]{36}$/);
  } finally {
    await s.stop();
  }
});

/** The example as README.md and docs/protocol.md quote it: imported from the package. */
function quoted(): string {
  const src = readFileSync(new URL("../../test/example.test.ts", import.meta.url), "utf8");
  const body = src.slice(src.indexOf("// readme:begin\n") + "// readme:begin\n".length, src.indexOf("// readme:end"));
  return body.replace('"../src/index.js"', '"@opledger/connect-es"').replace('"../gen/payments_pb.js"', '"./gen/payments_pb.js"');
}

for (const doc of ["clients/connect-es/README.md", "docs/protocol.md"]) {
  test(`${doc} quotes the example`, () => {
    const text = readFileSync(repoRoot + doc, "utf8");
    assert.ok(text.includes("```ts\n" + quoted() + "```\n"), `${doc} does not quote test/example.test.ts's example (between readme:begin and readme:end) verbatim`);
  });
}
