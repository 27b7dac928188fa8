package mesh

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// maxConfigBytes bounds one file.
const maxConfigBytes = 4 << 20

// maxDocuments bounds the documents of one file (YAML documents, List items
// and DiscoveryResponse resources together).
const maxDocuments = 10000

// maxDepth bounds the nesting of a document.
const maxDepth = 64

// splitYAML splits a YAML stream into its documents at "---" lines (and
// drops "..." end markers). A document of only comments and blank lines is
// dropped.
func splitYAML(data []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	flush := func() {
		if hasContent(cur.Bytes()) {
			docs = append(docs, append([]byte(nil), cur.Bytes()...))
		}
		cur.Reset()
	}
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i+1], data[i+1:]
		} else {
			data = nil
		}
		trimmed := bytes.TrimRight(line, "\r\n")
		switch {
		case isMarker(trimmed, "---"):
			flush()
			if rest := bytes.TrimSpace(trimmed[3:]); len(rest) > 0 && rest[0] != '#' {
				cur.Write(rest) // "--- {a: 1}": content after the marker
				cur.WriteByte('\n')
			}
		case isMarker(trimmed, "..."):
			flush()
		default:
			cur.Write(line)
		}
	}
	flush()
	return docs
}

func isMarker(line []byte, m string) bool {
	if !bytes.HasPrefix(line, []byte(m)) {
		return false
	}
	rest := line[len(m):]
	return len(rest) == 0 || rest[0] == ' ' || rest[0] == '\t'
}

// hasContent reports whether a document has anything but comments, blank
// lines and directives.
func hasContent(doc []byte) bool {
	for _, line := range bytes.Split(doc, []byte("\n")) {
		t := bytes.TrimSpace(line)
		if len(t) > 0 && t[0] != '#' && t[0] != '%' {
			return true
		}
	}
	return false
}

// decode reads one document, JSON or YAML, into a tree of map[string]any,
// []any, string, json.Number, bool and nil.
func decode(doc []byte) (v any, err error) {
	defer func() {
		if r := recover(); r != nil { // the YAML library must not take the caller down
			v, err = nil, fmt.Errorf("the YAML parser failed: %v", r)
		}
	}()
	js := bytes.TrimSpace(doc)
	if len(js) == 0 || (js[0] != '{' && js[0] != '[') {
		if js, err = yaml.YAMLToJSON(doc); err != nil {
			return nil, errors.New(strings.TrimPrefix(err.Error(), "error converting YAML to JSON: "))
		}
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value in one document")
	}
	if depth(v, 0) > maxDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", maxDepth)
	}
	return v, nil
}

func depth(v any, d int) int {
	if d > maxDepth {
		return d
	}
	deepest := d
	switch t := v.(type) {
	case map[string]any:
		for _, e := range t {
			deepest = max(deepest, depth(e, d+1))
		}
	case []any:
		for _, e := range t {
			deepest = max(deepest, depth(e, d+1))
		}
	}
	return deepest
}

// obj is a JSON object with the path it was found at.
type obj struct {
	m    map[string]any
	path string
}

// asObj returns v as an object.
func asObj(v any, path string) (obj, bool) {
	m, ok := v.(map[string]any)
	return obj{m: m, path: path}, ok
}

// camel turns a proto field name into its JSON name: retry_policy →
// retryPolicy.
func camel(s string) string {
	if !strings.Contains(s, "_") {
		return s
	}
	var b strings.Builder
	up := false
	for _, r := range s {
		if r == '_' {
			up = true
			continue
		}
		if up && r >= 'a' && r <= 'z' {
			r -= 'a' - 'A'
		}
		up = false
		b.WriteRune(r)
	}
	return b.String()
}

// key returns the value of a field and its path. A proto field name
// (snake_case) also matches its JSON name (lowerCamelCase), as protojson
// accepts both. A JSON null is absent.
func (o obj) key(name string) (any, string, bool) {
	for _, k := range []string{name, camel(name)} {
		if v, ok := o.m[k]; ok && v != nil {
			return v, joinPath(o.path, k), true
		}
	}
	return nil, "", false
}

// child returns a field that is an object.
func (o obj) child(name string) (obj, bool) {
	v, p, ok := o.key(name)
	if !ok {
		return obj{}, false
	}
	return asObj(v, p)
}

