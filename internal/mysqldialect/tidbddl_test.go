package mysqldialect_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/opledger/opledger/internal/migrationfs"
	"github.com/opledger/opledger/internal/mysqldialect"
	"github.com/opledger/opledger/internal/testkit/testdb"
)

// TiDB's documented DDL restrictions (TiDB v8.5), which every DDL
// statement of the MySQL dialect is held to by TestTiDBDDLRules. CI has no
// TiDB: the rules are what TiDB's documentation says it refuses, and the
// two errors TiDB v8.5.3 gave the outbox's dead-state migration when it
// was one ALTER TABLE each way. A rule's text is quoted from the page
// named after it.
const (
	// https://docs.pingcap.com/tidb/v8.5/mysql-compatibility/#ddl-operations
	docSameObject = `MySQL Compatibility, DDL operations: "When using a single ALTER TABLE statement to alter ` +
		`multiple schema objects (such as columns or indexes) of a table, specifying the same object in ` +
		`multiple changes is not supported. For example, if you execute the ALTER TABLE t1 MODIFY COLUMN c1 ` +
		`INT, DROP COLUMN c1 command, the Unsupported operate same column/index error is output."`
	// https://docs.pingcap.com/tidb/v8.5/sql-statement-alter-table/#mysql-compatibility
	docBeforeExecution = `ALTER TABLE, MySQL compatibility: "When altering multiple schema objects in a single ` +
		`ALTER TABLE statement: Modifying the same object in multiple changes is not supported. TiDB ` +
		`validates statements according to the table schema before execution. For example, an error returns ` +
		`when ALTER TABLE ADD INDEX i(b), DROP INDEX i; is executed because the index i does not exist in ` +
		`the table. For an ALTER TABLE statement, the order of execution in TiDB is one change after ` +
		`another from left to right, which is incompatible with MySQL in some cases."`
	// https://docs.pingcap.com/tidb/v8.5/sql-statement-drop-column/#mysql-compatibility
	docDropColumn = `DROP COLUMN, MySQL compatibility: "Dropping primary key columns or columns covered by the ` +
		`composite index is not supported." (TiDB v8.5.3: Error 8200 "can't drop column … with composite ` +
		`index covered or Primary Key covered now")`
	// https://docs.pingcap.com/tidb/v8.5/sql-statement-add-column/#mysql-compatibility
	docAddColumn = `ADD COLUMN, MySQL compatibility: "Adding a new column and setting it to the PRIMARY KEY ` +
		`is not supported. Adding a new column and setting it to AUTO_INCREMENT is not supported."`
	// https://docs.pingcap.com/tidb/v8.5/mysql-compatibility/#unsupported-features
	docUnsupported = `MySQL Compatibility, Unsupported features: "FULLTEXT syntax and indexes", "SPATIAL (also ` +
		`known as GIS/GEOMETRY) functions, data types and indexes", "Descending Index", "CREATE TABLE ` +
		`tblName AS SELECT stmt syntax"`
	// https://docs.pingcap.com/tidb/v8.5/mysql-compatibility/#unsupported-features
	docCharsets = `MySQL Compatibility, Unsupported features: "Character sets other than ascii, latin1, ` +
		`binary, utf8, utf8mb4, and gbk."`
	// https://docs.pingcap.com/tidb/v8.5/mysql-compatibility/#ddl-operations
	docClustered = `MySQL Compatibility, DDL operations: "Adding/Dropping the primary key of the CLUSTERED ` +
		`type is unsupported."`
	// https://docs.pingcap.com/tidb/v8.5/mysql-compatibility/#ddl-operations and
	// https://docs.pingcap.com/tidb/v8.5/sql-statement-alter-table/#mysql-compatibility
	docTypeChange = `MySQL Compatibility, DDL operations: "TiDB does not support the changes of some data ` +
		`types using ALTER TABLE. For example, TiDB does not support the change from the DECIMAL type to ` +
		`the DATE type."; ALTER TABLE: "Changes of the Reorg-Data types on primary key columns are not ` +
		`supported." (a change other than widening an integer or lengthening a string of the same kind ` +
		`must be tried on TiDB first)`
	// https://docs.pingcap.com/tidb/v8.5/mysql-compatibility/#ddl-operations
	docTiDBOptions = `MySQL Compatibility, DDL operations: "It is not supported to modify multiple ` +
		`TiDB-specific schema objects using a single ALTER TABLE statement, such as TIFLASH REPLICA, ` +
		`SHARD_ROW_ID_BITS, and AUTO_ID_CACHE."`
)

