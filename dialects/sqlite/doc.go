// Package sqlite is the ledger dialect for SQLite 3.35 or later. Create
// one with [New]; open the database with [DSN].
//
// It imports no driver, so it never forces cgo on anyone: use
// mattn/go-sqlite3 (cgo) or modernc.org/sqlite (pure Go); the tests and the
// conformance suite run through both. Errors are classified by their
// result code, read from mattn/go-sqlite3's sqlite3.Error (fields Code and
// ExtendedCode) or from any error with a Code() int method
// (modernc.org/sqlite).
//
// SQLite allows one writer at a time. A deferred transaction that has read
// before it writes cannot wait for the writer: it fails at once with
// SQLITE_BUSY or SQLITE_BUSY_SNAPSHOT. Open the database with [DSN], which
// sets WAL, a busy timeout and immediate transactions on every pooled
// connection, so that a transaction takes the write lock when it begins and
// the busy timeout does the waiting.
package sqlite
