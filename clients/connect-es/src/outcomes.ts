// The kit's one outcome table (Go: keyed.Outcomes(), docs/protocol.md's
// "Outcomes on each transport"), as a connect client reads it. A test
// compares it with docs/protocol.md's table, which a Go test generates from
// the Go classification.

/** What an outcome says of the key's operation. */
export type Committed =
  /** nothing was committed */
  | "no"
  /** a final answer is stored: every retry with the key gets it back */
  | "answer"
  /** the client cannot tell */
  | "unknown"
  /** refused before the ledger was asked */
  | "n/a";

/** What the client does after an attempt that ended so. */
export type Next = "stop" | "retry" | "resolve";

/** The name of every outcome of a keyed call, as the Go kit names it. */
export type OutcomeName =
  | "executed"
  | "replayed"
  | "not-stored"
  | "handler-panic"
  | "caller-not-identified"
  | "idempotency-key-missing"
  | "idempotency-key-invalid"
  | "request-too-large"
  | "request-unreadable"
  | "route-not-keyed"
  | "keyed-method-served-as-stream"
  | "idempotency-key-reused"
  | "operation-in-progress"
  | "operation-incomplete"
  | "idempotency-key-expired"
  | "transaction-aborted"
  | "storage-busy"
  | "storage-unavailable"
  | "commit-outcome-unknown"
  | "request-ended"
  | "response-too-large"
  | "result-not-storable"
  | "ledger-misuse"
  | "stored-result-unreadable"
  | "operation-not-found"
  | "request-not-executed"
  | "request-not-sent"
  | "server-answered"
  | "call-outcome-unknown";

/** One row of the kit's outcome table. */
export interface Outcome {
  /** The outcome's name. */
  readonly name: OutcomeName;
  /** `server`: the server's answer; `client`: the client's reading of a call that ended without one. */
  readonly side: "server" | "client";
  /** The ErrorInfo reason (domain `opledger.grpcint`) the server sends, or the client's; "" for none. */
  readonly reason: string;
  /** What the outcome says was committed. */
  readonly committed: Committed;
  /** What the client does next after an attempt that ended so. */
  readonly next: Next;
}

function row(name: OutcomeName, side: "server" | "client", reason: string, committed: Committed, next: Next): Outcome {
  return Object.freeze({ name, side, reason, committed, next });
}

/**
 * The kit's outcome table, in the Go kit's order: every outcome a keyed
 * call can end with, what it says was committed and what to do next.
 */
export const outcomes: readonly Outcome[] = Object.freeze([
  row("executed", "server", "", "answer", "stop"),
  row("replayed", "server", "", "answer", "stop"),
  row("not-stored", "server", "", "no", "retry"),
  row("handler-panic", "server", "", "no", "retry"),
  row("caller-not-identified", "server", "CALLER_NOT_IDENTIFIED", "n/a", "stop"),
  row("idempotency-key-missing", "server", "MISSING_IDEMPOTENCY_KEY", "n/a", "stop"),
  row("idempotency-key-invalid", "server", "INVALID_IDEMPOTENCY_KEY", "n/a", "stop"),
  row("request-too-large", "server", "", "n/a", "stop"),
  row("request-unreadable", "server", "INVALID_KEYED_REQUEST", "n/a", "stop"),
  row("route-not-keyed", "server", "INVALID_KEYED_REQUEST", "n/a", "stop"),
  row("keyed-method-served-as-stream", "server", "KEYED_METHOD_SERVED_AS_STREAM", "n/a", "stop"),
  row("idempotency-key-reused", "server", "IDEMPOTENCY_KEY_REUSED", "answer", "stop"),
  row("operation-in-progress", "server", "OPERATION_IN_PROGRESS", "unknown", "retry"),
  row("operation-incomplete", "server", "OPERATION_INCOMPLETE", "unknown", "stop"),
  row("idempotency-key-expired", "server", "IDEMPOTENCY_KEY_EXPIRED", "unknown", "stop"),
  row("transaction-aborted", "server", "TRANSACTION_ABORTED", "no", "retry"),
  row("storage-busy", "server", "STORAGE_BUSY", "no", "retry"),
  row("storage-unavailable", "server", "STORAGE_UNAVAILABLE", "no", "retry"),
  row("commit-outcome-unknown", "server", "COMMIT_OUTCOME_UNKNOWN", "unknown", "resolve"),
  row("request-ended", "server", "", "no", "retry"),
  row("response-too-large", "server", "", "no", "stop"),
  row("result-not-storable", "server", "RESULT_NOT_STORABLE", "no", "stop"),
  row("ledger-misuse", "server", "LEDGER_MISUSE", "no", "stop"),
  row("stored-result-unreadable", "server", "STORED_RESULT_UNREADABLE", "answer", "stop"),
  row("operation-not-found", "server", "OPERATION_NOT_FOUND", "no", "retry"),
  row("request-not-executed", "server", "REQUEST_NOT_EXECUTED", "no", "retry"),
  row("request-not-sent", "client", "REQUEST_NOT_SENT", "no", "retry"),
  row("server-answered", "client", "SERVER_ANSWERED", "answer", "stop"),
  row("call-outcome-unknown", "client", "CALL_OUTCOME_UNKNOWN", "unknown", "resolve"),
]);

/** The ErrorInfo domain of the kit's reasons. */
export const errorDomain = "opledger.grpcint";

/** outcome returns the row named name. */
export function outcome(name: OutcomeName): Outcome {
  const o = outcomes.find((r) => r.name === name);
  if (o === undefined) {
    throw new RangeError(`no outcome ${name}`);
  }
  return o;
}

/**
 * byReason returns the server's row of an ErrorInfo reason: the first row
 * with it (two rows share INVALID_KEYED_REQUEST and mean the same to a
 * client), or undefined for a reason that is not the kit's.
 */
export function byReason(reason: string): Outcome | undefined {
  return outcomes.find((r) => r.side === "server" && r.reason !== "" && r.reason === reason);
}
