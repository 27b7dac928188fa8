package conformance

import (
	"strings"
	"testing"

	"github.com/opledger/opledger/dialects/postgres"
)

// TestScratchSQLBlocks: a migration's StatementBegin/StatementEnd block (a
// PostgreSQL DO block, whose body has semicolons at the ends of lines) is
// one statement, so that the scratch set-up runs it without goose and its
// session lock, which does not survive a pooler in transaction mode.
func TestScratchSQLBlocks(t *testing.T) {
	up, down, err := scratchSQL(postgres.New(), "opl_scratch")
	if err != nil {
		t.Fatal(err)
	}
	if up == nil || down == nil {
		t.Fatal("the PostgreSQL migrations fell back to goose")
	}
	blocks := 0
	for _, stmt := range append(append([]string(nil), up...), down...) {
		if strings.Contains(stmt, "+goose") {
			t.Errorf("an annotation was left in a statement:\n%s", stmt)
		}
		if strings.HasPrefix(stmt, "DO $opledger$") {
			blocks++
			if !strings.HasSuffix(stmt, "$opledger$;") || !strings.Contains(stmt, "\nEND\n") {
				t.Errorf("a DO block was split:\n%s", stmt)
			}
		}
	}
	if blocks < 2 {
		t.Errorf("found %d DO blocks, want the partitioned migration's Up and Down", blocks)
	}
}
