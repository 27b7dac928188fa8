package mysqldialect_test

// The lexer and parser of TestTiDBDDLRules's checker (tidbddl_test.go):
// enough of MySQL's DDL for the statements the dialect and its tests send.

import (
	"fmt"
	"slices"
	"strings"
)

// alterSpec is one change of an ALTER TABLE (or an element of a CREATE
// TABLE).
type alterSpec struct {
	op          string // add-column, add-index, drop-column, drop-index, modify-column, rename-column, rename-index, alter-index, tidb-option, other
	col, old    string // the column; the old name for CHANGE and RENAME
	typ         string // the column's type, normalised
	charset     string
	after       string // ADD/MODIFY … AFTER this column
	primary     bool   // a column defined PRIMARY KEY
	unique      bool   // a column defined UNIQUE
	autoInc     bool
	index       string
	kind        string // "", UNIQUE, FULLTEXT, SPATIAL, PRIMARY
	primaryKey  bool   // ADD / DROP PRIMARY KEY
	cols        []string
	desc        bool
	ifExists    bool
	ifNotExists bool
	findings    []string // of the table options in the change
}

// parseError is what the parser panics with on anything it does not
// know; ddlChecker.check reports it as a finding.
type parseError string

type sqlToken struct {
	kind byte // 'w' word, 'i' quoted identifier, 's' string, 'n' number, 'p' punctuation
	text string
}

func lexSQL(s string) []sqlToken {
	var toks []sqlToken
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#' || strings.HasPrefix(s[i:], "-- ") || strings.HasPrefix(s[i:], "--\n") || s[i:] == "--":
			j := strings.IndexByte(s[i:], '\n')
			if j < 0 {
				j = len(s) - i
			}
			i += j
		case strings.HasPrefix(s[i:], "/*"):
			j := strings.Index(s[i+2:], "*/")
			if j < 0 {
				panic(parseError("unterminated comment"))
			}
			i += j + 4
		case c == '`' || c == '\'' || c == '"':
			var b strings.Builder
			j := i + 1
			for ; j < len(s); j++ {
				if s[j] == '\\' && c != '`' && j+1 < len(s) {
					b.WriteByte(s[j+1])
					j++
					continue
				}
				if s[j] == c {
					if j+1 < len(s) && s[j+1] == c {
						b.WriteByte(c)
						j++
						continue
					}
					break
				}
				b.WriteByte(s[j])
			}
			if j >= len(s) {
				panic(parseError("unterminated quote"))
			}
			kind := byte('s')
			if c == '`' {
				kind = 'i'
			}
			toks = append(toks, sqlToken{kind, b.String()})
			i = j + 1
		case c >= '0' && c <= '9':
			j := i
			for j < len(s) && (s[j] >= '0' && s[j] <= '9' || s[j] == '.') {
				j++
			}
			toks = append(toks, sqlToken{'n', s[i:j]})
			i = j
		case c == '_' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i
			for j < len(s) && (s[j] == '_' || s[j] == '$' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= '0' && s[j] <= '9') {
				j++
			}
			toks = append(toks, sqlToken{'w', s[i:j]})
			i = j
		default:
			toks = append(toks, sqlToken{'p', string(c)})
			i++
		}
	}
	return toks
}

type ddlParser struct {
	toks []sqlToken
	i    int
}

func (p *ddlParser) atEnd() bool {
	return p.i >= len(p.toks) || p.toks[p.i].kind == 'p' && p.toks[p.i].text == ";"
}

func (p *ddlParser) peek() sqlToken {
	if p.atEnd() {
		return sqlToken{'p', "<end>"}
	}
	return p.toks[p.i]
}

func (p *ddlParser) peekN(n int) sqlToken {
	if p.i+n >= len(p.toks) {
		return sqlToken{'p', "<end>"}
	}
	return p.toks[p.i+n]
}

func (p *ddlParser) next() sqlToken {
	if p.atEnd() {
		panic(parseError("unexpected end"))
	}
	t := p.toks[p.i]
	p.i++
	return t
}

func isKW(t sqlToken, kw string) bool { return t.kind == 'w' && strings.EqualFold(t.text, kw) }

// kw consumes the keyword kw if it comes next.
func (p *ddlParser) kw(kw string) bool {
	if isKW(p.peek(), kw) {
		p.i++
		return true
	}
	return false
}

// kws consumes the keywords if they all come next, in order.
func (p *ddlParser) kws(kws ...string) bool {
	for n, k := range kws {
		if !isKW(p.peekN(n), k) {
			return false
		}
	}
	p.i += len(kws)
	return true
}

