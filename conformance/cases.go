package conformance

import "database/sql"

// caseList is the suite, in running order.
func caseList() []caseDef {
	return []caseDef{
		{name: "herd", perLevel: true, run: caseHerd,
			proves: "N transactions claiming one key together, over many keys: exactly one acquires and runs the mutation, every other replays its result byte for byte, one row per key; only retryable errors, and they resolve on retry (catches read-then-insert)"},
		{name: "wait-then-commit", perLevel: true, run: caseWaitCommit,
			proves: "a claimant blocks on an uncommitted claim; when the holder commits it replays the holder's result (or, at snapshot levels, gets a retryable error whose retry replays) and its own transaction still commits (catches claims outside the caller's transaction and read-then-insert)"},
		{name: "wait-then-rollback", perLevel: true, run: caseWaitRollback,
			proves: "a claimant blocks on an uncommitted claim; when the holder rolls back it acquires (catches claims committed outside the caller's transaction)"},
		{name: "snapshot", perLevel: true, levels: snapshotLevels, run: caseSnapshot,
			notPipelined: "the claim is sent with BEGIN, so no statement of the transaction takes its snapshot before the claim",
			proves:       "a transaction whose snapshot predates another's committed claim gets a retryable error (or the committed result), never an acquisition or an empty replay; the retry replays (catches read-then-insert at REPEATABLE READ)"},
		{name: "no-poisoning", perLevel: true, run: caseNoPoisoning,
			notPipelined: "the claim is sent with BEGIN and a replay ends the transaction: nothing is written before it or after it",
			firstOnly:    "a claim-at-commit transaction rolls back after a conflicting Record, so nothing after it has to commit; a Record whose conflict poisons the transaction fails its own read-back in the herd",
			proves:       "claiming an existing key leaves the caller's transaction usable: a row written before the claim and one after it both commit (catches a plain INSERT without a savepoint on PostgreSQL)"},
		{name: "atomicity", run: caseAtomicity,
			proves: "a claim rolled back after the claim, after the business write or after Complete leaves nothing behind and the key can be acquired again; committed, claim and business row both survive (catches claims in a separate transaction)"},
		{name: "prior-read", perLevel: true, run: casePriorRead,
			notPipelined: "the claim is sent with BEGIN: nothing is read before it",
			proves:       "transactions that read before claiming (16 pooled connections racing on shared keys) get correct outcomes and no lock-timeout or BUSY errors (catches non-locking read-back on MySQL REPEATABLE READ, deferred SQLite transactions)"},
		{name: "three-waiter-rollback", perLevel: true, run: caseThreeWaiter,
			proves: "the holder rolls back while two claimants wait: exactly one acquires, the other replays its result (after a retry where the database reports a deadlock); no attempt lost or duplicated"},
		{name: "delete-race", perLevel: true, run: caseDeleteRace,
			proves: "claimants race on expired entries while a sweeper deletes them in a tight loop: each key is acquired exactly once, never replayed from the expired or a vanished entry"},
		{name: "in-progress", run: caseInProgress,
			proves: "a claimant whose lock wait is bounded at 0.5 s gets ErrInProgress from the bound (not its 10 s hang guard) while the holder stays open (on SQLite: BEGIN gives up within the bound), and so does a claim (at commit: a Record) bounded by ClaimRequest.LockWait where the ledger bounds its claims (ledger.Store on PostgreSQL, or a BoundsLockWait reporting true); the holder then commits and a retry replays"},
		{name: "identity-isolation", run: caseIdentity,
			proves: "the same key from another caller, for another method or for an HTTP route is independent; with another request fingerprint it is ErrKeyReused, never a replay"},
		{name: "expiry", perLevel: true, run: caseExpiry,
			proves: "an expired entry is taken over by exactly one of 16 concurrent claimants, and nobody replays the expired result (catches an unconditional re-acquire)"},
		{name: "replay-fidelity", run: caseFidelity,
			proves: "stored bytes, code and type come back exactly, for empty, binary and maximum-size results, to concurrent replayers; one byte over the limit is refused with ErrInvalid and nothing is stored"},
		{name: "faults", run: caseFaults,
			proves: "a claimant's connection killed mid-transaction, or its context cancelled between claim and Complete (or while waiting), leaves nothing half-written and no connection in use; the key can be acquired again"},
		{name: "sweep-under-load", run: caseSweepUnderLoad,
			proves: "Sweep running in a loop during a herd deletes only expired entries: every live entry, completed or in flight, survives"},
		{name: "window-stale-key-refused", run: caseWindowStale,
			proves: "a UUIDv7 key born before the window (retention minus clock skew) is refused with ledger.ErrKeyExpired by Claim, Record and the pipelined forms the ledger has, nothing written; a key whose entry committed is refused once the clock passes the window, to racing claimants, past the entry's retention and after a sweep: never acquired again (catches a ledger that runs an expired key again)"},
		{name: "window-resolve-stale-key", run: caseWindowResolve,
			proves: "Lookup of a key born before the window answers ledger.ErrKeyExpired, never ErrNotFound (which tells a caller that running the call again is safe): for a key never seen, and for a committed key past the window, past its retention and after a sweep deleted its entry"},
		{name: "window-future-key-refused", run: caseWindowFuture,
			proves: "a UUIDv7 key born more than the clock skew ahead of the ledger's clock is refused with ledger.ErrInvalid by every form and by Lookup, nothing written; one born within the skew is accepted and replayed"},
		{name: "window-unknown-birth-policy", run: caseWindowUnknownBirth,
			proves: "a key without a readable birth is accepted and replayed inside the retention and, as documented, taken over past it; sent with a first-sent time (Identity.WithFirstSent) it has a birth that is part of its identity (another first-sent time is another operation) and is refused with ledger.ErrKeyExpired past the window, by every form and by Lookup"},
		{name: "window-partition-drop-under-claims", run: caseWindowPartitionDrop,
			proves: "on a table partitioned by the key's birth: claimants (every form) on keys born on both sides of a bucket boundary, and on fresh keys, while an injected clock crosses the keys' window edges and the lower bucket's drop time and Sweep creates and drops partitions in a loop: at most one effect per key, every answer an acquisition, a replay of the committed result or ErrKeyExpired (after the key's edge only), no commit lost but with its dropped bucket, and afterwards every key refused (skipped on a table that is not partitioned)"},
	}
}

// snapshotLevels keeps REPEATABLE READ and SERIALIZABLE.
func snapshotLevels(in []sql.IsolationLevel) ([]sql.IsolationLevel, string) {
	var out []sql.IsolationLevel
	for _, l := range in {
		if l == sql.LevelRepeatableRead || l == sql.LevelSerializable || l == sql.LevelSnapshot {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		return nil, "the target offers no snapshot isolation level (REPEATABLE READ, SNAPSHOT or SERIALIZABLE)"
	}
	return out, ""
}

// snapshotLevel reports whether a waiter at l may see a retryable error
// instead of the winner's result.
func snapshotLevel(l sql.IsolationLevel) bool {
	return l == sql.LevelRepeatableRead || l == sql.LevelSerializable || l == sql.LevelSnapshot
}
