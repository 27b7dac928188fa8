// The interceptor: one key per logical call, the call's retries, resolve
// before any retry after an unknown outcome, and a definite outcome from the
// kit's table on every failure (docs/protocol.md, "Resolve before retry").

import { clone, create, getOption, hasOption, type DescMessage, type DescMethod } from "@bufbuild/protobuf";
import { MethodOptions_IdempotencyLevel } from "@bufbuild/protobuf/wkt";
import {
  Code,
  ConnectError,
  createContextKey,
  createContextValues,
  type ContextValues,
  type Interceptor,
  type UnaryResponse,
} from "@connectrpc/connect";

import { ErrorInfoSchema } from "../gen/google/rpc/error_details_pb.js";
import { keyed as keyedOption } from "../gen/opledger/v1/opledger_pb.js";
import { RetryBudget, type RetryBudgetSettings } from "./budget.js";
import { formatFirstSent, keyBirth, newKey } from "./keys.js";
import { byReason, errorDomain, outcome, type Outcome } from "./outcomes.js";

const keyHeader = "idempotency-key";
const firstSentHeader = "idempotency-key-first-sent";
const resolveHeader = "idempotency-resolve";
const replayedHeader = "idempotency-replayed";
const pushbackHeader = "grpc-retry-pushback-ms";
const ownerHeader = "opledger-retry-owner";
const attemptHeader = "opledger-attempt";

/** Backoff between attempts and resolves; a server's pushback replaces it. */
export interface Backoff {
  /** The first wait, in milliseconds; default 100. */
  readonly initialMs?: number;
  /** The longest wait, in milliseconds; default 1,000. */
  readonly maxMs?: number;
  /** The relative spread, 0 to 1; default 0.2 (±20%). */
  readonly jitter?: number;
}

/** How a logical call ended, given to {@link KeyedClientOptions.onCallEnd}. */
export interface CallInfo {
  /** The method's full name, `/package.Service/Method`. */
  readonly procedure: string;
  /** The call's key; "" for a method that is not keyed. */
  readonly key: string;
  /** The call's outcome: `executed` or `replayed` on success. */
  readonly outcome: Outcome;
  /** Runs of the method (attempts, resolves not counted). */
  readonly runs: number;
  /** Resolves sent. */
  readonly resolves: number;
}

/** Options of {@link createKeyedInterceptor}; every field has the Go client's default. */
export interface KeyedClientOptions {
  /**
   * Keyed methods beyond those the `.proto` marks with the kit's option
   * `(opledger.v1.keyed)`: full names, `package.Service/Method` (a leading
   * slash is allowed).
   */
  readonly keyedMethods?: readonly string[];
  /** At most this many runs per logical call, resolves not counted; default 5. */
  readonly maxRuns?: number;
  /** The budget of retries: one budget per target; default a budget of the Go kit's defaults. */
  readonly budget?: RetryBudget | RetryBudgetSettings;
  /** Backoff between attempts and resolves. */
  readonly backoff?: Backoff;
  /** Without a deadline, how long a call keeps resolving after its outcome became unknown; default 30,000 ms. */
  readonly resolveForMs?: number;
  /** Called once per logical call of a keyed or idempotent method, when it ends. */
  readonly onCallEnd?: (info: CallInfo) => void;
}

/**
 * The error of a keyed call that ended without its result: a
 * `ConnectError` with the last answer's code, message, metadata and
 * details, and the outcome from the kit's table that says what was
 * committed and what to do next. A call whose outcome is unknown ends with
 * the outcome `call-outcome-unknown` and its key, to be resolved later with
 * {@link withKey}: never "failed".
 *
 * The interceptor ends a call a little before its deadline, so that the
 * call gets this error; a call cancelled by its own abort signal gets
 * connect's `CANCELLED` error instead (connect-es replaces the error of a
 * call whose signal aborted), and {@link KeyedClientOptions.onCallEnd} is
 * then the one that gets the outcome and the key.
 */
export class KeyedCallError extends ConnectError {
  /** The outcome: what was committed and what to do next. */
  readonly outcome: Outcome;
  /** The call's key ("" for a method that is not keyed). */
  readonly key: string;
  /** Runs of the method, resolves not counted. */
  readonly runs: number;
  /** Resolves sent. */
  readonly resolves: number;

