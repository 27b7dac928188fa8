// docs/protocol.md's "Resolve before retry: the algorithm", run by a plain
// @grpc/grpc-js client (not the kit's TypeScript client), step by step: each
// step's number from the doc is in the comments. The messages are hand-encoded
// with @bufbuild/protobuf's wire format, so nothing here is generated.

import { randomBytes } from "node:crypto";

import * as grpc from "@grpc/grpc-js";
import { BinaryReader, BinaryWriter, WireType } from "@bufbuild/protobuf/wire";

/** The keyed method of opledger serve's example service. */
export const transferMethod = "/opledger.examples.payments.v1.Payments/Transfer";

/** The ErrorInfo domain of the kit's reasons. */
const kitDomain = "opledger.grpcint";

/**
 * @typedef {{ fromAccount: string, toAccount: string, amountCents: bigint, reference: string }} TransferRequest
 * @typedef {{ transferId: bigint, fromAccount: string, toAccount: string, amountCents: bigint, reference: string }} TransferReply
 */

/**
 * Encodes an opledger.examples.payments.v1.TransferRequest.
 * @param {TransferRequest | null} m null: the empty message a resolve sends
 * @returns {Buffer}
 */
export function encodeTransferRequest(m) {
  const w = new BinaryWriter();
  if (m !== null) {
    if (m.fromAccount !== "") w.tag(1, WireType.LengthDelimited).string(m.fromAccount);
    if (m.toAccount !== "") w.tag(2, WireType.LengthDelimited).string(m.toAccount);
    if (m.amountCents !== 0n) w.tag(3, WireType.Varint).int64(m.amountCents);
    if (m.reference !== "") w.tag(4, WireType.LengthDelimited).string(m.reference);
  }
  return Buffer.from(w.finish());
}

/**
 * Decodes an opledger.examples.payments.v1.TransferReply.
 * @param {Buffer} b
 * @returns {TransferReply}
 */
export function decodeTransferReply(b) {
  const m = { transferId: 0n, fromAccount: "", toAccount: "", amountCents: 0n, reference: "" };
  const r = new BinaryReader(b);
  while (r.pos < r.len) {
    const [no, wt] = r.tag();
    if (no === 1 && wt === WireType.Varint) m.transferId = BigInt(r.int64());
    else if (no === 2 && wt === WireType.LengthDelimited) m.fromAccount = r.string();
    else if (no === 3 && wt === WireType.LengthDelimited) m.toAccount = r.string();
    else if (no === 4 && wt === WireType.Varint) m.amountCents = BigInt(r.int64());
    else if (no === 5 && wt === WireType.LengthDelimited) m.reference = r.string();
    else r.skip(wt, no);
  }
  return m;
}

/**
 * The kit's reason in a gRPC error: grpc-status-details-bin is a
 * google.rpc.Status (details = 3, each a google.protobuf.Any); the Any of
 * type.googleapis.com/google.rpc.ErrorInfo holds reason = 1, domain = 2.
 * An ErrorInfo of another domain is not the kit's ("" then).
 * @param {grpc.Metadata | undefined} md
 * @returns {string}
 */
export function kitReason(md) {
  const bins = md?.get("grpc-status-details-bin") ?? [];
  for (const bin of bins) {
    if (!(bin instanceof Buffer)) continue;
    try {
      const status = new BinaryReader(bin);
      while (status.pos < status.len) {
        const [no, wt] = status.tag();
        if (no !== 3 || wt !== WireType.LengthDelimited) {
          status.skip(wt, no);
          continue;
        }
        const any = new BinaryReader(status.bytes());
        let typeUrl = "";
        /** @type {Uint8Array | undefined} */
        let value;
        while (any.pos < any.len) {
          const [ano, awt] = any.tag();
          if (ano === 1 && awt === WireType.LengthDelimited) typeUrl = any.string();
          else if (ano === 2 && awt === WireType.LengthDelimited) value = any.bytes();
          else any.skip(awt, ano);
        }
        if (typeUrl !== "type.googleapis.com/google.rpc.ErrorInfo" || value === undefined) continue;
        const info = new BinaryReader(value);
        let reason = "";
        let domain = "";
        while (info.pos < info.len) {
          const [ino, iwt] = info.tag();
          if (ino === 1 && iwt === WireType.LengthDelimited) reason = info.string();
          else if (ino === 2 && iwt === WireType.LengthDelimited) domain = info.string();
          else info.skip(iwt, ino);
        }
        if (domain === kitDomain) return reason;
      }
    } catch {
      // Unreadable details: not the kit's reason; read the status code alone.
    }
  }
  return "";
}

