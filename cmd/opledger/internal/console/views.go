package console

import (
	"context"
	"time"

	"github.com/opledger/opledger/outbox"
)

// Backend reads the ledger and the outbox for the pages and acts on dead
// messages. The command implements it over its database with the queries
// of opledger stats, inspect and relay --dead; every read is bounded (an
// index range, a LIMIT, or the database's own estimate), so that a page
// costs the same on a ledger of ten million entries as on one of ten.
type Backend interface {
	// Ledger reads the overview page's figures at now.
	Ledger(ctx context.Context, now time.Time) (LedgerView, error)
	// Entry reads the entry whose id is id; nil when there is none.
	Entry(ctx context.Context, id [32]byte, now time.Time) (*Entry, error)
	// Outbox reads the outbox page's figures at now.
	Outbox(ctx context.Context, now time.Time) (OutboxView, error)
	// RetryDead and DiscardDead act on one dead message, as
	// outbox.Outbox's methods of the same names.
	RetryDead(ctx context.Context, id string) (outbox.DeadMessage, error)
	DiscardDead(ctx context.Context, id string) (outbox.DeadMessage, error)
}

// Count is a number of rows and how it was had.
type Count struct {
	// N is the number (a lower bound when AtLeast).
	N int64
	// AtLeast says that counting stopped at N (the page's bound).
	AtLeast bool
	// Estimated says N is the database's estimate, not a count.
	Estimated bool
	// Source names where N comes from, for the page.
	Source string
}

// LedgerView is the overview page.
type LedgerView struct {
	Database, Table string
	MeasuredAt      time.Time
	// Entries is every entry of the table.
	Entries Count
	// Expired counts the entries past their expiry, which the next sweep
	// deletes; OldestExpired is the earliest expiry among them (zero when
	// none): how far the sweep is behind.
	Expired       Count
	OldestExpired time.Time
	// Pending is the live entries committed without a result among the
	// oldest live entries (PendingScanned of them; all live entries when
	// PendingAll).
	Pending        int64
	PendingScanned int64
	PendingAll     bool
	// OldestPending lists the oldest of them, oldest first.
	OldestPending []EntryRow
	// Growth is the entries claimed in GrowthWindow before the newest
	// entry's claim.
	Growth       Count
	GrowthWindow time.Duration
	// Size is the table's and its indexes' bytes; SizeUnavailable says
	// why they are missing.
	TableBytes, IndexBytes int64
	SizeEstimated          bool
	SizeUnavailable        string
	// Sessions are the database's sessions holding open transactions that
	// wrote the ledger, oldest first; SessionsSource names the view read,
	// SessionsUnavailable why there are none to show.
	Sessions            []Session
	SessionsSource      string
	SessionsUnavailable string
	// The window: the retention and clock skew given to the command (the
	// servers' values), and the birth before which a key is refused.
	Retention, ClockSkew time.Duration
	RefusedBornBefore    time.Time
	// Partitions are the ledger's partitions, once partitioned retention
	// exists; PartitionsNote says what the page knows of them.
	Partitions     []Partition
	PartitionsNote string
	// Took is how long the page's queries took.
	Took time.Duration
}

// BytesPerEntry is the table's and indexes' bytes over the entries.
func (v LedgerView) BytesPerEntry() float64 {
	if v.Entries.N == 0 {
		return 0
	}
	return float64(v.TableBytes+v.IndexBytes) / float64(v.Entries.N)
}

// ClaimsPerMinute is Growth over GrowthWindow.
func (v LedgerView) ClaimsPerMinute() float64 {
	if v.GrowthWindow <= 0 {
		return 0
	}
	return float64(v.Growth.N) / v.GrowthWindow.Minutes()
}

// BytesPerDay is the growth in bytes a day at ClaimsPerMinute, before the
// sweep deletes anything.
func (v LedgerView) BytesPerDay() int64 {
	return int64(v.ClaimsPerMinute() * 60 * 24 * v.BytesPerEntry())
}

// Window is the retention minus the clock skew.
func (v LedgerView) Window() time.Duration { return v.Retention - v.ClockSkew }

// Partition is one partition of a partitioned ledger.
type Partition struct {
	Name string
	// Bound is the database's own statement of the keys' births it
	// holds (PostgreSQL: FOR VALUES FROM (…) TO (…), or DEFAULT).
	Bound   string
	Entries Count
	Bytes   int64
}

// Session is a database session holding an open transaction.
type Session struct {
	ID          string
	User        string
	Application string
	State       string
	// Open is how long its transaction has been open.
	Open time.Duration
	// Waiting names what it waits for ("" when it runs or idles).
	Waiting string
	// Detail is more of what the database says of it.
	Detail string
}

// EntryRow is one ledger entry in a list.
type EntryRow struct {
	ID             string // hex
	Caller, Method string
	State          string
	Created        time.Time
	Expires        time.Time
	Result         string
}

// Entry is one ledger entry's record.
type Entry struct {
	EntryRow
	// Born is the key's birth (zero when the key carries none).
	Born time.Time
	// Completed is when its result was stored (zero when pending).
	Completed time.Time
	// Code, ResponseType and ResponseBytes describe the stored result;
	// ResponsePreview is its first bytes.
	Code            int64
	ResponseType    string
	ResponseBytes   int64
	ResponsePreview []byte
}

// OutboxView is the outbox page.
type OutboxView struct {
	Table string
	// Unavailable says why the outbox cannot be read (no such table).
	Unavailable string
	// Messages counts the messages in the outbox (waiting and dead).
	Messages Count
	// Keys are the partition keys of the oldest KeysScanned messages (all
	// of them when KeysAll), the oldest first.
	Keys        []KeyRow
	KeysScanned int64
	KeysAll     bool
	// Dead are the dead messages, oldest first; DeadMore says there are
	// more than listed.
	Dead     []outbox.DeadMessage
	DeadMore bool
	Took     time.Duration
}

// KeyRow is one partition key's messages in the outbox.
type KeyRow struct {
	Key           string
	Waiting, Dead int64
	Oldest        time.Time
}