  /**
   * Reports whether v is a KeyedCallError (ConnectError's own check takes
   * every ConnectError for one).
   */
  static override [Symbol.hasInstance](v: unknown): boolean {
    return typeof v === "object" && v !== null && Object.prototype.isPrototypeOf.call(KeyedCallError.prototype, v);
  }

  /** Wraps the last answer of a call, last, with its outcome. */
  constructor(last: ConnectError, info: CallInfo) {
    // The name stays "ConnectError": connect's clients pass on only errors
    // that ConnectError recognizes, by its name, and wrap any other.
    super(last.rawMessage, last.code, last.metadata, undefined, last.cause);
    this.details = last.details;
    this.outcome = info.outcome;
    this.key = info.key;
    this.runs = info.runs;
    this.resolves = info.resolves;
  }
}

interface KeyChoice {
  readonly key: string;
  readonly firstSent?: string;
}

const keyContext = createContextKey<KeyChoice | undefined>(undefined, { description: "opledger idempotency key" });

/**
 * Returns context values (for a call's `contextValues` option) that make
 * the call use `key` instead of a new one: a key persisted to resolve a call
 * after a restart, or a key from {@link downstreamKey}. `firstSent` is the
 * first-sent value sent beside a key that carries no birth, exactly as first
 * sent. `values` are extended, else new ones are made.
 */
export function withKey(key: string, firstSent?: string, values: ContextValues = createContextValues()): ContextValues {
  return values.set(keyContext, firstSent === undefined ? { key } : { key, firstSent });
}

type Kind = "keyed" | "idempotent" | "none";

function normal(name: string): string {
  return name.startsWith("/") ? name.slice(1) : name;
}

function methodKind(m: DescMethod, extra: ReadonlySet<string>): { kind: Kind; keyField: string } {
  if (m.methodKind !== "unary") {
    return { kind: "none", keyField: "" };
  }
  if (hasOption(m, keyedOption)) {
    return { kind: "keyed", keyField: getOption(m, keyedOption).keyField };
  }
  if (extra.has(`${m.parent.typeName}/${m.name}`)) {
    return { kind: "keyed", keyField: "" };
  }
  if (m.idempotency === MethodOptions_IdempotencyLevel.NO_SIDE_EFFECTS || m.idempotency === MethodOptions_IdempotencyLevel.IDEMPOTENT) {
    return { kind: "idempotent", keyField: "" };
  }
  return { kind: "none", keyField: "" };
}

/** The never-sent errors of Node's sockets: the request left no byte. */
const notSentCodes = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EADDRNOTAVAIL", "ENETUNREACH", "EHOSTUNREACH"]);

function neverSent(e: ConnectError): boolean {
  let c: unknown = e.cause;
  for (let i = 0; i < 4 && typeof c === "object" && c !== null; i++) {
    const code = (c as { code?: unknown }).code;
    if (typeof code === "string" && notSentCodes.has(code)) {
      return true;
    }
    c = (c as { cause?: unknown }).cause;
  }
  return false;
}

function kitRow(e: ConnectError): Outcome | undefined {
  for (const info of e.findDetails(ErrorInfoSchema)) {
    if (info.domain === errorDomain) {
      const r = byReason(info.reason);
      if (r !== undefined) {
        return r;
      }
    }
  }
  return undefined;
}

function replayed(h: Headers): boolean {
  return h.get(replayedHeader)?.toLowerCase() === "true";
}

/** The stored answer's code of a replay (idempotency-replayed-code), or -1. */
function storedCode(h: Headers): number {
  const v = h.get("idempotency-replayed-code");
  return v !== null && /^[0-9]{1,2}$/.test(v) ? Number(v) : -1;
}

/** Pushback: undefined when absent, NaN when malformed (negative, not a number, sent twice). */
function pushback(h: Headers): number | undefined {
  const v = h.get(pushbackHeader);
  if (v === null) {
    return undefined;
  }
  return /^[0-9]{1,9}$/.test(v.trim()) ? Number(v.trim()) : NaN;
}

function deadlineOf(h: Headers, start: number): number | undefined {
  const c = h.get("connect-timeout-ms");
  if (c !== null && /^[0-9]{1,10}$/.test(c)) {
    return start + Number(c);
  }
  const g = h.get("grpc-timeout");
  const m = g === null ? null : /^([0-9]{1,8})([HMSmun])$/.exec(g);
  if (m !== null) {
    const unit: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 1e-3, n: 1e-6 };
    return start + Number(m[1]) * unit[m[2]!]!;
  }
  return undefined;
}

