package ledger_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/opledger/opledger/internal/keybirth"
	"github.com/opledger/opledger/internal/migrationfs"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
)

// docSQL returns the fenced sql block that follows the HTML comment
// marker in docs/operations.md.
func docSQL(t *testing.T, marker string) string {
	t.Helper()
	b, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "<!-- "+marker+" -->")
	if i < 0 {
		t.Fatalf("docs/operations.md has no %s block", marker)
	}
	s = s[i:]
	start := strings.Index(s, "```sql\n")
	end := strings.Index(s[start+7:], "```")
	if start < 0 || end < 0 {
		t.Fatalf("docs/operations.md: no sql block after %s", marker)
	}
	return s[start+7 : start+7+end]
}

// unpartition turns the env's (new, partitioned) table back into the
// layout of a table created before migration 00005, with 00005's Down.
func unpartition(t testing.TB, e *env) {
	t.Helper()
	files, err := migrationfs.Files(e.Dialect, e.Table)
	if err != nil {
		t.Fatal(err)
	}
	b, err := fs.ReadFile(files, "00005_operations_partitioned.sql")
	if err != nil {
		t.Fatal(err)
	}
	down := string(b)[strings.Index(string(b), "-- +goose Down"):]
	for _, stmt := range sqlStatements(down) {
		if _, err := e.DB.Exec(stmt); err != nil {
			t.Fatalf("00005 down: %v\n%s", err, stmt)
		}
	}
	if testdb.Partitioned(t, e.DB, e.Dialect, e.Table) {
		t.Fatal("still partitioned after 00005's down")
	}
}

// sqlStatements splits goose-annotated SQL into statements: a
// StatementBegin/End block is one, any other statement ends with a
// semicolon at the end of a line.
func sqlStatements(src string) []string {
	var out []string
	var cur strings.Builder
	block := false
	for _, line := range strings.Split(src, "\n") {
		trim := strings.TrimSpace(line)
		switch {
		case trim == "-- +goose StatementBegin":
			block = true
			continue
		case trim == "-- +goose StatementEnd":
			block = false
			out = append(out, cur.String())
			cur.Reset()
			continue
		case strings.HasPrefix(trim, "--") || trim == "":
			continue
		}
		cur.WriteString(line + "\n")
		if !block && strings.HasSuffix(trim, ";") {
			out = append(out, cur.String())
			cur.Reset()
		}
	}
	return out
}

// TestMovePartitionedDocumented runs docs/operations.md's steps that move
// an existing table to the partitioned layout, on a table of the old
// layout holding entries of keys with and without a birth: afterwards the
// table is partitioned by born_at, both entries replay, a new key is
// acquired, a sweep creates and drops partitions without an error, and
// no table of the move is left. MySQL and MariaDB run both of their
// steps (in place, and by copy), one after the other; TiDB, which cannot
// change a clustered primary key, the copy alone.
func TestMovePartitionedDocumented(t *testing.T) {
	t.Parallel()
	forEachTarget(t, 4, func(t *testing.T, e *env) {
		markers := []string{"partition-move-postgres"}
		switch {
		case testdb.TiDB(e.Dialect):
			markers = []string{"partition-move-copy"}
		case e.Dialect.Name() != "postgres":
			markers = []string{"partition-move-mysql", "partition-move-copy"}
		}
		for _, marker := range markers {
			moveDocumented(t, e, marker)
		}
	}, "postgres", "mysql")
}

// moveDocumented turns e's table back into the old layout, claims two
// keys, runs the move of docs/operations.md's block marker, and checks
// the table after it (see TestMovePartitionedDocumented).
func moveDocumented(t *testing.T, e *env, marker string) {
	t.Helper()
	ctx := context.Background()
	unpartition(t, e)
	born := testdb.ID(t, "tenant-a", method, keybirth.New(time.Now()))
	random := testdb.ID(t, "tenant-a", method, "a-key-without-birth-"+marker)
	for _, id := range []ledger.Identity{born, random} {
		if c, err := claimOnce(t, e, e.l, id, fp("req"), "before the move"); err != nil || !c.Acquired() {
			t.Fatalf("%s: claim before the move: %+v %v", marker, c, err)
		}
	}
	move := strings.ReplaceAll(docSQL(t, marker), "opledger_operations", e.Table)
	conn, err := e.DB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stmts := []string{move} // one statement (MySQL's in place) or one simple query of several (PostgreSQL's, BEGIN … COMMIT)
	if marker == "partition-move-copy" {
		stmts = sqlStatements(move) // the driver runs one statement at a time
	}
	for _, stmt := range stmts {
		if _, err = conn.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("the documented move (%s): %v\n%s", marker, err, stmt)
		}
	}
	if !testdb.Partitioned(t, e.DB, e.Dialect, e.Table) {
		t.Fatalf("%s: not partitioned after the documented move", marker)
	}
	for _, id := range []ledger.Identity{born, random} {
		c, err := claimOnce(t, e, e.l, id, fp("req"), "after the move")
		if err != nil || c.Outcome != ledger.Replay || string(c.Result.Response) != "before the move" {
			t.Fatalf("%s: claim after the move: %+v %v; want a replay of the entry from before", marker, c, err)
		}
	}
	fresh := testdb.ID(t, "tenant-a", method, keybirth.New(time.Now()))
	if c, err := claimOnce(t, e, e.l, fresh, fp("req"), "new"); err != nil || !c.Acquired() {
		t.Fatalf("%s: a new key after the move: %+v %v", marker, c, err)
	}
	if _, err := e.l.Sweep(ctx, e.DB, 100); err != nil && !errors.Is(err, ledger.ErrInProgress) {
		t.Fatalf("%s: sweep after the move: %v", marker, err)
	}
	for _, left := range []string{"_moving", "_unpartitioned"} {
		if tableExists(t, e, e.Table+left) {
			t.Errorf("%s: table %s%s left after the move", marker, e.Table, left)
		}
	}
	t.Logf("%s: moved by docs/operations.md's %s steps; %d partitions", e.Name, marker, len(testdb.Partitions(t, e.DB, e.Dialect, e.Table)))
}

// tableExists reports whether a table named name exists in e's schema.
func tableExists(t *testing.T, e *env, name string) bool {
	t.Helper()
	q := "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?"
	if e.Dialect.Name() == "postgres" {
		q = "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = $1"
	}
	var n int
	if err := e.DB.QueryRow(q, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}