func (p *ddlParser) punct(s string) bool {
	if t := p.peek(); t.kind == 'p' && t.text == s {
		p.i++
		return true
	}
	return false
}

func (p *ddlParser) expect(s string) {
	if !p.punct(s) {
		panic(parseError(fmt.Sprintf("want %q, have %q", s, p.peek().text)))
	}
}

func (p *ddlParser) end() {
	p.punct(";")
	if p.i < len(p.toks) {
		panic(parseError("unexpected " + p.peek().text))
	}
}

// name reads an identifier (lower-cased: MySQL's column and index names
// are not case-sensitive), dropping a schema qualifier.
func (p *ddlParser) name() string {
	t := p.next()
	if t.kind != 'w' && t.kind != 'i' {
		panic(parseError("want a name, have " + t.text))
	}
	if p.punct(".") {
		return p.name()
	}
	return strings.ToLower(t.text)
}

// skipGroup skips a balanced parenthesised group whose "(" was read.
func (p *ddlParser) skipGroup() string {
	var b strings.Builder
	for depth := 1; ; {
		t := p.next()
		if t.kind == 'p' && t.text == "(" {
			depth++
		} else if t.kind == 'p' && t.text == ")" {
			if depth--; depth == 0 {
				return b.String()
			}
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(t.text)
	}
}

// tableElement reads one element of CREATE TABLE's list: a column or an
// index or constraint.
func (p *ddlParser) tableElement() alterSpec {
	if sp, ok := p.indexDef(); ok {
		return sp
	}
	return p.columnDef()
}

// indexDef reads an index or constraint definition, if one comes next.
func (p *ddlParser) indexDef() (alterSpec, bool) {
	sp := alterSpec{op: "add-index"}
	if p.kw("CONSTRAINT") {
		if t := p.peek(); !isKW(t, "PRIMARY") && !isKW(t, "UNIQUE") && !isKW(t, "FOREIGN") && !isKW(t, "CHECK") {
			sp.index = p.name()
		}
	}
	switch {
	case p.kws("PRIMARY", "KEY"):
		sp.kind, sp.primaryKey, sp.index = "PRIMARY", true, "primary"
	case p.kw("UNIQUE"):
		sp.kind = "UNIQUE"
		_ = p.kw("KEY") || p.kw("INDEX")
	case p.kw("FULLTEXT"), p.kw("SPATIAL"):
		sp.kind = strings.ToUpper(p.toks[p.i-1].text)
		_ = p.kw("KEY") || p.kw("INDEX")
	case p.kw("KEY"), p.kw("INDEX"):
	case p.kws("FOREIGN", "KEY"), p.kw("CHECK"):
		sp.op = "other"
		for !p.atEnd() && !(p.peek().kind == 'p' && (p.peek().text == "," || p.peek().text == ")")) {
			if p.punct("(") {
				p.skipGroup()
				continue
			}
			p.next()
		}
		return sp, true
	default:
		if sp.index != "" {
			panic(parseError("constraint " + sp.index))
		}
		return sp, false
	}
	if p.kws("IF", "NOT", "EXISTS") {
		sp.ifNotExists = true
	}
	if t := p.peek(); !(t.kind == 'p' && t.text == "(") && !isKW(t, "USING") {
		sp.index = p.name()
	}
	if p.kw("USING") {
		p.next()
	}
	sp.cols, sp.desc = p.indexColumns()
	for p.kw("USING") || p.kw("COMMENT") || p.kw("VISIBLE") || p.kw("INVISIBLE") || p.kw("CLUSTERED") || p.kw("NONCLUSTERED") {
		if isKW(p.toks[p.i-1], "USING") || isKW(p.toks[p.i-1], "COMMENT") {
			p.next()
		}
	}
	if sp.index == "" && len(sp.cols) > 0 {
		sp.index = sp.cols[0] // MySQL names an unnamed index after its first column
	}
	return sp, true
}

// indexColumns reads "(col [(len)] [ASC|DESC], …)".
func (p *ddlParser) indexColumns() (cols []string, desc bool) {
	p.expect("(")
	for {
		if p.punct("(") {
			p.skipGroup() // an expression: it names no column the checker tracks
		} else {
			cols = append(cols, p.name())
			if p.punct("(") {
				p.skipGroup()
			}
		}
		if p.kw("DESC") {
			desc = true
		} else {
			p.kw("ASC")
		}
		if !p.punct(",") {
			break
		}
	}
	p.expect(")")
	return cols, desc
}

// columnDef reads "name type [attributes]".
func (p *ddlParser) columnDef() alterSpec {
	sp := alterSpec{op: "add-column"}
	if p.kws("IF", "NOT", "EXISTS") {
		sp.ifNotExists = true
	}
	sp.col = p.name()
	t := p.next()
	if t.kind != 'w' {
		panic(parseError("want the type of column " + sp.col + ", have " + t.text))
	}
	typ := strings.ToUpper(t.text)
	if isKW(t, "DOUBLE") && p.kw("PRECISION") {
		typ += " PRECISION"
	}
	if p.punct("(") {
		typ += "(" + strings.ReplaceAll(p.skipGroup(), " ", "") + ")"
	}
	var mods []string
	for {
		switch {
		case p.atEnd() || p.peek().kind == 'p' && (p.peek().text == "," || p.peek().text == ")"):
			sp.typ = strings.Join(append([]string{typ}, mods...), " ")
			return sp
		case p.kw("UNSIGNED"), p.kw("SIGNED"), p.kw("ZEROFILL"), p.kw("BINARY"):
			mods = append(mods, strings.ToUpper(p.toks[p.i-1].text))
		case p.kws("CHARACTER", "SET"), p.kw("CHARSET"):
			sp.charset = strings.ToLower(p.next().text)
			mods = append(mods, "CHARSET "+sp.charset)
		case p.kw("COLLATE"):
			mods = append(mods, "COLLATE "+strings.ToLower(p.next().text))
		case p.kws("NOT", "NULL"), p.kw("NULL"):
		case p.kw("AUTO_INCREMENT"):
			sp.autoInc = true
		case p.kws("PRIMARY", "KEY"), p.kw("KEY"):
			sp.primary = true
		case p.kw("UNIQUE"):
			sp.unique = true
			p.kw("KEY")
		case p.kw("DEFAULT"), p.kw("COMMENT"):
			if p.punct("(") {
				p.skipGroup()
			} else {
				p.punct("-")
				p.next()
				if p.punct("(") {
					p.skipGroup()
				}
			}
		case p.kws("ON", "UPDATE"):
			p.next()
			if p.punct("(") {
				p.skipGroup()
			}
		case p.kws("GENERATED", "ALWAYS", "AS"), p.kw("AS"):
			p.expect("(")
			p.skipGroup()
			_ = p.kw("VIRTUAL") || p.kw("STORED")
		case p.kw("AFTER"):
			sp.after = p.name()
		case p.kw("FIRST"):
		default:
			panic(parseError("column " + sp.col + ": " + p.peek().text))
		}
	}
}

// tableOption is one table option, with what TiDB's rules say of it.
type tableOption struct {
	tidb     bool // one of TiDB's own (docTiDBOptions)
	findings []string
}

// tableOptions reads CREATE TABLE's table options, up to the end.
func (p *ddlParser) tableOptions() []tableOption {
	var out []tableOption
	for !p.atEnd() {
		out = append(out, p.tableOption())
		p.punct(",")
	}
	return out
}

func (p *ddlParser) tableOption() tableOption {
	var o tableOption
	p.kw("DEFAULT")
	switch {
	case p.kws("CHARACTER", "SET"), p.kw("CHARSET"):
		p.punct("=")
		if cs := strings.ToLower(p.next().text); !slices.Contains(tidbCharsets, cs) {
			o.findings = append(o.findings, "the character set "+cs+": "+docCharsets)
		}
	case p.kw("COLLATE"), p.kw("ENGINE"), p.kw("COMMENT"), p.kw("ROW_FORMAT"), p.kw("AUTO_INCREMENT"), p.kw("KEY_BLOCK_SIZE"):
		p.punct("=")
		p.next()
	case p.kw("SHARD_ROW_ID_BITS"), p.kw("AUTO_ID_CACHE"), p.kw("PRE_SPLIT_REGIONS"), p.kw("AUTO_RANDOM_BASE"):
		o.tidb = true
		p.punct("=")
		p.next()
	case p.kws("PARTITION", "BY"):
		// The ledger's partitioned layout (RANGE, which TiDB runs): no
		// column or index in it; the partition definitions run to the end.
		for !p.atEnd() {
			p.next()
		}
	case p.kws("SET", "TIFLASH", "REPLICA"):
		o.tidb = true
		p.next()
		for p.kw("LOCATION") || p.kw("LABELS") {
		}
		for p.peek().kind == 's' || p.punct(",") && p.peek().kind == 's' {
			p.next()
		}
	default:
		panic(parseError("table option " + p.peek().text))
	}
	return o
}

// alterSpecs reads ALTER TABLE's comma-separated changes.
func (p *ddlParser) alterSpecs() []alterSpec {
	var specs []alterSpec
	for {
		specs = append(specs, p.alterSpec()...)
		if !p.punct(",") {
			break
		}
	}
	p.end()
	return specs
}

func (p *ddlParser) alterSpec() []alterSpec {
	switch {
	case p.kws("ADD", "PARTITION"), p.kws("DROP", "PARTITION"), p.kws("REORGANIZE", "PARTITION"), p.kws("CONVERT", "PARTITION"):
		// Partition maintenance of the ledger's partitioned table (TiDB
		// 7.0+ runs the first three; CONVERT PARTITION is MariaDB's, which
		// the TiDB variant never sends and the MySQL one, refused, replaces
		// by DROP PARTITION): no column or index changes.
		for !p.atEnd() && p.peek().text != ";" {
			p.next()
		}
		return []alterSpec{{op: "other"}}
	case p.kw("ADD"):
		if sp, ok := p.indexDef(); ok {
			return []alterSpec{sp}
		}
		p.kw("COLUMN")
		if p.punct("(") { // ADD COLUMN (a INT, b INT)
			var specs []alterSpec
			for {
				specs = append(specs, p.columnDef())
				if !p.punct(",") {
					break
				}
			}
			p.expect(")")
			return specs
		}
		return []alterSpec{p.columnDef()}
	case p.kw("DROP"):
		switch {
		case p.kws("PRIMARY", "KEY"):
			return []alterSpec{{op: "drop-index", index: "primary", primaryKey: true}}
		case p.kw("INDEX"), p.kw("KEY"):
			sp := alterSpec{op: "drop-index"}
			sp.ifExists = p.kws("IF", "EXISTS")
			sp.index = p.name()
			return []alterSpec{sp}
		case p.kws("FOREIGN", "KEY"), p.kw("CHECK"), p.kw("CONSTRAINT"):
			p.name()
			return []alterSpec{{op: "other"}}
		}
		p.kw("COLUMN")
		sp := alterSpec{op: "drop-column"}
		sp.ifExists = p.kws("IF", "EXISTS")
		sp.col = p.name()
		_ = p.kw("RESTRICT") || p.kw("CASCADE")
		return []alterSpec{sp}
	case p.kw("MODIFY"):
		p.kw("COLUMN")
		ifExists := p.kws("IF", "EXISTS")
		sp := p.columnDef()
		sp.op, sp.ifExists = "modify-column", ifExists
		return []alterSpec{sp}
	case p.kw("CHANGE"):
		p.kw("COLUMN")
		ifExists := p.kws("IF", "EXISTS")
		old := p.name()
		sp := p.columnDef()
		sp.op, sp.old, sp.ifExists = "modify-column", old, ifExists
		return []alterSpec{sp}
	case p.kw("RENAME"):
		switch {
		case p.kw("COLUMN"):
			old := p.name()
			p.kw("TO")
			return []alterSpec{{op: "rename-column", old: old, col: p.name()}}
		case p.kw("INDEX"), p.kw("KEY"):
			old := p.name()
			p.kw("TO")
			return []alterSpec{{op: "rename-index", old: old, index: p.name()}}
		}
		_ = p.kw("TO") || p.kw("AS")
		p.name()
		return []alterSpec{{op: "other"}}
	case p.kw("ALTER"):
		if p.kw("INDEX") {
			sp := alterSpec{op: "alter-index", index: p.name()}
			_ = p.kw("VISIBLE") || p.kw("INVISIBLE")
			return []alterSpec{sp}
		}
		p.kw("COLUMN")
		sp := alterSpec{op: "other", col: p.name()}
		if p.kws("SET", "DEFAULT") {
			if p.punct("(") {
				p.skipGroup()
			} else {
				p.next()
			}
		} else if !p.kws("DROP", "DEFAULT") {
			panic(parseError("ALTER COLUMN " + sp.col))
		}
		return []alterSpec{sp}
	case p.kw("ALGORITHM"), p.kw("LOCK"):
		p.punct("=")
		p.next()
		return []alterSpec{{op: "other"}}
	case p.kws("CONVERT", "TO"):
		o := p.tableOption()
		p.kw("COLLATE")
		if !p.atEnd() && p.peek().kind == 'w' {
			p.next()
		}
		return []alterSpec{{op: "other", findings: o.findings}}
	case p.kw("FORCE"):
		return []alterSpec{{op: "other"}}
	}
	o := p.tableOption()
	op := "other"
	if o.tidb {
		op = "tidb-option"
	}
	return []alterSpec{{op: op, findings: o.findings}}
}
