package doccheck

import (
	"os"
	"strings"
	"testing"
)

// WantSection fails t unless the file at path holds want between the
// lines "<!-- name:begin -->" and "<!-- name:end -->": a table in the
// docs that a test renders from the code it documents. what names the
// code in the failure message, which shows the text the section should
// hold.
func WantSection(t testing.TB, path, name, what, want string) {
	t.Helper()
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	start, end := "<!-- "+name+":begin -->\n", "<!-- "+name+":end -->"
	s := string(doc)
	i, j := strings.Index(s, start), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("%s has no %q … %q section; it should hold:\n%s", path, strings.TrimSpace(start), end, want)
	}
	if got := s[i+len(start) : j]; got != want {
		t.Errorf("%s's %s section differs from %s; it should read:\n%s", path, name, what, want)
	}
}
