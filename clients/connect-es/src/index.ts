/**
 * `@opledger/connect-es`: an interceptor for `@connectrpc/connect` v2 that
 * brings the opledger kit's keyed calls to browsers and Node.js: one key per
 * logical call, the call's retries, resolve before any retry after an
 * unknown outcome, and on every failure an outcome from the kit's one table.
 * The wire protocol it speaks is docs/protocol.md.
 *
 * @packageDocumentation
 */
export { createKeyedInterceptor, withKey, KeyedCallError } from "./interceptor.js";
export type { Backoff, CallInfo, KeyedClientOptions } from "./interceptor.js";
export { newKey, keyBirth, downstreamKey } from "./keys.js";
export { outcomes } from "./outcomes.js";
export type { Outcome, OutcomeName, Committed, Next } from "./outcomes.js";
export { RetryBudget } from "./budget.js";
export type { RetryBudgetSettings } from "./budget.js";