/**
 * The outcomes table of docs/protocol.md ("Outcomes on each transport"), by
 * the kit's reason: what the answer says was committed and what comes next.
 * @type {Record<string, { committed: "no" | "answer" | "unknown" | "n/a", next: "stop" | "retry" | "resolve" }>}
 */
const reasons = {
  CALLER_NOT_IDENTIFIED: { committed: "n/a", next: "stop" },
  MISSING_IDEMPOTENCY_KEY: { committed: "n/a", next: "stop" },
  INVALID_IDEMPOTENCY_KEY: { committed: "n/a", next: "stop" },
  INVALID_KEYED_REQUEST: { committed: "n/a", next: "stop" },
  KEYED_METHOD_SERVED_AS_STREAM: { committed: "n/a", next: "stop" },
  IDEMPOTENCY_KEY_REUSED: { committed: "answer", next: "stop" },
  OPERATION_IN_PROGRESS: { committed: "unknown", next: "retry" },
  OPERATION_INCOMPLETE: { committed: "unknown", next: "stop" },
  IDEMPOTENCY_KEY_EXPIRED: { committed: "unknown", next: "stop" },
  TRANSACTION_ABORTED: { committed: "no", next: "retry" },
  STORAGE_BUSY: { committed: "no", next: "retry" },
  STORAGE_UNAVAILABLE: { committed: "no", next: "retry" },
  COMMIT_OUTCOME_UNKNOWN: { committed: "unknown", next: "resolve" },
  RESULT_NOT_STORABLE: { committed: "no", next: "stop" },
  LEDGER_MISUSE: { committed: "no", next: "stop" },
  STORED_RESULT_UNREADABLE: { committed: "answer", next: "stop" },
  OPERATION_NOT_FOUND: { committed: "no", next: "retry" },
  REQUEST_NOT_EXECUTED: { committed: "no", next: "retry" },
};

/** The codes a retry can change, which may have run when sent (docs/protocol.md). */
const mayHaveRun = new Set([
  grpc.status.UNAVAILABLE,
  grpc.status.DEADLINE_EXCEEDED,
  grpc.status.UNKNOWN,
  grpc.status.INTERNAL,
  grpc.status.ABORTED,
  grpc.status.RESOURCE_EXHAUSTED,
]);

/**
 * A UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, the version, the variant
 * and random bits, in its 36-character hyphenated form.
 * @param {number} [now]
 * @returns {string}
 */