// list returns a field that is an array, each element with its path.
func (o obj) list(name string) ([]any, []string) {
	v, p, ok := o.key(name)
	if !ok {
		return nil, nil
	}
	a, ok := v.([]any)
	if !ok {
		return nil, nil
	}
	paths := make([]string, len(a))
	for i := range a {
		paths[i] = p + "[" + strconv.Itoa(i) + "]"
	}
	return a, paths
}

// str returns a field that is a string.
func (o obj) str(name string) (string, bool) {
	v, _, ok := o.key(name)
	if !ok {
		return "", false
	}
	s, ok := v.(string)
	return s, ok
}

// keys returns the object's keys, sorted.
func (o obj) keys() []string {
	out := make([]string, 0, len(o.m))
	for k := range o.m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// unknownKeys returns the keys that are not among the known names (proto
// or JSON spelling), sorted.
func (o obj) unknownKeys(known ...string) []string {
	var out []string
	for _, k := range o.keys() {
		found := false
		for _, n := range known {
			if k == n || k == camel(n) {
				found = true
				break
			}
		}
		if !found {
			out = append(out, k)
		}
	}
	return out
}

func joinPath(path, key string) string {
	if !isPlainKey(key) {
		key = strconv.Quote(truncate(key))
		if path == "" {
			return "[" + key + "]"
		}
		return path + "[" + key + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func isPlainKey(k string) bool {
	if k == "" || len(k) > 128 {
		return false
	}
	for _, r := range k {
		if !(r == '_' || r == '-' || r == '@' || r == '/' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

// truncate shortens untrusted text quoted in a message.
// Control characters (a newline in a kind or a gateway name) become
// blanks: a finding stays on one line.
func truncate(s string) string {
	const max = 80
	if len(s) > max {
		s = s[:max] + "…"
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == 0x2028 || r == 0x2029 || r == 0x85 {
			return ' '
		}
		return r
	}, s)
}

// integer reads a JSON number or a numeric string (protojson writes 64-bit
// integers and wrapped values as either) as an int64.
func integer(v any) (int64, bool) {
	switch t := v.(type) {
	case json.Number:
		n, err := strconv.ParseInt(t.String(), 10, 64)
		if err != nil {
			f, ferr := strconv.ParseFloat(t.String(), 64)
			if ferr != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
				return 0, false
			}
			return int64(f), true
		}
		return n, true
	case string:
		n, err := strconv.ParseInt(strings.TrimSpace(t), 10, 64)
		return n, err == nil
	}
	return 0, false
}

// wrappedInteger reads an integer that protojson may write as a plain value
// or, for a wrapper type, as {"value": n}.
func wrappedInteger(v any) (int64, bool) {
	if m, ok := v.(map[string]any); ok {
		if inner, ok := m["value"]; ok {
			return integer(inner)
		}
		return 0, len(m) == 0 // {} is the zero value
	}
	return integer(v)
}

// number reads a JSON number or a numeric string as a float64.
func number(v any) (float64, bool) {
	var s string
	switch t := v.(type) {
	case json.Number:
		s = t.String()
	case string:
		s = strings.TrimSpace(t)
	case map[string]any: // a wrapper, or envoy.type.v3.Percent {"value": 20}
		if inner, ok := t["value"]; ok {
			return number(inner)
		}
		return 0, false
	default:
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// boolean reads a JSON boolean or a wrapped {"value": b}.
func boolean(v any) (bool, bool) {
	switch t := v.(type) {
	case bool:
		return t, true
	case map[string]any:
		if inner, ok := t["value"].(bool); ok {
			return inner, true
		}
	}
	return false, false
}

// duration reads a duration string: Go's form ("25ms", "1m30s") or
// protojson's ("0.025s"). A protojson object {"seconds": s, "nanos": n} is
// read too.
func duration(v any) (time.Duration, bool) {
	switch t := v.(type) {
	case string:
		d, err := time.ParseDuration(strings.TrimSpace(t))
		return d, err == nil
	case map[string]any:
		s, _ := integer(t["seconds"])
		n, _ := integer(t["nanos"])
		if s > math.MaxInt64/int64(time.Second)-1 || s < -(math.MaxInt64/int64(time.Second)-1) {
			return 0, false
		}
		return time.Duration(s)*time.Second + time.Duration(n), true
	}
	return 0, false
}

// describe names a JSON value's type for a message.
func describe(v any) string {
	switch t := v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	case string:
		return strconv.Quote(truncate(t))
	case json.Number:
		return t.String()
	case bool:
		return strconv.FormatBool(t)
	}
	return fmt.Sprintf("%T", v)
}
