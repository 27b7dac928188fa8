package dialectkit

import "github.com/opledger/opledger/dialects"

// Observed is implemented by dialects that name their database and their
// errors as OpenTelemetry's database semantic conventions do: the
// ledger's and txmiddleware's metrics and spans carry them as
// db.system.name and db.response.status_code.
//
// It is optional: [SystemNameOf] and [StatusCodeOf] answer for any
// dialect.
type Observed interface {
	// SystemName returns the database's db.system.name: "postgresql",
	// "mysql", "sqlite", ….
	SystemName() string
	// StatusCode returns err's db.response.status_code: PostgreSQL's
	// SQLSTATE, MySQL's error number, SQLite's extended result code, in
	// decimal where it is a number. It looks through wrapped errors and
	// returns "" when err carries none.
	StatusCode(err error) string
}

// SystemNameOf returns d's db.system.name when d implements [Observed],
// else "other_sql", the semantic conventions' name for an SQL database
// they do not list.
func SystemNameOf(d dialects.Dialect) string {
	if o, ok := d.(Observed); ok {
		if n := o.SystemName(); n != "" {
			return n
		}
	}
	return "other_sql"
}

// StatusCodeOf returns err's db.response.status_code when d implements
// [Observed], else "".
func StatusCodeOf(d dialects.Dialect, err error) string {
	if o, ok := d.(Observed); ok && err != nil {
		return o.StatusCode(err)
	}
	return ""
}