export function uuidv7(now = Date.now()) {
  const b = randomBytes(16);
  const ms = BigInt(now);
  for (let i = 0; i < 6; i++) b[i] = Number((ms >> BigInt(8 * (5 - i))) & 0xffn);
  b[6] = (b[6] & 0x0f) | 0x70;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = b.toString("hex");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/**
 * The retry budget per target (docs/protocol.md): every logical call deposits
 * 1, every run after a call's first withdraws 10, over a 10 s window, plus a
 * floor of 5 retries per second. Resolves cost nothing.
 */
export class RetryBudget {
  /** @param {{ windowMs?: number, percent?: number, minPerSecond?: number }} [o] */
  constructor(o = {}) {
    this.windowMs = o.windowMs ?? 10_000;
    this.cost = 100 / (o.percent ?? 10);
    this.floor = (o.minPerSecond ?? 5) * (this.windowMs / 1000) * this.cost;
    /** @type {{ at: number, n: number }[]} */
    this.events = [];
  }

  /** @param {number} now */
  #balance(now) {
    while (this.events.length > 0 && this.events[0].at <= now - this.windowMs) this.events.shift();
    return this.events.reduce((a, e) => a + e.n, this.floor);
  }

  /** A logical call's deposit. */
  deposit() {
    this.events.push({ at: Date.now(), n: 1 });
  }

  /** A run after a call's first: false when the budget refuses it. */
  withdraw() {
    const now = Date.now();
    if (this.#balance(now) < this.cost) return false;
    this.events.push({ at: now, n: -this.cost });
    return true;
  }
}

/**
 * One attempt or resolve as grpc-js ends it.
 * @typedef {{ ok: true, reply: TransferReply, trailer: grpc.Metadata }
 *   | { ok: false, code: number, details: string, metadata: grpc.Metadata | undefined }} Ended
 */

/**
 * A send through the network: the test's place to lose answers.
 * @typedef {(client: grpc.Client, body: Buffer, md: grpc.Metadata, deadline: number) => Promise<Ended>} Send
 */

/** @type {Send} */
export function send(client, body, md, deadline) {
  return new Promise((resolve) => {
    /** @type {Ended | undefined} */
    let ended;
    const call = client.makeUnaryRequest(
      transferMethod,
      (b) => b,
      decodeTransferReply,
      body,
      md,
      { deadline: new Date(deadline) },
      (err, reply) => {
        if (err !== null || reply === undefined) {
          const e = /** @type {grpc.ServiceError} */ (err);
          ended = { ok: false, code: e?.code ?? grpc.status.UNKNOWN, details: e?.details ?? "", metadata: e?.metadata };
        } else {
          ended = { ok: true, reply, trailer: new grpc.Metadata() };
        }
      },
    );
    // grpc-js calls the callback, then emits the status with the trailer.
    call.on("status", (s) => {
      if (ended === undefined) {
        ended = { ok: false, code: s.code, details: s.details, metadata: s.metadata };
      } else if (ended.ok) {
        ended.trailer = s.metadata;
      }
      resolve(ended);
    });
  });
}

/**
 * How a logical call ended: its result, a definite answer of the server's
 * (code and reason), or an unknown outcome with its key (never "failed").
 * @typedef {{ kind: "result", reply: TransferReply, replayed: boolean, runs: number, resolves: number, key: string }
 *   | { kind: "answer", code: number, reason: string, next: string, runs: number, resolves: number, key: string }
 *   | { kind: "unknown", code: number, runs: number, resolves: number, key: string }} End
 */

/**
 * The pushback of an answer: undefined when there is none, NaN when it is
 * unusable (negative, not a number or sent twice: step 7 ends the wait).
 * @param {grpc.Metadata | undefined} md
 */
function pushback(md) {
  const v = md?.get("grpc-retry-pushback-ms") ?? [];
  if (v.length === 0) return undefined;
  if (v.length > 1) return NaN;
  const s = String(v[0]);
  return /^[0-9]+$/.test(s) ? Number(s) : NaN;
}

/**
 * A keyed call of Transfer that follows docs/protocol.md's algorithm.
 * @param {{ client: grpc.Client, token: string, budget: RetryBudget, send?: Send,
 *   timeoutMs?: number, maxRuns?: number, backoff?: { initialMs: number, maxMs: number } }} c
 * @param {TransferRequest} req
 * @returns {Promise<End>}
 */
export async function keyedTransfer(c, req) {
  const doSend = c.send ?? send;
  const maxRuns = c.maxRuns ?? 5;
  const initialMs = c.backoff?.initialMs ?? 100;
  const maxMs = c.backoff?.maxMs ?? 1000;
  // The call's deadline spans all its attempts and resolves.
  const deadline = Date.now() + (c.timeoutMs ?? 30_000);

  // Step 1: the key, once per logical call, before the first attempt: a
  // UUIDv7 from the current time (its birth is in it: no first-sent value).
  const key = uuidv7();
  let unknown = false;
  c.budget.deposit();

  const body = encodeTransferRequest(req);
  let runs = 0;
  let resolves = 0;
  let delay = initialMs;
  /** @type {Ended | undefined} */
  let lastRun;

  /** @param {boolean} resolve */
  const metadata = (resolve) => {
    const md = new grpc.Metadata();
    md.set("authorization", "Bearer " + c.token);
    md.set("idempotency-key", key);
    if (resolve) {
      md.set("idempotency-resolve", "1");
    } else {
      md.set("opledger-retry-owner", "application");
      md.set("opledger-attempt", String(runs));
    }
    return md;
  };
  /** @param {number} code @returns {End} */
  const endUnknown = (code) => ({ kind: "unknown", code, runs, resolves, key });

  /**
   * Step 7's wait: the pushback exactly (and the doubling restarts), else the
   * backoff with ±20% jitter. Returns false when the wait would reach the
   * deadline or the pushback is unusable.
   * @param {grpc.Metadata | undefined} md
   */
  const wait = async (md) => {
    const pb = pushback(md);
    let ms;
    if (pb === undefined) {
      ms = delay * (0.8 + 0.4 * Math.random());
      delay = Math.min(delay * 2, maxMs);
    } else if (Number.isNaN(pb)) {
      return false;
    } else {
      ms = pb;
      delay = initialMs;
    }
    if (Date.now() + ms >= deadline) return false;
    await new Promise((r) => setTimeout(r, ms));
    return true;
  };

  /** @type {"run" | "resolve"} */
  let action = "run";
  for (;;) {
    if (action === "run") {
      // Step 2: the attempt: the same request and key, the owner declaration
      // and the attempt number.
      runs++;
      const got = await doSend(c.client, body, metadata(false), deadline);
      lastRun = got;
      // Step 3: a success ends the call (with the replay marker it is the
      // stored answer: still the answer).
      if (got.ok) {
        return { kind: "result", reply: got.reply, replayed: got.trailer.get("idempotency-replayed")[0] === "true", runs, resolves, key };
      }
      // Step 4: read the failure.
      const reason = kitReason(got.metadata);
      /** @type {"stop" | "retry" | "resolve"} */
      let next;
      /** @type {string} */
      let committed;
      const row = reasons[reason];
      if (row !== undefined) {
        ({ next, committed } = row);
        if (reason === "REQUEST_NOT_EXECUTED" && !mayHaveRun.has(got.code)) next = "stop";
        if ((next === "retry" && committed === "unknown") || next === "resolve") unknown = true;
      } else if (Date.now() >= deadline) {
        // The call's own deadline ended it: stop (step 8). The attempt was
        // sent and may have committed.
        unknown = true;
        return endUnknown(got.code);
      } else {
        // No reason of the kit's: grpc-js cannot tell whether the request
        // left the client, so count it as sent.
        committed = "unknown";
        switch (got.code) {
          case grpc.status.DEADLINE_EXCEEDED:
          case grpc.status.UNAVAILABLE:
            unknown = true;
            next = "resolve";
            break;
          case grpc.status.UNKNOWN:
          case grpc.status.INTERNAL:
          case grpc.status.ABORTED:
          case grpc.status.RESOURCE_EXHAUSTED:
            unknown = true;
            next = "retry";
            break;
          case grpc.status.CANCELLED:
            unknown = true;
            return endUnknown(got.code); // step 8
          default:
            next = "stop"; // the server's answer
            committed = "answer";
        }
      }
      // Step 6: a stop that says nothing was committed, while an earlier
      // attempt may have: resolve instead.
      if (next === "stop" && (committed === "no" || committed === "n/a") && unknown) next = "resolve";
      if (next === "stop") return { kind: "answer", code: got.code, reason, next, runs, resolves, key };
      if (next === "retry") {
        // Step 5: before a run after retry: 5 runs made, or the budget
        // refuses: resolve when unknown, else stop.
        if (runs >= maxRuns || !c.budget.withdraw()) {
          if (!unknown) return { kind: "answer", code: got.code, reason, next: "retry", runs, resolves, key };
          next = "resolve";
        }
      }
      action = next === "retry" ? "run" : "resolve";
      // Step 7: wait the pushback or the backoff, then go on.
      if (!(await wait(got.metadata))) {
        if (!unknown) return { kind: "answer", code: got.code, reason, next, runs, resolves, key };
        return await lastResolves();
      }
      continue;
    }

    // A resolve: the same method and key, an empty request, the resolve header.
    resolves++;
    const got = await doSend(c.client, encodeTransferRequest(null), metadata(true), deadline);
    const read = readResolve(got);
    if (typeof read !== "string") return read;
    if (read === "not-found") {
      // Nothing was committed: run again with the same key (step 5 applies:
      // no run allowed ends the call with the last run's error, "retry").
      unknown = false;
      if (runs >= maxRuns || !c.budget.withdraw()) return lastRunEnd();
      action = "run";
    } else if (Date.now() >= deadline) {
      return endUnknown(got.ok ? grpc.status.OK : got.code); // step 8
    }
    // In progress, a row whose next is retry, or a lost answer: resolve
    // again (or run, after not-found) after the pushback or the backoff.
    if (!(await wait(got.ok ? undefined : got.metadata))) {
      if (!unknown) return lastRunEnd();
      return await lastResolves();
    }
  }

  /**
   * Step 7, a resolve's answer: the call's end (its result, a stored error,
   * another reason of the kit's or a status that cannot have run: stop),
   * "not-found", or "again" (in progress, a row whose next is retry, a lost
   * answer).
   * @param {Ended} got
   * @returns {End | "not-found" | "again"}
   */
  function readResolve(got) {
    // The stored response is the call's result.
    if (got.ok) {
      unknown = false;
      return { kind: "result", reply: got.reply, replayed: true, runs, resolves, key };
    }
    const md = got.metadata;
    const reason = kitReason(md);
    // A stored error: the marker with the error's own code.
    if (md?.get("idempotency-replayed")[0] === "true" && md.get("idempotency-replayed-code")[0] === String(got.code)) {
      unknown = false;
      return { kind: "answer", code: got.code, reason, next: "stop", runs, resolves, key };
    }
    if (reason === "OPERATION_NOT_FOUND") return "not-found";
    if (reason !== "" && reasons[reason]?.next !== "retry") {
      // Any other reason of the kit's is the call's answer.
      return { kind: "answer", code: got.code, reason, next: "stop", runs, resolves, key };
    }
    if (reason === "" && !mayHaveRun.has(got.code)) {
      return { kind: "answer", code: got.code, reason, next: "stop", runs, resolves, key };
    }
    return "again";
  }

  /** The last run's error, with "retry" as its next step. @returns {End} */
  function lastRunEnd() {
    const last = /** @type {Ended & { ok: false }} */ (lastRun);
    return { kind: "answer", code: last.code, reason: kitReason(last.metadata), next: "retry", runs, resolves, key };
  }

  /**
   * Step 7's end: a wait would reach the deadline while the outcome is
   * unknown: resolve at once, then after half the time left each time, while
   * at least 20 ms is left. Step 8: still unknown, report it so.
   * @returns {Promise<End>}
   */
  async function lastResolves() {
    let code = grpc.status.DEADLINE_EXCEEDED;
    while (deadline - Date.now() >= 20) {
      resolves++;
      const got = await doSend(c.client, encodeTransferRequest(null), metadata(true), deadline);
      const read = readResolve(got);
      if (typeof read !== "string") return read;
      // Nothing committed and no time for another run.
      if (read === "not-found") return lastRunEnd();
      if (!got.ok) code = got.code;
      await new Promise((r) => setTimeout(r, Math.max(0, (deadline - Date.now()) / 2)));
    }
    return endUnknown(code);
  }
}
