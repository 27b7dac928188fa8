// Package migrations creates and removes the ledger's table, and the
// outbox's beside it ("<table>_outbox", the second migration of each
// dialect's set, and its dead-message state, the third; see package
// outbox), with goose. Create a [Migrator] with [New] and run its
// [Migrator.Up].
//
// The SQL files belong to each dialect (see dialects.Schema): the kit's
// dialects embed theirs, and a dialect written elsewhere brings its own.
// Their table name is a template parameter, so one set of files serves any
// table name the ledger is configured with. They run through goose's
// Provider with the kit's own version table (never the application's
// goose_db_version), without goose's global registry, and under the
// dialect's session lock (PostgreSQL: an advisory lock with the kit's own
// id; MySQL, MariaDB and TiDB: a named lock; SQLite: the database's write
// lock, kept for the whole migration), taken before goose reads or
// creates anything, on the session goose then runs on. Users of other
// migration tools can [Export] the rendered files instead.
package migrations