// TestTiDBDDLRules holds the MySQL dialect's DDL to TiDB's documented
// restrictions: every migration, Up in order and then Down in reverse,
// against a model of the tables they build (so that, as in TiDB, each
// ALTER TABLE is checked against the table as it was before the
// statement), and every DDL statement written in the module's Go code
// that reaches a MySQL-family server (the test harness's and the
// conformance suite's business tables, the examples' tables, tests'
// scratch tables).
func TestTiDBDDLRules(t *testing.T) {
	t.Run("migrations", func(t *testing.T) {
		for _, d := range []mysqldialect.Dialect{mysqldialect.New(), mysqldialect.NewTiDB()} {
			fsys, err := migrationfs.Files(d, "opl_tidb_rules")
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range checkMigrations(t, fsys) {
				t.Errorf("%s: %s", d.Name(), f)
			}
		}
	})
	t.Run("go", func(t *testing.T) {
		stmts := goDDL(t, filepath.Join("..", ".."))
		if len(stmts) < 10 {
			t.Fatalf("found only %d DDL statements in the module's Go code: the scan is broken", len(stmts))
		}
		for _, s := range stmts {
			c := newDDLChecker()
			for _, f := range c.check(s.sql) {
				t.Errorf("%s: %s\n\t%s", s.pos, f, s.sql)
			}
		}
	})
}

// ddlCase is a statement the checker is held to: refused with a finding
// naming want, or accepted when want is "".
type ddlCase struct {
	name  string
	setup []string
	stmt  string
	want  string // a part of the finding; "" for none
}

// tidbAccepts are the cases the checker refuses although TiDB v8.5.3 runs
// the statement, and why the checker refuses them all the same
// (TestTiDBDDLRulesOnServer).
var tidbAccepts = map[string]string{
	"add a primary key": "TiDB adds it NONCLUSTERED, so the table differs from one created with the key " +
		"(CLUSTERED by default): create the table with its primary key instead",
	"fulltext": "TiDB parses a FULLTEXT key in CREATE TABLE and ignores it: the index does not exist " +
		`(MySQL Compatibility: "Different types of indexes (HASH|BTREE|RTREE|FULLTEXT) are not supported, ` +
		`and will be parsed and ignored when specified.")`,
	"descending index": "TiDB parses DESC and ignores it: the index is ascending",
	"narrowing": "TiDB rewrites the column (a reorg DDL, slow on a big table, failing on a value that does " +
		"not fit): a change of type is tried on TiDB before it goes into a migration",
	"int to string": "TiDB rewrites the column (a reorg DDL, slow on a big table): a change of type is tried " +
		"on TiDB before it goes into a migration",
}

const (
	ddlOutbox = "CREATE TABLE `ob` (seq BIGINT NOT NULL AUTO_INCREMENT, id BINARY(32) NOT NULL, " +
		"partition_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, PRIMARY KEY (seq), " +
		"UNIQUE KEY `ob_id_key` (id)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
	// The dead-state migration as it was: one ALTER TABLE each way.
	ddlOldUp = "ALTER TABLE `ob` ADD COLUMN attempts INT NOT NULL DEFAULT 0, ADD COLUMN last_error TEXT NULL, " +
		"ADD COLUMN dead_at BIGINT NULL, ADD INDEX `ob_dead_idx` (dead_at, partition_key)"
	ddlOldDown = "ALTER TABLE `ob` DROP INDEX `ob_dead_idx`, DROP COLUMN dead_at, DROP COLUMN last_error, DROP COLUMN attempts"
)

