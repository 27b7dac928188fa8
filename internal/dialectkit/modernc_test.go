package dialectkit_test

// The pure-Go SQLite driver (driver name "sqlite"): linked here, it adds
// the target "sqlite/modernc" to testdb.Targets, so that every SQLite test
// of this package runs through both drivers.
import _ "modernc.org/sqlite"
