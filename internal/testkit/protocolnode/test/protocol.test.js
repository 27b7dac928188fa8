// docs/protocol.md's algorithm (../protocol.js), run by a plain grpc-js client
// against opledger serve, whose answers are lost after commit (--faults) and
// whose answers this test also loses after they arrived: every logical call
// ends with its one transfer, none twice, none ambiguous (issue 40).

import assert from "node:assert/strict";
import { execFile, execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { once } from "node:events";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import * as grpc from "@grpc/grpc-js";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";

import { decodeTransferReply, encodeTransferRequest, keyedTransfer, RetryBudget, send, uuidv7 } from "../protocol.js";

/** The repository's root, from internal/testkit/protocolnode/test/. */
const repoRoot = fileURLToPath(new URL("../../../../", import.meta.url));

/** The opledger binary: $OPLEDGER_SERVE_BIN, else built (go build ./cmd/opledger). */
async function opledgerBinary() {
  const given = process.env["OPLEDGER_SERVE_BIN"];
  if (given !== undefined && given !== "") return given;
  const dir = mkdtempSync(join(tmpdir(), "opledger-protocolnode-bin-"));
  process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
  const bin = join(dir, "opledger");
  await promisify(execFile)("go", ["build", "-o", bin, "./cmd/opledger"], { cwd: repoRoot, timeout: 600_000 });
  return bin;
}

/**
 * Starts opledger serve on free loopback ports with a SQLite file of its own;
 * reads its first line (the endpoints) and the token.
 * @param {string[]} flags
 */
async function startServe(...flags) {
  const bin = await opledgerBinary();
  const dir = mkdtempSync(join(tmpdir(), "opledger-protocolnode-"));
  const db = join(dir, "serve.db");
  const child = spawn(bin, ["serve", "--listen", "127.0.0.1:0", "--dsn", "sqlite:" + db, "--grace", "2s", ...flags], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stderr = "";
  child.stderr.on("data", (b) => (stderr += b.toString()));
  const exited = new Promise((resolve) => child.once("exit", resolve));
  // The first line names the endpoints; the rest of stdout is read and dropped.
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const stopWaiting = new AbortController();
  const first = await Promise.race([
    lines.next(),
    once(child, "exit", { signal: stopWaiting.signal }).then(([code]) => Promise.reject(new Error(`opledger serve exited (${String(code)}): ${stderr}`))),
    sleep(60_000, undefined, { signal: stopWaiting.signal }).then(() => Promise.reject(new Error("opledger serve printed no endpoints within 60s: " + stderr))),
  ])
    .then(async (r) => {
      if (r.done) throw new Error(`opledger serve printed nothing and exited (${String((await exited) ?? "")}): ${stderr}`);
      return String(r.value);
    })
    .finally(() => stopWaiting.abort());
  void (async () => {
    while (!(await lines.next()).done);
  })();
  const kv = new Map(first.split(" ").map((p) => /** @type {[string, string]} */ (p.split("=", 2))));
  return {
    grpc: /** @type {string} */ (kv.get("grpc")),
    token: readFileSync(/** @type {string} */ (kv.get("token-file")), "utf8").trim(),
    /** The transfers' rows, read from serve's SQLite file: reference → ids. */
    transfers() {
      const json = execFileSync("sqlite3", ["-readonly", "-json", "-cmd", ".timeout 10000", db, "SELECT reference, CAST(id AS TEXT) AS id FROM payments_transfers"], {
        encoding: "utf8",
        maxBuffer: 64 << 20,
      });
      /** @type {{ reference: string, id: string }[]} */
      const rows = json.trim() === "" ? [] : JSON.parse(json);
      /** @type {Map<string, bigint[]>} */
      const byRef = new Map();
      for (const r of rows) byRef.set(r.reference, [...(byRef.get(r.reference) ?? []), BigInt(r.id)]);
      return byRef;
    },
    async stop() {
      child.kill("SIGTERM");
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Calls f(0) … f(n-1), width of them in flight at a time.
 * @param {number} n @param {number} width @param {(i: number) => Promise<void>} f
 */
async function bounded(n, width, f) {
  const inFlight = new Set();
  for (let i = 0; i < n; i++) {
    const p = f(i).finally(() => inFlight.delete(p));
    inFlight.add(p);
    if (inFlight.size >= width) await Promise.race(inFlight);
  }
  await Promise.all(inFlight);
}

test("the key is a UUIDv7 of now, and the messages round-trip", () => {
  const before = Date.now();
  const k = uuidv7();
  assert.match(k, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  const ms = parseInt(k.replaceAll("-", "").slice(0, 12), 16);
  assert.ok(ms >= before && ms <= Date.now());
  const req = { fromAccount: "a", toAccount: "b", amountCents: 1n << 40n, reference: "r" };
  assert.equal(encodeTransferRequest(null).length, 0);
  assert.deepEqual([...encodeTransferRequest(req)], [0x0a, 1, 0x61, 0x12, 1, 0x62, 0x18, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20, 0x22, 1, 0x72]);
  const reply = new BinaryWriter().tag(1, WireType.Varint).int64(7n).tag(5, WireType.LengthDelimited).string("r").tag(9, WireType.Varint).int32(1).finish();
  assert.deepEqual(decodeTransferReply(Buffer.from(reply)), { transferId: 7n, fromAccount: "", toAccount: "", amountCents: 0n, reference: "r" });
});

test("2,000 calls with answers lost after commit: 0 duplicates, 0 losses, 0 ambiguous returns", { timeout: 600_000 }, async (t) => {
  const serve = await startServe("--faults", "0.2", "--faults-seed", "40");
  // No library retries: the algorithm owns the channel's retries.
  const client = new grpc.Client(serve.grpc, grpc.credentials.createInsecure(), { "grpc.enable_retries": 0 });
  try {
    // The network loses 3% of the runs' requests before they reach serve
    // (the resolve then finds nothing and the call runs again with its key),
    // and 5% of the answers after they arrived, runs' and resolves' alike, on
    // top of serve's losses after commit.
    let lostHere = 0;
    let notSent = 0;
    /** @type {import("../protocol.js").Send} */
    const lossy = async (c, body, md, deadline) => {
      if (md.get("idempotency-resolve").length === 0 && Math.random() < 0.03) {
        notSent++;
        return { ok: false, code: grpc.status.UNAVAILABLE, details: "injected: request lost before it arrived", metadata: new grpc.Metadata() };
      }
      const got = await send(c, body, md, deadline);
      if (Math.random() < 0.05) {
        lostHere++;
        return { ok: false, code: grpc.status.UNAVAILABLE, details: "injected: answer lost after it arrived", metadata: new grpc.Metadata() };
      }
      return got;
    };
    const budget = new RetryBudget();
    const n = 2000;
    const started = Date.now();
    /** @type {Map<string, import("../protocol.js").End>} */
    const ends = new Map();
    await bounded(n, 16, async (i) => {
      const ref = `node-${i}`;
      const req = { fromAccount: "ivy", toAccount: "jon", amountCents: BigInt(i + 1), reference: ref };
      ends.set(ref, await keyedTransfer({ client, token: serve.token, budget, send: lossy, timeoutMs: 60_000 }, req));
    });
    const took = Date.now() - started;
    const rows = serve.transfers();
    let duplicates = 0;
    let lost = 0;
    let wrong = 0;
    let ambiguous = 0;
    /** @type {string[]} */
    const answers = [];
    let runs = 0;
    let resolves = 0;
    let replayed = 0;
    for (let i = 0; i < n; i++) {
      const ref = `node-${i}`;
      const ids = rows.get(ref) ?? [];
      const end = /** @type {import("../protocol.js").End} */ (ends.get(ref));
      runs += end.runs;
      resolves += end.resolves;
      duplicates += Math.max(0, ids.length - 1);
      if (end.kind === "unknown") ambiguous++;
      if (end.kind === "answer") answers.push(`${ref}: code ${end.code} ${end.reason} (${end.next})`);
      if (end.kind === "result") {
        if (end.replayed) replayed++;
        const r = end.reply;
        if (ids.length !== 1 || ids[0] !== r.transferId || r.reference !== ref || r.amountCents !== BigInt(i + 1)) wrong++;
      } else if (ids.length === 1) {
        lost++; // committed, and the caller never got it
      }
    }
    t.diagnostic(
      `${n} calls in ${took} ms: ${runs} runs, ${resolves} resolves, ${replayed} ended with a stored answer; ` +
        `${notSent} requests and ${lostHere} answers lost here, the rest by serve --faults 0.2`,
    );
    assert.deepEqual({ duplicates, lost, wrong, ambiguous, answers: answers.slice(0, 5) }, { duplicates: 0, lost: 0, wrong: 0, ambiguous: 0, answers: [] });
    assert.equal(rows.size, n, "transfers beyond the calls'");
    assert.ok(resolves > 200 && replayed > 200, `${resolves} resolves, ${replayed} stored answers: the answers were not lost`);
    assert.ok(runs > n, `${runs} runs: no call ran again after a resolve found nothing`);
    assert.ok(took < 300_000, `2,000 calls took ${took} ms`);
  } finally {
    client.close();
    await serve.stop();
  }
});