func ddlCases() []ddlCase {
	outbox, oldUp, oldDown := ddlOutbox, ddlOldUp, ddlOldDown
	return []ddlCase{
		{"the old Up", []string{outbox}, oldUp, "Error 1072"},
		{"the old Down", []string{outbox, "ALTER TABLE `ob` ADD COLUMN dead_at BIGINT NULL",
			"ALTER TABLE `ob` ADD INDEX `ob_dead_idx` (dead_at, partition_key)"}, oldDown, "Error 8200"},
		{"columns, then the index", []string{outbox, "ALTER TABLE `ob` ADD COLUMN dead_at BIGINT NULL, ADD COLUMN attempts INT NOT NULL DEFAULT 0"},
			"ALTER TABLE `ob` ADD INDEX `ob_dead_idx` (dead_at, partition_key)", ""},
		{"the index, then the columns", []string{outbox, "ALTER TABLE `ob` ADD COLUMN dead_at BIGINT NULL, ADD COLUMN attempts INT",
			"ALTER TABLE `ob` ADD INDEX `ob_dead_idx` (dead_at, partition_key)", "ALTER TABLE `ob` DROP INDEX `ob_dead_idx`"},
			"ALTER TABLE `ob` DROP COLUMN dead_at, DROP COLUMN attempts", ""},
		{"same column twice", []string{outbox}, "ALTER TABLE `ob` ADD COLUMN c1 INT, MODIFY COLUMN id BINARY(32) NOT NULL, DROP COLUMN c1", "same column"},
		{"modify and drop", []string{outbox, "ALTER TABLE `ob` ADD COLUMN c1 BIGINT"}, "ALTER TABLE `ob` MODIFY COLUMN c1 INT, DROP COLUMN c1", "same column"},
		{"after a new column", []string{outbox}, "ALTER TABLE `ob` ADD COLUMN a INT, ADD COLUMN b INT AFTER a", "same column"},
		{"add and drop an index", []string{outbox}, "ALTER TABLE `ob` ADD INDEX i (id), DROP INDEX i", "same index"},
		{"drop a composite index's column", []string{outbox, "CREATE INDEX `ob_k` ON `ob` (partition_key, id)"}, "ALTER TABLE `ob` DROP COLUMN partition_key", "Error 8200"},
		{"drop a primary key column", []string{outbox}, "ALTER TABLE `ob` DROP COLUMN seq", "Error 8200"},
		{"drop a single-column index's column", []string{outbox, "CREATE INDEX `ob_k` ON `ob` (partition_key)"}, "ALTER TABLE `ob` DROP COLUMN partition_key", ""},
		{"index on a missing column", []string{outbox}, "CREATE INDEX `ob_k` ON `ob` (nope)", "Error 1072"},
		{"drop a missing index", []string{outbox}, "ALTER TABLE `ob` DROP INDEX nope", "does not exist"},
		{"new primary key column", []string{outbox}, "ALTER TABLE `ob` ADD COLUMN k INT PRIMARY KEY", "PRIMARY KEY"},
		{"new auto-increment column", []string{outbox}, "ALTER TABLE `ob` ADD COLUMN k INT AUTO_INCREMENT", "AUTO_INCREMENT"},
		{"drop the primary key", []string{outbox}, "ALTER TABLE `ob` DROP PRIMARY KEY", "CLUSTERED"},
		{"add a primary key", []string{"CREATE TABLE t (a INT)"}, "ALTER TABLE t ADD PRIMARY KEY (a)", "CLUSTERED"},
		{"fulltext", nil, "CREATE TABLE t (a TEXT, FULLTEXT KEY f (a))", "FULLTEXT"},
		{"fulltext index", []string{outbox}, "CREATE FULLTEXT INDEX f ON `ob` (partition_key)", "FULLTEXT"},
		{"spatial type", nil, "CREATE TABLE t (g GEOMETRY NOT NULL)", "SPATIAL"},
		{"descending index", []string{outbox}, "ALTER TABLE `ob` ADD INDEX d (seq DESC)", "Descending"},
		{"charset", nil, "CREATE TABLE t (a VARCHAR(3) CHARACTER SET utf16)", "utf16"},
		{"table charset", nil, "CREATE TABLE t (a INT) DEFAULT CHARSET=ucs2", "ucs2"},
		{"create as select", []string{outbox}, "CREATE TABLE t AS SELECT * FROM `ob`", "AS SELECT"},
		{"narrowing", []string{outbox, "ALTER TABLE `ob` ADD COLUMN n BIGINT"}, "ALTER TABLE `ob` MODIFY COLUMN n INT", "data types"},
		{"int to string", []string{outbox, "ALTER TABLE `ob` ADD COLUMN n INT"}, "ALTER TABLE `ob` MODIFY COLUMN n VARCHAR(20)", "data types"},
		{"primary key type", []string{outbox}, "ALTER TABLE `ob` MODIFY COLUMN seq DECIMAL(30,0) NOT NULL", "data types"},
		{"widening", []string{outbox, "ALTER TABLE `ob` ADD COLUMN n INT, ADD COLUMN s VARCHAR(10)"},
			"ALTER TABLE `ob` MODIFY COLUMN n BIGINT", ""},
		{"lengthening", []string{outbox, "ALTER TABLE `ob` ADD COLUMN s VARCHAR(10)"}, "ALTER TABLE `ob` MODIFY COLUMN s VARCHAR(20) NULL", ""},
		{"two TiDB options", []string{"CREATE TABLE t (a INT)"}, "ALTER TABLE t SHARD_ROW_ID_BITS = 4, AUTO_ID_CACHE = 1", "TiDB-specific"},
		{"several columns at once", []string{outbox}, "ALTER TABLE `ob` ADD COLUMN a INT, ADD COLUMN b TEXT, ADD INDEX i (partition_key)", ""},
		{"not understood", []string{outbox}, "ALTER TABLE `ob` FROBNICATE", "not understood"},
	}
}

// TestTiDBDDLRulesCatch: the checker refuses what TiDB refuses, first of
// all the dead-state migration as it was until this test existed (one
// ALTER TABLE each way, which TiDB v8.5.3 answered with errors 1072 and
// 8200), and accepts the same changes written as TiDB takes them.
func TestTiDBDDLRulesCatch(t *testing.T) {
	for _, tc := range ddlCases() {
		t.Run(tc.name, func(t *testing.T) {
			c := newDDLChecker()
			for _, s := range tc.setup {
				if f := c.check(s); len(f) > 0 {
					t.Fatalf("set-up %q: %v", s, f)
				}
			}
			f := c.check(tc.stmt)
			switch {
			case tc.want == "" && len(f) > 0:
				t.Fatalf("%q refused: %v", tc.stmt, f)
			case tc.want != "" && !slices.ContainsFunc(f, func(s string) bool { return strings.Contains(s, tc.want) }):
				t.Fatalf("%q: findings %q, want one naming %q", tc.stmt, f, tc.want)
			}
		})
	}
	// The old migration file, as a whole, through the same path as the
	// shipped ones.
	old := "-- +goose Up\n" + ddlOutbox + ";\n" + ddlOldUp + ";\n-- +goose Down\n" + ddlOldDown + ";\nDROP TABLE `ob`;\n"
	f := checkMigrations(t, fstest.MapFS{"00001_old.sql": {Data: []byte(old)}})
	if len(f) != 2 || !strings.Contains(f[0], "Error 1072") || !strings.Contains(f[1], "Error 8200") {
		t.Fatalf("the old migration: %q, want its Up (1072) and its Down (8200) refused", f)
	}
}

