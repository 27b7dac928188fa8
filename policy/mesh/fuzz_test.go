package mesh

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/opledger/opledger/policy"
)

// fuzzSeeds adds every sample file and a few fragments.
func fuzzSeeds(f *testing.F, xds bool) {
	files, err := filepath.Glob(filepath.Join("testdata", "*"))
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil && (strings.HasPrefix(filepath.Base(p), "xds-") == xds || !xds) {
			f.Add(b)
		}
	}
	for _, s := range []string{"", "---", "{}", "[]", "null", "- a\n- b", "@type: x", "apiVersion: v1\nkind: List\nitems: [[], {}]",
		`{"virtual_hosts":[{"routes":[{"match":{"safe_regex":{"regex":"("}}}]}]}`, "a: &a [*a, *a]", "\xff\xfe"} {
		f.Add([]byte(s))
	}
}

// fuzzCheck reads data and checks it against the test catalog with every
// owner; nothing may panic, every finding must be on one line.
func fuzzCheck(t *testing.T, data []byte, xds bool) {
	var c Config
	if xds {
		c.AddXDS("fuzz", data)
	} else {
		c.AddMesh("fuzz", data)
	}
	cat := testCatalog(t)
	for _, owner := range []policy.RetryOwner{policy.OwnerApplication, policy.OwnerServiceConfig, policy.OwnerMesh, policy.OwnerNone} {
		rep, err := Check(&c, cat, Options{Owner: owner, Target: "xds:///orders"})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range rep.Findings {
			if s := f.String(); strings.ContainsAny(s, "\n\r") {
				t.Fatalf("finding spans lines: %q", s)
			}
		}
		if len(rep.Methods) != len(cat.Methods()) {
			t.Fatalf("%d method reports for %d methods", len(rep.Methods), len(cat.Methods()))
		}
	}
}

func FuzzAddMesh(f *testing.F) {
	fuzzSeeds(f, false)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzCheck(t, data, false) })
}

func FuzzAddXDS(f *testing.F) {
	fuzzSeeds(f, true)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzCheck(t, data, true) })
}

// unreadSample is a valid sample configuration of testdata, decoded, with
// the options it is checked under and its report.
type unreadSample struct {
	name string
	xds  bool
	cat  *policy.Catalog
	opts Options
	docs []any
	base *Report
}

// encodeDocs writes decoded documents back as JSON documents.
func encodeDocs(docs []any) []byte {
	var b strings.Builder
	for i, d := range docs {
		if i > 0 {
			b.WriteString("\n---\n")
		}
		js, _ := json.Marshal(d)
		b.Write(js)
	}
	return []byte(b.String())
}

func (s *unreadSample) check(t testing.TB, docs []any) *Report {
	var c Config
	if s.xds {
		c.AddXDS(s.name, encodeDocs(docs))
	} else {
		c.AddMesh(s.name, encodeDocs(docs))
	}
	rep, err := Check(&c, s.cat, s.opts)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// unreadSamples loads every sample of testdata and testdata/corpus that
// reads without a syntax finding (Istio, Envoy, xDS, Gateway API,
// Linkerd), the corpus ones with the catalog and options of their header.
func unreadSamples(t testing.TB) []*unreadSample {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.*"))
	corpus, _ := filepath.Glob(filepath.Join("testdata", "corpus", "*.yaml"))
	sort.Strings(files)
	sort.Strings(corpus)
	var out []*unreadSample
	for _, p := range append(files, corpus...) {
		data, err := os.ReadFile(p)
		if err != nil || !strings.HasSuffix(p, ".yaml") && !strings.HasSuffix(p, ".json") {
			continue
		}
		s := &unreadSample{name: filepath.Base(p), xds: strings.HasPrefix(filepath.Base(p), "xds-"), cat: testCatalog(t), opts: Options{Owner: policy.OwnerMesh}}
		if strings.Contains(p, "corpus") {
			h, err := readSample(data)
			if err != nil {
				continue
			}
			s.xds, s.opts = h.xds, h.opts
			if s.cat, err = policy.NewCatalog(h.methods...); err != nil {
				continue
			}
		}
		ok := true
		for _, doc := range splitYAML(data) {
			v, err := decode(doc)
			ok = ok && err == nil
			if v != nil {
				s.docs = append(s.docs, v)
			}
		}
		if !ok || len(s.docs) == 0 {
			continue
		}
		s.base = s.check(t, s.docs)
		out = append(out, s)
	}
	return out
}

// modelKeys returns every string literal of the package's code, folded
// (lower case, without "_" and "-"): a superset of the field names the
// model reads, in either protojson spelling.
func modelKeys(t testing.TB) map[string]bool {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{"": true}
	for _, pkg := range pkgs {
		ast.Inspect(pkg, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil {
					keys[foldKey(s)] = true
				}
			}
			return true
		})
	}
	return keys
}