function sleep(ms: number, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted) {
    return Promise.resolve(false);
  }
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(t);
      signal.removeEventListener("abort", done);
      resolve(!signal.aborted);
    };
    const t = setTimeout(done, ms);
    signal.addEventListener("abort", done);
  });
}

/** How long before the call's deadline the interceptor ends it, in milliseconds. */
const deadlineMargin = 25;

/** Codes a retry will not change (the Go kit's policy.Eligible, rule 5). */
const finalCodes = new Set([
  Code.Canceled,
  Code.InvalidArgument,
  Code.NotFound,
  Code.AlreadyExists,
  Code.PermissionDenied,
  Code.FailedPrecondition,
  Code.OutOfRange,
  Code.Unimplemented,
  Code.DataLoss,
  Code.Unauthenticated,
]);

/** Codes that say nothing of whether a sent request ran. */
const unknownResolve = new Set([Code.DeadlineExceeded, Code.Unavailable]);
const unknownRetry = new Set([Code.Unknown, Code.Internal, Code.Aborted, Code.ResourceExhausted]);

/**
 * Returns an interceptor for `@connectrpc/connect` v2 clients (the web
 * and the Node transports, every protocol) that owns the retries of their
 * calls, as docs/protocol.md's algorithm says:
 *
 * - a keyed method (marked `(opledger.v1.keyed)` in its `.proto`, or named
 *   in `keyedMethods`) gets one UUIDv7 key per logical call, kept across
 *   attempts and resolves, in the `idempotency-key` header (and in its key
 *   field, when the option names one); its failures are read by the kit's
 *   reason, else by the status and whether the request left the client; a
 *   call whose earlier attempt may have committed resolves
 *   (`idempotency-resolve: 1`) before it runs again or reports anything;
 * - a method marked `NO_SIDE_EFFECTS` or `IDEMPOTENT` is retried on
 *   `UNAVAILABLE` and the kit's retry rows, without a key;
 * - every other method passes through, never retried.
 *
 * Runs are bounded (`maxRuns`), retries by a budget; waits follow the
 * backoff, or the server's pushback exactly; the call's deadline or abort
 * signal spans all attempts and resolves. A failed call throws a
 * {@link KeyedCallError}. Put it first in the client's interceptors (the
 * outermost) and give the channel no other retrying layer.
 */
