package mesh

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/opledger/opledger/policy"
)

// TestCorpus checks every real-world sample of testdata/corpus against what
// its header says the checker must report (testdata/corpus/README.md has
// the format). Each sample names its source; its retry settings are as the
// source has them.
func TestCorpus(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "corpus", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no samples in testdata/corpus")
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			s, err := readSample(data)
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			s.run(t, filepath.Base(file), data)
		})
	}
}

// sample is a corpus file's header.
type sample struct {
	source   string
	methods  []policy.MethodPolicy
	opts     Options
	xds      bool
	attempts map[string]map[Layer]string // method -> layer ("total" too) -> attempts
	want     []findingPattern
	unwanted []findingPattern
}

// findingPattern matches a finding by kind and, when set, method and layer.
type findingPattern struct {
	kind   FindingKind
	method string
	layer  Layer
}

func (p findingPattern) String() string {
	s := string(p.kind)
	if p.method != "" {
		s += " " + p.method
	}
	if p.layer != "" {
		s += " @" + string(p.layer)
	}
	return s
}

func (p findingPattern) matches(f Finding) bool {
	return f.Kind == p.kind && (p.method == "" || f.Method == p.method) && (p.layer == "" || f.Layer == p.layer)
}

func parsePattern(v string) (findingPattern, error) {
	var p findingPattern
	fields := strings.Fields(v)
	if len(fields) == 0 {
		return p, fmt.Errorf("empty finding pattern")
	}
	p.kind = FindingKind(fields[0])
	for _, f := range fields[1:] {
		switch {
		case strings.HasPrefix(f, "@"):
			p.layer = Layer(strings.TrimPrefix(f, "@"))
		case strings.HasPrefix(f, "/"):
			p.method = f
		default:
			return p, fmt.Errorf("finding pattern %q: %q is neither a /method nor an @layer", v, f)
		}
	}
	return p, nil
}

var kinds = map[string]policy.MethodPolicy{
	"non-idempotent":  {Kind: policy.KindNonIdempotent},
	"no-side-effects": {Kind: policy.KindNoSideEffects},
	"idempotent":      {Kind: policy.KindIdempotent},
	"keyed":           {Kind: policy.KindKeyed},
	"keyed+ledger":    {Kind: policy.KindKeyed, DurableLedger: true},
}

// readSample reads the header comment lines of a corpus file.
func readSample(data []byte) (*sample, error) {
	s := &sample{attempts: map[string]map[Layer]string{}}
	owner := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if !strings.HasPrefix(line, "#") {
			break // the header ends at the first line that is not a comment
		}
		key, v, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(line, "#")), ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch strings.TrimSpace(key) {
		case "source":
			s.source = v
		case "catalog":
			name, kind, _ := strings.Cut(v, " ")
			p, ok := kinds[strings.TrimSpace(kind)]
			if !ok {
				return nil, fmt.Errorf("catalog %q: unknown kind %q", v, kind)
			}
			p.FullMethod = name
			s.methods = append(s.methods, p)
		case "check":
			for _, kv := range strings.Fields(v) {
				k, val, _ := strings.Cut(kv, "=")
				switch k {
				case "owner":
					var o policy.RetryOwner
					if err := o.UnmarshalText([]byte(val)); err != nil {
						return nil, err
					}
					s.opts.Owner, owner = o, true
				case "hosts":
					s.opts.Hosts = strings.Split(val, ",")
				case "target":
					s.opts.Target = val
				case "istio":
					s.opts.Istio = val == "true"
				case "xds":
					s.xds = val == "true"
				case "app-attempts":
					n, err := strconv.Atoi(val)
					if err != nil {
						return nil, fmt.Errorf("check %q: %v", kv, err)
					}
					s.opts.ApplicationAttempts = n
				default:
					return nil, fmt.Errorf("check: unknown key %q", k)
				}
			}
		case "want-attempts":
			fields := strings.Fields(v)
			if len(fields) < 2 {
				return nil, fmt.Errorf("want-attempts %q: want a method and layer=attempts pairs", v)
			}
			m := s.attempts[fields[0]]
			if m == nil {
				m = map[Layer]string{}
				s.attempts[fields[0]] = m
			}
			for _, kv := range fields[1:] {
				l, n, ok := strings.Cut(kv, "=")
				if !ok {
					return nil, fmt.Errorf("want-attempts %q: %q is not layer=attempts", v, kv)
				}
				m[Layer(l)] = n
			}
		case "want-finding", "no-finding":
			p, err := parsePattern(v)
			if err != nil {
				return nil, err
			}
			if strings.TrimSpace(key) == "want-finding" {
				s.want = append(s.want, p)
			} else {
				s.unwanted = append(s.unwanted, p)
			}
		}
	}
	switch {
	case s.source == "":
		return nil, fmt.Errorf("no '# source:' line: every sample names where it was taken from")
	case len(s.methods) == 0:
		return nil, fmt.Errorf("no '# catalog:' line")
	case !owner:
		return nil, fmt.Errorf("no owner in '# check:'")
	case len(s.attempts) == 0 && len(s.want) == 0 && len(s.unwanted) == 0:
		return nil, fmt.Errorf("nothing to check: no want-attempts, want-finding or no-finding line")
	}
	return s, nil
}

func (s *sample) run(t *testing.T, name string, data []byte) {
	t.Helper()
	cat, err := policy.NewCatalog(s.methods...)
	if err != nil {
		t.Fatal(err)
	}
	var c Config
	if s.xds {
		c.AddXDS(name, data)
	} else {
		c.AddMesh(name, data)
	}
	rep, err := Check(&c, cat, s.opts)
	if err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	for _, f := range rep.Findings {
		all.WriteString("\n  " + f.String())
	}
	for _, p := range s.want {
		if !slices.ContainsFunc(rep.Findings, p.matches) {
			t.Errorf("no finding %q (source %s); findings:%s", p, s.source, all.String())
		}
	}
	for _, p := range s.unwanted {
		if i := slices.IndexFunc(rep.Findings, p.matches); i >= 0 {
			t.Errorf("unwanted finding %q: %s (source %s)", p, rep.Findings[i], s.source)
		}
	}
	for method, want := range s.attempts {
		got := attempts(rep, method)
		if got == nil {
			t.Errorf("no report for method %q", method)
			continue
		}
		for l, n := range want {
			if got[l] != n {
				t.Errorf("%s: %s attempts %q, want %q (all: %v; source %s); findings:%s", method, l, got[l], n, got, s.source, all.String())
			}
		}
	}
}
