package memfs

import (
	"testing"
	"testing/fstest"
)

func TestFS(t *testing.T) {
	m := FS{"00001_a.sql": []byte("-- a\n"), "00002_b.sql": []byte("-- bb\n")}
	if err := fstest.TestFS(m, "00001_a.sql", "00002_b.sql"); err != nil {
		t.Fatal(err)
	}
}
