package dialectkit_test

import (
	"context"
	"database/sql"
	"reflect"
	"strings"
	"testing"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/mysqldialect"
	"github.com/opledger/opledger/internal/pgdialect"
	"github.com/opledger/opledger/internal/sqlitedialect"
	"github.com/opledger/opledger/internal/testkit/testdb"
)

// bare is a dialect with no optional interface.
type bare struct{}

func (bare) Name() string                    { return "bare" }
func (bare) QuoteIdent(s string) string      { return `"` + s + `"` }
func (bare) Placeholder(int) string          { return "?" }
func (bare) Queries(string) dialects.Queries { return dialects.Queries{} }
func (bare) Classify(error) dialects.Class   { return dialects.ClassOther }

func TestPlaceholder(t *testing.T) {
	cases := []struct {
		d    dialects.Dialect
		want []string // for n = 1, 2, 10
	}{
		{pgdialect.New(), []string{"$1", "$2", "$10"}},
		{mysqldialect.New(), []string{"?", "?", "?"}},
		{sqlitedialect.New(), []string{"?", "?", "?"}},
	}
	for _, c := range cases {
		for i, n := range []int{1, 2, 10} {
			if got := c.d.Placeholder(n); got != c.want[i] {
				t.Errorf("%s: Placeholder(%d) = %q, want %q", c.d.Name(), n, got, c.want[i])
			}
		}
		// The dialect's own queries use its placeholders: the insert has six.
		ins := c.d.Queries("ops").Insert
		for n := 1; n <= 6; n++ {
			if !strings.Contains(ins, c.d.Placeholder(n)) {
				t.Errorf("%s: insert %q has no placeholder %d", c.d.Name(), ins, n)
			}
		}
		if c.d.Placeholder(1) == "?" && strings.Contains(ins, "$") {
			t.Errorf("%s: insert %q mixes placeholder styles", c.d.Name(), ins)
		}
	}
}

func TestTraits(t *testing.T) {
	rc, rr, ser := sql.LevelReadCommitted, sql.LevelRepeatableRead, sql.LevelSerializable
	cases := []struct {
		d    dialects.Dialect
		want dialectkit.Traits
	}{
		{pgdialect.New(), dialectkit.Traits{IsolationLevels: []sql.IsolationLevel{rc, rr, ser}}},
		{mysqldialect.New(), dialectkit.Traits{IsolationLevels: []sql.IsolationLevel{rr, rc}}},
		{sqlitedialect.New(), dialectkit.Traits{IsolationLevels: []sql.IsolationLevel{sql.LevelDefault}, SerialWriters: true}},
		{bare{}, dialectkit.Traits{IsolationLevels: []sql.IsolationLevel{sql.LevelDefault}}},
	}
	for _, c := range cases {
		if got := dialectkit.TraitsOf(c.d); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: TraitsOf = %+v, want %+v", c.d.Name(), got, c.want)
		}
	}
	// The kit's dialects describe themselves; SQLite's own Traits leaves
	// the levels empty (the default only).
	for _, d := range []dialects.Dialect{pgdialect.New(), mysqldialect.New(), sqlitedialect.New()} {
		if _, ok := d.(dialectkit.Described); !ok {
			t.Errorf("%s does not implement dialectkit.Described", d.Name())
		}
	}
	if tr := sqlitedialect.New().Traits(); len(tr.IsolationLevels) != 0 || !tr.SerialWriters {
		t.Errorf("sqlite Traits() = %+v", tr)
	}
}

// TestOptionalInterfaces pins which optional interfaces each of the kit's
// dialects implements: SQLite shows no sessions.
func TestOptionalInterfaces(t *testing.T) {
	for _, c := range []struct {
		d        dialects.Dialect
		sessions bool
	}{{pgdialect.New(), true}, {mysqldialect.New(), true}, {sqlitedialect.New(), false}} {
		if _, ok := c.d.(dialects.LockWaiter); !ok {
			t.Errorf("%s is not a LockWaiter", c.d.Name())
		}
		if _, ok := c.d.(dialects.Schema); !ok {
			t.Errorf("%s is not a Schema", c.d.Name())
		}
		if _, ok := c.d.(dialectkit.Sessions); ok != c.sessions {
			t.Errorf("%s implements Sessions: %v, want %v", c.d.Name(), ok, c.sessions)
		}
	}
	var d dialects.Dialect = bare{}
	if _, ok := d.(dialects.LockWaiter); ok {
		t.Error("bare is a LockWaiter")
	}
}

// TestTraitsLevelsBegin: every isolation level a target's traits offer
// begins a transaction there, and on PostgreSQL it is the level in force.
func TestTraitsLevelsBegin(t *testing.T) {
	t.Parallel()
	shows := map[sql.IsolationLevel]string{
		sql.LevelReadCommitted: "read committed", sql.LevelRepeatableRead: "repeatable read", sql.LevelSerializable: "serializable",
	}
	testdb.ForEachTarget(t, 2, func(t *testing.T, tg testdb.Target) {
		db := tg.Open(t, 2)
		ctx := context.Background()
		for _, level := range dialectkit.TraitsOf(tg.Dialect).IsolationLevels {
			tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: level})
			if err != nil {
				t.Fatalf("%s: %v", level, err)
			}
			if tg.Family() == "postgres" {
				var got string
				if err := tx.QueryRowContext(ctx, "SHOW transaction_isolation").Scan(&got); err != nil || got != shows[level] {
					t.Errorf("%s: transaction_isolation %q %v", level, got, err)
				}
			} else if _, err := tx.ExecContext(ctx, "SELECT 1"); err != nil {
				t.Errorf("%s: %v", level, err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatalf("%s: commit: %v", level, err)
			}
		}
	})
}

// TestHourOfBirth: the hour of births that holds a birth, as literals;
// the partition of unknown births for 0; births before 1970 floor too.
func TestHourOfBirth(t *testing.T) {
	const h = int64(3600000000)
	for born, want := range map[int64]string{
		0:       " AND born_at = 0",
		1:       " AND born_at >= 0 AND born_at < 3600000000",
		h - 1:   " AND born_at >= 0 AND born_at < 3600000000",
		h:       " AND born_at >= 3600000000 AND born_at < 7200000000",
		5*h + 7: " AND born_at >= 18000000000 AND born_at < 21600000000",
		-1:      " AND born_at >= -3600000000 AND born_at < 0",
		-h:      " AND born_at >= -3600000000 AND born_at < 0",
	} {
		if got := dialectkit.HourOfBirth(born); got != want {
			t.Errorf("HourOfBirth(%d) = %q, want %q", born, got, want)
		}
	}
}