export function createKeyedInterceptor(options: KeyedClientOptions = {}): Interceptor {
  const extra = new Set((options.keyedMethods ?? []).map(normal));
  const kinds = new Map<DescMethod, { kind: Kind; keyField: string }>();
  const budget = options.budget instanceof RetryBudget ? options.budget : new RetryBudget(options.budget ?? {});
  const maxRuns = Math.max(1, options.maxRuns ?? 5);
  const initial = options.backoff?.initialMs ?? 100;
  const max = options.backoff?.maxMs ?? 1000;
  const jitter = Math.min(1, Math.max(0, options.backoff?.jitter ?? 0.2));
  const resolveFor = options.resolveForMs ?? 30_000;
  const backoff = (n: number): number => Math.min(initial * 2 ** n, max) * (1 - jitter + 2 * jitter * Math.random());

  return (next) => async (req) => {
    if (req.stream) {
      return next(req);
    }
    let k = kinds.get(req.method);
    if (k === undefined) {
      k = methodKind(req.method, extra);
      kinds.set(req.method, k);
    }
    if (k.kind === "none") {
      return next(req);
    }
    const procedure = `/${req.service.typeName}/${req.method.name}`;
    const start = Date.now();
    // The call ends a little before its deadline: when connect's own timer
    // fires first, connect replaces the call's error with its own
    // DEADLINE_EXCEEDED, and the outcome would be lost.
    const given = deadlineOf(req.header, start);
    const deadline = given === undefined ? undefined : given - deadlineMargin;
    const signal = req.signal;
    let timedOut = false;
    // attemptSignal is the signal of one attempt or resolve: the call's,
    // and aborted at the deadline.
    const attemptSignal = (): { signal: AbortSignal; done: () => void } => {
      if (deadline === undefined) {
        return { signal, done: () => {} };
      }
      const c = new AbortController();
      const abort = (): void => c.abort(signal.reason);
      const t = setTimeout(() => {
        timedOut = true;
        c.abort(new ConnectError("opledger: the call's deadline", Code.DeadlineExceeded));
      }, Math.max(0, deadline - Date.now()));
      signal.addEventListener("abort", abort);
      return {
        signal: c.signal,
        done: () => {
          clearTimeout(t);
          signal.removeEventListener("abort", abort);
        },
      };
    };
    const ended = (): boolean => signal.aborted || timedOut;

    // Step 1: the key, once per logical call.
    let message = req.message;
    let key = "";
    let firstSent: string | undefined;
    if (k.kind === "keyed") {
      const chosen = req.contextValues.get(keyContext);
      const fieldValue = keyFieldValue(req.method.input, message, k.keyField);
      key = chosen?.key ?? req.header.get(keyHeader) ?? (fieldValue !== "" ? fieldValue : newKey(new Date(start)));
      firstSent = chosen?.firstSent ?? req.header.get(firstSentHeader) ?? undefined;
      if (firstSent === undefined && keyBirth(key) === undefined) {
        firstSent = formatFirstSent(new Date(start));
      }
      if (k.keyField !== "" && fieldValue === "") {
        message = withField(req.method.input, message, k.keyField, key);
      }
    }
    budget.deposit();

    let runs = 0;
    let resolves = 0;
    let unknown = false;
    let unknownSince = 0;
    let lastRun: ConnectError | undefined;
    let last: ConnectError | undefined;
    let lastRow: Outcome | undefined;
    let everSent = false;
    let delayN = 0;
    let action: "run" | "resolve" = "run";

    const markUnknown = (): void => {
      // A read (an idempotent method) has nothing to resolve: it runs again.
      if (!unknown && k.kind === "keyed") {
        unknown = true;
        unknownSince = Date.now();
      }
    };
    const end = (o: Outcome): CallInfo => {
      const info: CallInfo = { procedure, key, outcome: o, runs, resolves };
      options.onCallEnd?.(info);
      return info;
    };
    const fail = (): never => {
      const err = last ?? new ConnectError("opledger: the call ended before an attempt", Code.Canceled);
      let o: Outcome;
      if (unknown) {
        o = outcome("call-outcome-unknown");
      } else if (lastRow !== undefined) {
        o = lastRow;
      } else if (!everSent) {
        o = outcome("request-not-sent");
      } else {
        o = outcome("server-answered");
      }
      throw new KeyedCallError(err, end(o));
    };
    const headersFor = (resolve: boolean): Headers => {
      const h = new Headers(req.header);
      if (k.kind === "keyed") {
        h.set(keyHeader, key);
        if (firstSent !== undefined) {
          h.set(firstSentHeader, firstSent);
        } else {
          h.delete(firstSentHeader);
        }
        h.set(ownerHeader, "application");
      }
      if (resolve) {
        h.set(resolveHeader, "1");
        h.delete(attemptHeader);
      } else {
        h.delete(resolveHeader);
        if (k.kind === "keyed") {
          h.set(attemptHeader, String(runs));
        }
      }
      return h;
    };
    // wait waits the pushback or the backoff before the next step; it
    // returns false when the call must end instead (step 7).
    const wait = async (pb: number | undefined): Promise<boolean> => {
      let ms: number;
      if (pb !== undefined && Number.isNaN(pb)) {
        if (!unknown) {
          return false;
        }
        ms = 0;
      } else if (pb !== undefined) {
        ms = pb;
        delayN = 0;
      } else {
        ms = backoff(delayN++);
      }
      const now = Date.now();
      const limit = deadline ?? (unknown ? unknownSince + resolveFor : undefined);
      if (limit !== undefined && now + ms >= limit) {
        if (!unknown) {
          return false;
        }
        const left = limit - now;
        if (left < 20) {
          return false;
        }
        ms = Math.min(ms, left / 2);
        action = "resolve";
      }
      return sleep(ms, signal);
    };
    // afterRetry applies step 5 to a "retry": run again, else resolve
    // (unknown) or stop.
    const afterRetry = (): "run" | "resolve" | "stop" => {
      if (runs >= maxRuns || !budget.tryWithdraw()) {
        return unknown ? "resolve" : "stop";
      }
      return "run";
    };

    for (;;) {
      if (ended() || (unknown && deadline === undefined && Date.now() >= unknownSince + resolveFor)) {
        return fail();
      }
      if (action === "run") {
        runs++;
        let sent = true;
        try {
          const a = attemptSignal();
          const res = (await next({ ...req, message, header: headersFor(false), signal: a.signal }).finally(a.done)) as UnaryResponse;
          end(outcome(replayed(res.trailer) || replayed(res.header) ? "replayed" : "executed"));
          return res;
        } catch (e) {
          const err = ConnectError.from(e);
          last = lastRun = err;
          sent = !neverSent(err);
          everSent ||= sent;
          lastRow = kitRow(err);
        }
        if (ended()) {
          return fail();
        }
        const err = lastRun;
        let step: "stop" | "retry" | "resolve";
        let nothing: boolean; // the failure says nothing was committed by it
        if (lastRow !== undefined) {
          step = lastRow.next;
          if (step === "retry" && finalCodes.has(err.code)) {
            step = "stop"; // refused before it ran, with a code a retry will not change (UNAUTHENTICATED)
          }
          nothing = lastRow.committed === "no" || lastRow.committed === "n/a";
          if ((step === "retry" && lastRow.committed === "unknown") || step === "resolve") {
            markUnknown();
          }
        } else if (!sent) {
          step = "retry";
          nothing = true;
        } else if (unknownResolve.has(err.code)) {
          step = "resolve";
          nothing = false;
          markUnknown();
        } else if (unknownRetry.has(err.code)) {
          step = "retry";
          nothing = false;
          markUnknown();
        } else if (err.code === Code.Canceled) {
          markUnknown();
          return fail();
        } else {
          step = "stop";
          nothing = false;
        }
        if (k.kind === "idempotent" && step === "resolve") {
          step = "retry"; // nothing to resolve: a read runs again
        }
        if (step === "stop" && nothing && unknown) {
          step = "resolve"; // step 6: an earlier attempt may have committed
        }
        if (step === "retry") {
          const s = afterRetry();
          if (s === "stop") {
            return fail();
          }
          step = s === "run" ? "retry" : "resolve";
        }
        if (step === "stop") {
          return fail();
        }
        action = step === "retry" ? "run" : "resolve";
        if (!(await wait(pushback(err.metadata)))) {
          return fail();
        }
        continue;
      }

      // A resolve (step 7's answers).
      resolves++;
      let err: ConnectError;
      try {
        const a = attemptSignal();
        const res = (await next({
          ...req,
          message: create(req.method.input as DescMessage),
          header: headersFor(true),
          signal: a.signal,
        }).finally(a.done)) as UnaryResponse;
        unknown = false;
        end(outcome("replayed"));
        return res;
      } catch (e) {
        err = ConnectError.from(e);
      }
      if (ended()) {
        return fail();
      }
      const row = kitRow(err);
      if (replayed(err.metadata) && storedCode(err.metadata) === err.code) {
        // A stored error (the marker, with the error's own code): the call's answer.
        unknown = false;
        last = err;
        lastRow = outcome("replayed");
        return fail();
      }
      if (row?.name === "operation-not-found") {
        unknown = false;
        const s = afterRetry();
        if (s !== "run") {
          last = lastRun ?? err;
          lastRow = kitRow(last) ?? outcome("operation-not-found");
          return fail();
        }
        action = "run";
      } else if (row !== undefined && row.next === "retry") {
        action = "resolve";
      } else if (row !== undefined) {
        unknown = false;
        last = err;
        lastRow = row;
        return fail();
      } else if (neverSent(err) || unknownResolve.has(err.code) || unknownRetry.has(err.code)) {
        action = "resolve";
      } else {
        unknown = false;
        last = err;
        lastRow = undefined;
        return fail();
      }
      if (!(await wait(pushback(err.metadata)))) {
        return fail();
      }
    }
  };
}

function keyFieldValue(schema: DescMessage, msg: unknown, field: string): string {
  if (field === "") {
    return "";
  }
  const f = schema.fields.find((x) => x.name === field);
  if (f === undefined || f.fieldKind !== "scalar") {
    return "";
  }
  const v = (msg as Record<string, unknown>)[f.localName];
  return typeof v === "string" ? v : "";
}

function withField(schema: DescMessage, msg: unknown, field: string, key: string): never {
  const f = schema.fields.find((x) => x.name === field);
  const c = clone(schema, msg as never) as Record<string, unknown>;
  if (f !== undefined) {
    c[f.localName] = key;
  }
  return c as never;
}

