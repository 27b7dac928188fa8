package doccheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const root = "../../.."

// goFiles returns every .go file of the module, each as its normalised
// lines.
func goFiles(t *testing.T) map[string][]string { return sourceFiles(t, ".go", false) }

// sourceFiles returns every file of the repository whose name ends with
// suffix, each as its normalised lines; under testdata/ too when
// testdata is set.
func sourceFiles(t *testing.T, suffix string, testdata bool) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || !testdata && d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, suffix) {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[p] = normalise(string(b))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// normalise drops indentation and blank lines, so that a snippet quoted
// at another depth still matches.
func normalise(src string) []string {
	var out []string
	for _, l := range strings.Split(src, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// snippets returns the ```go blocks of a markdown file with the line each
// starts on.
func snippets(src string) (blocks []string, lines []int) { return fenced(src, "go") }

// fenced returns the ``` blocks of language lang of a markdown file with
// the line each starts on.
func fenced(src, lang string) (blocks []string, lines []int) {
	var cur []string
	in := false
	for i, l := range strings.Split(src, "\n") {
		switch t := strings.TrimSpace(l); {
		case !in && t == "```"+lang:
			in, cur = true, nil
			lines = append(lines, i+1)
		case in && t == "```":
			in = false
			blocks = append(blocks, strings.Join(cur, "\n"))
		case in:
			cur = append(cur, l)
		}
	}
	return blocks, lines
}

func contains(hay, needle []string) bool {
	if len(needle) == 0 {
		return true
	}
outer:
	for i := 0; i+len(needle) <= len(hay); i++ {
		for j := range needle {
			if hay[i+j] != needle[j] {
				continue outer
			}
		}
		return true
	}
	return false
}

// TestSnippetsAreQuoted: every Go snippet in README.md and docs/ appears,
// line for line (indentation aside), in one Go file of the module.
func TestSnippetsAreQuoted(t *testing.T) {
	files := goFiles(t)
	n := 0
	for _, doc := range markdownDocs(t) {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		blocks, lines := snippets(string(b))
		for i, blk := range blocks {
			n++
			want := normalise(blk)
			found := false
			for _, lines := range files {
				if contains(lines, want) {
					found = true
					break
				}
			}
			if !found {
				rel, _ := filepath.Rel(root, doc)
				t.Errorf("%s:%d: this Go snippet is not quoted from any Go file of the module (put it in an Example and quote it):\n%s", rel, lines[i], blk)
			}
		}
	}
	if n == 0 {
		t.Fatal("no Go snippets found: is the path to the docs right?")
	}
}