// checkMigrations runs the Up sections of fsys's migrations in order and
// then their Down sections in reverse through one checker, and returns
// its findings, each naming its file and direction.
func checkMigrations(t *testing.T, fsys fs.FS) []string {
	t.Helper()
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("migrations: %v %v", names, err)
	}
	sort.Strings(names)
	type section struct{ file, dir, sql string }
	var ups, downs []section
	for _, n := range names {
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			t.Fatal(err)
		}
		up, down, err := gooseSections(string(b))
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		for _, s := range up {
			ups = append(ups, section{n, "Up", s})
		}
		var ds []section
		for _, s := range down {
			ds = append(ds, section{n, "Down", s})
		}
		downs = append(ds, downs...)
	}
	c := newDDLChecker()
	var out []string
	for _, s := range append(ups, downs...) {
		for _, f := range c.check(s.sql) {
			out = append(out, fmt.Sprintf("%s (%s): %s\n\t%s", s.file, s.dir, f, s.sql))
		}
	}
	if len(c.tables) != 0 {
		out = append(out, fmt.Sprintf("after every Down, tables are left: %v", c.tableNames()))
	}
	return out
}

// gooseSections splits a goose SQL file into the statements of its Up and
// Down sections, as goose does: at a semicolon that ends a line, outside
// StatementBegin/StatementEnd blocks, comment lines dropped.
func gooseSections(src string) (up, down []string, err error) {
	var cur *[]string
	var stmt strings.Builder
	block := false
	flush := func() {
		if s := strings.TrimSpace(stmt.String()); s != "" && cur != nil {
			*cur = append(*cur, strings.TrimSuffix(s, ";"))
		}
		stmt.Reset()
	}
	for _, line := range strings.Split(src, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "-- +goose Up"):
			flush()
			cur = &up
			continue
		case strings.HasPrefix(trimmed, "-- +goose Down"):
			flush()
			cur = &down
			continue
		case strings.HasPrefix(trimmed, "-- +goose StatementBegin"):
			block = true
			continue
		case strings.HasPrefix(trimmed, "-- +goose StatementEnd"):
			block = false
			flush()
			continue
		case strings.HasPrefix(trimmed, "-- +goose"):
			continue
		case trimmed == "" || strings.HasPrefix(trimmed, "--"):
			continue
		}
		if cur == nil {
			return nil, nil, fmt.Errorf("SQL before the first -- +goose Up: %q", line)
		}
		stmt.WriteString(line + "\n")
		if !block && strings.HasSuffix(trimmed, ";") {
			flush()
		}
	}
	flush()
	if block {
		return nil, nil, fmt.Errorf("a StatementBegin without its StatementEnd")
	}
	return up, down, nil
}

// goStatement is a DDL statement found in Go code.
type goStatement struct{ pos, sql string }