func foldKey(s string) string {
	return strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(strings.TrimSpace(s)))
}

// objects lists the objects of a decoded document, depth first in key
// order.
func objects(v any, out []map[string]any) []map[string]any {
	switch t := v.(type) {
	case map[string]any:
		out = append(out, t)
		ks := make([]string, 0, len(t))
		for k := range t {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		for _, k := range ks {
			out = objects(t[k], out)
		}
	case []any:
		for _, e := range t {
			out = objects(e, out)
		}
	}
	return out
}

// deepCopy copies a decoded document.
func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, e := range t {
			m[k] = deepCopy(e)
		}
		return m
	case []any:
		a := make([]any, len(t))
		for i, e := range t {
			a[i] = deepCopy(e)
		}
		return a
	}
	return v
}

// FuzzUnreadFieldNeverLowersAttempts is the rule of issue 37 as a property:
// a field the model does not read, inserted anywhere in a valid sample
// configuration (Istio, Envoy, xDS, Gateway API, Linkerd, the real-world
// corpus), never lowers the attempts reported for any method at any
// layer. What the checker does not read may be reported; it may never be
// taken for "fewer retries".
func FuzzUnreadFieldNeverLowersAttempts(f *testing.F) {
	samples := unreadSamples(f)
	if len(samples) == 0 {
		f.Fatal("no samples")
	}
	read := modelKeys(f)
	for i := range samples {
		f.Add(uint(i), uint(i*7), "x-unread", `"value"`)
		f.Add(uint(i), uint(i*3+1), "retryPolicies", `{"attempts": 0, "num_retries": 0}`)
		f.Add(uint(i), uint(i*5+2), "disabled", `true`)
	}
	f.Fuzz(func(t *testing.T, file, object uint, key, value string) {
		if read[foldKey(key)] || len(key) > 64 || len(value) > 1024 {
			return // a field the model reads, or an oversized one
		}
		s := samples[file%uint(len(samples))]
		docs := make([]any, len(s.docs))
		for i, d := range s.docs {
			docs[i] = deepCopy(d)
		}
		var objs []map[string]any
		for _, d := range docs {
			objs = objects(d, objs)
		}
		if len(objs) == 0 {
			return
		}
		m := objs[object%uint(len(objs))]
		if _, taken := m[key]; taken {
			return
		}
		var v any = value
		if json.Valid([]byte(value)) {
			d := json.NewDecoder(strings.NewReader(value))
			d.UseNumber()
			if d.Decode(&v) != nil {
				v = value
			}
		}
		m[key] = v
		compareAttempts(t, s, s.check(t, docs), key)
	})
}

// compareAttempts fails when the mutated report has fewer attempts than
// the sample's for some method and layer.
func compareAttempts(t *testing.T, s *unreadSample, got *Report, key string) {
	t.Helper()
	for i, bm := range s.base.Methods {
		gm := got.Methods[i]
		for _, bl := range bm.Layers {
			g := one
			for _, gl := range gm.Layers {
				if gl.Layer == bl.Layer {
					g = gl.Attempts
				}
			}
			if bl.Attempts.more(g) {
				t.Fatalf("%s: field %q lowers %s at %s from %s to %s; findings: %v", s.name, key, bm.Method, bl.Layer, bl.Attempts, g, keys(got.Findings))
			}
		}
		if bm.Amplification.more(gm.Amplification) {
			t.Fatalf("%s: field %q lowers %s's amplification from %s to %s", s.name, key, bm.Method, bm.Amplification, gm.Amplification)
		}
	}
}
