package doccheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestProtoSnippetsAreQuoted: every ```proto snippet of README.md and
// docs/ that uses the kit's published package (opledger.v1) appears, line
// for line (indentation aside), in one .proto file of the repository, so
// that what the documents show of the option compiles and is what the
// catalog reads. Other proto snippets illustrate plain protobuf and are
// not checked.
func TestProtoSnippetsAreQuoted(t *testing.T) {
	files := sourceFiles(t, ".proto", true)
	n := 0
	for _, doc := range markdownDocs(t) {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		blocks, lines := fenced(string(b), "proto")
		for i, blk := range blocks {
			if !strings.Contains(blk, "opledger.v1") && !strings.Contains(blk, "opledger/v1") {
				continue
			}
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
				t.Errorf("%s:%d: this proto snippet is not quoted from any .proto file of the repository:\n%s", rel, lines[i], blk)
			}
		}
	}
	if n == 0 {
		t.Fatal("no proto snippet uses opledger.v1: docs/protocol.md's 'Declaring keyed methods' should")
	}
}