// goDDL returns the DDL statements (CREATE TABLE, CREATE INDEX, ALTER
// TABLE) that the module's Go files under root send: string literals, or
// concatenations and fmt.Sprintf formats of them, given to a database/sql
// Exec, Query or Prepare method (or listed in a []string, the form of a
// sequence of statements run in a loop), and testdb.ScratchTable's column
// lists. What is spliced in at run time (a quoted table name, %s) becomes
// the identifier `x`. The PostgreSQL and SQLite dialects' files and
// pgxledger's never reach a MySQL-family server, nor do statements in
// another database's syntax (otherSyntax);
// dynamicDDL lists the statements built at run time. A statement the
// checker cannot parse is reported: teach the checker, never skip it.
func goDDL(t *testing.T, root string) []goStatement {
	t.Helper()
	skipDirs := []string{"internal/pgdialect", "internal/sqlitedialect", "pgxledger", ".git", "testdata"}
	dbMethods := []string{"Exec", "ExecContext", "Query", "QueryContext", "QueryRow", "QueryRowContext", "Prepare", "PrepareContext"}
	var out []goStatement
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if e.IsDir() {
			if slices.Contains(skipDirs, rel) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || rel == "internal/mysqldialect/tidbddl_test.go" {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		found := func(n ast.Node, s string) {
			if !isDDL(s) {
				return
			}
			s = spliced(s)
			if u := strings.ToUpper(s); slices.ContainsFunc(otherSyntax, func(m string) bool { return strings.Contains(u, m) }) {
				return
			}
			pos := fmt.Sprintf("%s:%d", rel, fset.Position(n.Pos()).Line)
			if _, ok := dynamicDDL[rel]; ok {
				return
			}
			out = append(out, goStatement{pos: pos, sql: s})
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				switch {
				case slices.Contains(dbMethods, sel.Sel.Name):
					for _, a := range n.Args {
						for _, s := range stringsOf(a) {
							found(a, s)
						}
					}
				case sel.Sel.Name == "ScratchTable" && len(n.Args) > 0:
					a := n.Args[len(n.Args)-1]
					for _, s := range stringsOf(a) {
						found(a, "CREATE TABLE `x` "+s)
					}
				}
			case *ast.CompositeLit:
				if at, ok := n.Type.(*ast.ArrayType); ok {
					if id, ok := at.Elt.(*ast.Ident); ok && id.Name == "string" {
						for _, el := range n.Elts {
							for _, s := range stringsOf(el) {
								found(el, s)
							}
						}
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// otherSyntax marks statements in another database's syntax, which never
// reach a MySQL-family server (SQLite's and PostgreSQL's).
var otherSyntax = []string{"WITHOUT ROWID", " BYTEA", " CONCURRENTLY ", " TIMESTAMPTZ", " JSONB", " BIGSERIAL", " USING GIN", " USING GIST"}

// dynamicDDL are the files whose DDL is built at run time from parts the
// scan cannot see, and why that is fine.
var dynamicDDL = map[string]string{
	"internal/testkit/testdb/parallel.go": "ScratchTable's column list comes from its callers, whose literals the scan checks",
}

// stringsOf returns the string an expression spells (a literal, a
// concatenation, or a fmt.Sprintf format), if it spells one.
func stringsOf(e ast.Expr) []string {
	if c, ok := e.(*ast.CallExpr); ok {
		if sel, ok := c.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Sprintf" && len(c.Args) > 0 {
			return stringsOf(c.Args[0])
		}
		return nil
	}
	if s, ok := concat(e); ok {
		return []string{s}
	}
	return nil
}

// concat flattens a + chain with at least one string literal, putting
// `x` where an operand is not a literal.
func concat(e ast.Expr) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind == token.STRING {
			s, err := strconv.Unquote(e.Value)
			return s, err == nil
		}
	case *ast.ParenExpr:
		return concat(e.X)
	case *ast.BinaryExpr:
		if e.Op == token.ADD {
			l, lok := concat(e.X)
			r, rok := concat(e.Y)
			return l + r, lok || rok
		}
	}
	return "`x`", false
}

// spliced replaces fmt verbs with the identifier `x`.
func spliced(s string) string {
	r := strings.NewReplacer("%s", "`x`", "%d", "1", "%q", "`x`", "%v", "`x`")
	return r.Replace(s)
}

func isDDL(s string) bool {
	u := strings.ToUpper(strings.Join(strings.Fields(s), " "))
	for _, p := range []string{"CREATE TABLE ", "CREATE INDEX ", "CREATE UNIQUE INDEX ", "CREATE FULLTEXT ", "CREATE SPATIAL ", "ALTER TABLE "} {
		if strings.HasPrefix(u, p) {
			return true
		}
	}
	return false
}

// ddlChecker is a model of the tables that the statements it checks
// build, enough to apply TiDB's rules: each table's columns (with their
// types), indexes and primary key. A statement on a table the model does
// not know (Go code that alters a table created elsewhere) is held to the
// rules that need no model.
type ddlChecker struct {
	tables map[string]*ddlTable
}

type ddlTable struct {
	cols    map[string]string   // column -> its type, normalised
	indexes map[string][]string // index -> its columns
	primary []string
}

func newDDLChecker() *ddlChecker { return &ddlChecker{tables: map[string]*ddlTable{}} }

func (c *ddlChecker) tableNames() []string {
	var ns []string
	for n := range c.tables {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}

// check checks one statement against the model, applies it, and returns
// what TiDB's rules refuse in it.
func (c *ddlChecker) check(stmt string) (findings []string) {
	p := &ddlParser{toks: lexSQL(stmt)}
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(parseError); ok {
				findings = append(findings, "not understood by the checker ("+string(e)+"): teach it the statement")
				return
			}
			panic(r)
		}
	}()
	switch {
	case p.kws("CREATE", "TABLE"):
		return c.createTable(p)
	case p.kws("ALTER", "TABLE"):
		name := p.name()
		return c.alter(name, p.alterSpecs())
	case p.kws("CREATE", "INDEX"), p.kws("CREATE", "UNIQUE", "INDEX"):
		return c.createIndex(p, "")
	case p.kws("CREATE", "FULLTEXT", "INDEX"):
		return c.createIndex(p, "FULLTEXT")
	case p.kws("CREATE", "SPATIAL", "INDEX"):
		return c.createIndex(p, "SPATIAL")
	case p.kws("DROP", "TABLE"):
		p.kws("IF", "EXISTS")
		for {
			delete(c.tables, p.name())
			if !p.punct(",") {
				break
			}
		}
		p.end()
		return nil
	case p.kws("DROP", "INDEX"):
		idx := p.name()
		p.kw("ON")
		return c.alter(p.name(), []alterSpec{{op: "drop-index", index: idx}})
	case p.kw("SET"), p.kw("PREPARE"), p.kw("EXECUTE"), p.kw("DEALLOCATE"):
		// A session variable or a prepared statement: 00005 builds its
		// DDL (the partitioned table, made only when the table is empty)
		// as a string, which this model does not follow. TiDB runs it:
		// see the migrations' tests on TiDB.
		return nil
	}
	panic(parseError("statement " + p.peek().text))
}

func (c *ddlChecker) createTable(p *ddlParser) []string {
	p.kws("IF", "NOT", "EXISTS")
	name := p.name()
	if p.kw("AS") || p.kw("SELECT") || p.kw("LIKE") {
		return []string{"CREATE TABLE … AS SELECT (or LIKE): " + docUnsupported}
	}
	var findings []string
	tb := &ddlTable{cols: map[string]string{}, indexes: map[string][]string{}}
	p.expect("(")
	for {
		switch sp := p.tableElement(); sp.op {
		case "add-column":
			if _, dup := tb.cols[sp.col]; dup {
				findings = append(findings, "column "+sp.col+" twice")
			}
			findings = append(findings, columnRules(sp, false)...)
			tb.cols[sp.col] = sp.typ
			if sp.primary {
				tb.primary = []string{sp.col}
			}
			if sp.unique {
				tb.indexes[sp.col] = []string{sp.col}
			}
		case "add-index":
			findings = append(findings, indexRules(sp)...)
			for _, col := range sp.cols {
				if _, ok := tb.cols[col]; !ok {
					findings = append(findings, fmt.Sprintf("index %s on column %s, which the table does not have", sp.index, col))
				}
			}
			if sp.primaryKey {
				tb.primary = sp.cols
			} else {
				tb.indexes[sp.index] = sp.cols
			}
		case "other":
		}
		if !p.punct(",") {
			break
		}
	}
	p.expect(")")
	for _, o := range p.tableOptions() {
		findings = append(findings, o.findings...)
	}
	p.end()
	if _, exists := c.tables[name]; !exists {
		c.tables[name] = tb
	}
	return findings
}

func (c *ddlChecker) createIndex(p *ddlParser, kind string) []string {
	idx := p.name()
	p.kw("ON")
	table := p.name()
	sp := alterSpec{op: "add-index", index: idx, kind: kind}
	sp.cols, sp.desc = p.indexColumns()
	for p.kw("USING") || p.kw("COMMENT") || p.kw("VISIBLE") || p.kw("INVISIBLE") || p.kw("ALGORITHM") || p.kw("LOCK") {
		p.punct("=")
		if !p.atEnd() {
			p.next()
		}
	}
	p.end()
	return c.alter(table, []alterSpec{sp})
}

// alter checks one ALTER TABLE's changes, as TiDB does: each against the
// table as it was before the statement, and no object named by two of
// them; then applies them left to right.
func (c *ddlChecker) alter(table string, specs []alterSpec) []string {
	var findings []string
	add := func(format string, args ...any) { findings = append(findings, fmt.Sprintf(format, args...)) }
	tb := c.tables[table] // nil: a table the model does not know

	// TiDB's checkOperateSameColAndIdx (pkg/ddl/multi_schema_change.go):
	// columns added, dropped or modified, and indexes added, dropped or
	// altered, may each be named once; a column an added index covers, or
	// that an added column is placed AFTER, may not be one of them.
	changedCols, changedIdx, addedCols := map[string]bool{}, map[string]bool{}, map[string]bool{}
	claim := func(set map[string]bool, what, name string, take bool) {
		if set[name] {
			add("the same %s %s in two changes of one ALTER TABLE (TiDB: Unsupported operate same %s): %s", what, name, what, docSameObject)
		}
		if take {
			set[name] = true
		}
	}
	for _, sp := range specs {
		switch sp.op {
		case "add-column", "drop-column", "modify-column":
			claim(changedCols, "column", sp.col, true)
			if sp.old != "" && sp.old != sp.col {
				claim(changedCols, "column", sp.old, true)
			}
			if sp.op == "add-column" {
				addedCols[sp.col] = true
			}
		case "add-index", "drop-index", "alter-index":
			claim(changedIdx, "index", sp.index, true)
		case "rename-index":
			claim(changedIdx, "index", sp.old, true)
			claim(changedIdx, "index", sp.index, true)
		}
	}
	for _, sp := range specs {
		if sp.after != "" {
			claim(changedCols, "column", sp.after, false)
		}
		if sp.op != "add-index" {
			continue
		}
		for _, col := range sp.cols {
			switch {
			case addedCols[col] || tb != nil && tb.cols[col] == "":
				add("index %s on column %s, which the table does not have before the statement "+
					"(TiDB: Error 1072 column does not exist: %s; add the column in a statement of its own first): %s",
					sp.index, col, col, docBeforeExecution)
			default:
				claim(changedCols, "column", col, false)
			}
		}
	}

	tidbOptions := 0
	for _, sp := range specs {
		findings = append(findings, sp.findings...)
		switch sp.op {
		case "add-column":
			findings = append(findings, columnRules(sp, true)...)
			if tb != nil && tb.cols[sp.col] != "" && !sp.ifNotExists {
				add("column %s exists already", sp.col)
			}
		case "add-index":
			findings = append(findings, indexRules(sp)...)
			if sp.primaryKey {
				add("ALTER TABLE … ADD PRIMARY KEY: %s", docClustered)
			}
			if tb == nil {
				break
			}
			if _, ok := tb.indexes[sp.index]; ok && !sp.primaryKey {
				add("index %s exists already", sp.index)
			}
		case "drop-index":
			if sp.primaryKey {
				add("ALTER TABLE … DROP PRIMARY KEY: %s", docClustered)
				break
			}
			if _, ok := tb.indexesOrNil()[sp.index]; tb != nil && !ok && !sp.ifExists {
				add("DROP INDEX %s, which does not exist before the statement: %s", sp.index, docBeforeExecution)
			}
		case "drop-column":
			if tb == nil {
				break
			}
			if tb.cols[sp.col] == "" && !sp.ifExists {
				add("DROP COLUMN %s, which does not exist before the statement: %s", sp.col, docBeforeExecution)
			}
			if slices.Contains(tb.primary, sp.col) {
				add("DROP COLUMN %s, a primary key column (TiDB: Error 8200): %s", sp.col, docDropColumn)
			}
			for _, name := range sortedKeys(tb.indexes) {
				if cols := tb.indexes[name]; len(cols) > 1 && slices.Contains(cols, sp.col) {
					add("DROP COLUMN %s, which index %s covers with other columns before the statement "+
						"(TiDB: Error 8200 can't drop column %s with composite index covered, even when the "+
						"same statement drops the index: drop the index in a statement of its own first): %s",
						sp.col, name, sp.col, docDropColumn)
				}
			}
		case "modify-column":
			findings = append(findings, columnRules(sp, true)...)
			if tb == nil {
				break
			}
			old := sp.old
			if old == "" {
				old = sp.col
			}
			if prev := tb.cols[old]; prev != "" {
				if f := typeChange(prev, sp.typ, slices.Contains(tb.primary, old)); f != "" {
					add("column %s: %s: %s", old, f, docTypeChange)
				}
			} else {
				add("MODIFY/CHANGE of column %s, which does not exist", old)
			}
		case "tidb-option":
			tidbOptions++
		}
	}
	if tidbOptions > 1 {
		add("%d TiDB-specific options in one ALTER TABLE: %s", tidbOptions, docTiDBOptions)
	}
	if tb == nil {
		return findings
	}
	// Apply, left to right.
	for _, sp := range specs {
		switch sp.op {
		case "add-column":
			tb.cols[sp.col] = sp.typ
		case "add-index":
			if sp.primaryKey {
				tb.primary = sp.cols
			} else {
				tb.indexes[sp.index] = sp.cols
			}
		case "drop-index":
			if sp.primaryKey {
				tb.primary = nil
			}
			delete(tb.indexes, sp.index)
		case "drop-column":
			delete(tb.cols, sp.col)
			for name, cols := range tb.indexes {
				if cols = slices.DeleteFunc(slices.Clone(cols), func(s string) bool { return s == sp.col }); len(cols) == 0 {
					delete(tb.indexes, name)
				} else {
					tb.indexes[name] = cols
				}
			}
		case "modify-column":
			if sp.old != "" && sp.old != sp.col {
				delete(tb.cols, sp.old)
			}
			tb.cols[sp.col] = sp.typ
		case "rename-column":
			tb.cols[sp.col] = tb.cols[sp.old]
			delete(tb.cols, sp.old)
		case "rename-index":
			tb.indexes[sp.index] = tb.indexes[sp.old]
			delete(tb.indexes, sp.old)
		}
	}
	return findings
}

func (tb *ddlTable) indexesOrNil() map[string][]string {
	if tb == nil {
		return nil
	}
	return tb.indexes
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// tidbCharsets are the character sets TiDB supports (docCharsets).
var tidbCharsets = []string{"ascii", "latin1", "binary", "utf8", "utf8mb3", "utf8mb4", "gbk"}

// spatialTypes are MySQL's spatial column types (docUnsupported).
var spatialTypes = []string{"GEOMETRY", "POINT", "LINESTRING", "POLYGON", "MULTIPOINT", "MULTILINESTRING", "MULTIPOLYGON", "GEOMETRYCOLLECTION", "GEOMCOLLECTION"}

// columnRules are the rules of a column definition; added says it is
// added to (or changed in) an existing table.
func columnRules(sp alterSpec, added bool) []string {
	var f []string
	base, _, _ := strings.Cut(sp.typ, "(")
	base, _, _ = strings.Cut(base, " ")
	if slices.Contains(spatialTypes, base) {
		f = append(f, "column "+sp.col+" of the SPATIAL type "+base+": "+docUnsupported)
	}
	if sp.charset != "" && !slices.Contains(tidbCharsets, sp.charset) {
		f = append(f, "column "+sp.col+" in the character set "+sp.charset+": "+docCharsets)
	}
	if added && sp.op == "add-column" {
		if sp.primary {
			f = append(f, "a new column "+sp.col+" set to PRIMARY KEY: "+docAddColumn)
		}
		if sp.autoInc {
			f = append(f, "a new column "+sp.col+" set to AUTO_INCREMENT: "+docAddColumn)
		}
	}
	return f
}

func indexRules(sp alterSpec) []string {
	var f []string
	switch sp.kind {
	case "FULLTEXT", "SPATIAL":
		f = append(f, sp.kind+" index "+sp.index+": "+docUnsupported)
	}
	if sp.desc {
		f = append(f, "Descending Index "+sp.index+" (TiDB parses DESC and ignores it): "+docUnsupported)
	}
	return f
}

// integerRank orders MySQL's integer types by width.
var integerRank = map[string]int{"TINYINT": 1, "SMALLINT": 2, "MEDIUMINT": 3, "INT": 4, "INTEGER": 4, "BIGINT": 5}

// typeChange returns what is wrong with changing a column's type from
// prev to next ("" when the types are the same, or when the change widens
// an integer of the same signedness or lengthens a VARCHAR, VARBINARY,
// CHAR or BINARY of the same kind and character set off the primary key).
func typeChange(prev, next string, primary bool) string {
	if prev == next {
		return ""
	}
	pb, pl, pt := splitType(prev)
	nb, nl, nt := splitType(next)
	switch {
	case integerRank[pb] > 0 && integerRank[nb] > 0 && pt == nt:
		if integerRank[nb] >= integerRank[pb] && !primary {
			return ""
		}
		return fmt.Sprintf("%s to %s narrows it or changes a primary key column", prev, next)
	case pb == nb && pt == nt && (pb == "VARCHAR" || pb == "VARBINARY" || pb == "CHAR" || pb == "BINARY"):
		if nl >= pl && !primary {
			return ""
		}
		return fmt.Sprintf("%s to %s shortens it or changes a primary key column", prev, next)
	}
	return fmt.Sprintf("%s to %s changes the data type (some data types' changes are refused, and a change "+
		"that rewrites the data is refused on a primary key column)", prev, next)
}

// splitType splits a normalised type into its base, its length (0 for
// none) and the rest.
func splitType(typ string) (base string, length int, rest string) {
	base, rest, _ = strings.Cut(typ, " ")
	if b, args, ok := strings.Cut(base, "("); ok {
		base = b
		n, _, _ := strings.Cut(strings.TrimSuffix(args, ")"), ",")
		length, _ = strconv.Atoi(n)
	}
	return base, length, rest
}

// TestTiDBDDLRulesOnServer runs the checker's cases on the MySQL target
// when it is TiDB (OPLEDGER_TEST_MYSQL_DSN), each in a database of its
// own: TiDB refuses what the checker refuses, except the cases listed in
// tidbAccepts, and runs what it accepts. On MySQL and MariaDB, which take
// most of what TiDB refuses, it skips.
func TestTiDBDDLRulesOnServer(t *testing.T) {
	d := testdb.MySQLDialect(t)
	if !d.TiDB() {
		t.Skip("the MySQL target is not TiDB: the rules are TiDB's")
	}
	testdb.Parallel(t, "mysql", 2)
	db := testdb.OpenMySQL(nil)(t, 2)
	ctx := context.Background()
	for _, tc := range ddlCases() {
		t.Run(tc.name, func(t *testing.T) {
			var b [4]byte
			_, _ = rand.Read(b[:])
			schema := "opl_ddl_" + hex.EncodeToString(b[:])
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.ExecContext(ctx, "CREATE DATABASE "+schema); err != nil {
				t.Fatal(err)
			}
			defer db.ExecContext(context.WithoutCancel(ctx), "DROP DATABASE "+schema)
			if _, err := conn.ExecContext(ctx, "USE "+schema); err != nil {
				t.Fatal(err)
			}
			for _, s := range tc.setup {
				if _, err := conn.ExecContext(ctx, s); err != nil {
					t.Fatalf("set-up %q: %v", s, err)
				}
			}
			_, err = conn.ExecContext(ctx, tc.stmt)
			why, accepts := tidbAccepts[tc.name]
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("the checker accepts %q, TiDB refuses it: %v", tc.stmt, err)
			case tc.want != "" && !accepts && err == nil:
				t.Errorf("the checker refuses %q (%s), TiDB runs it", tc.stmt, tc.want)
			case accepts && err != nil:
				t.Errorf("%q: listed in tidbAccepts (%s), but TiDB refuses it: %v", tc.stmt, why, err)
			case err != nil:
				t.Logf("TiDB: %v", err)
			}
		})
	}
}
