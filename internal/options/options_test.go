package options

import (
	"errors"
	"strings"
	"testing"
)

type cfg struct{ a, b int }

type opt struct{ o Option[cfg] }

func withA(n int) opt {
	return opt{New("WithA", func(c *cfg) error {
		if n < 0 {
			return errors.New("negative")
		}
		c.a = n
		return nil
	})}
}

func withB(n int) opt { return opt{New("WithB", func(c *cfg) error { c.b = n; return nil })} }

func apply(opts ...opt) (cfg, error) {
	var c cfg
	err := Apply(&c, opts, func(o opt) Option[cfg] { return o.o })
	return c, err
}

func TestApply(t *testing.T) {
	c, err := apply(withA(1), withB(2))
	if err != nil || c.a != 1 || c.b != 2 {
		t.Fatalf("got %+v, %v", c, err)
	}
	if _, err := apply(withA(1), withA(2)); err == nil || !strings.Contains(err.Error(), "WithA given twice") {
		t.Errorf("duplicate: %v", err)
	}
	if _, err := apply(withA(-1)); err == nil || err.Error() != "WithA: negative" {
		t.Errorf("failing option: %v", err)
	}
	if _, err := apply(withB(1), opt{}); !errors.Is(err, ErrZero) || !strings.Contains(err.Error(), "option 2") {
		t.Errorf("zero option: %v", err)
	}
	if c, err := apply(); err != nil || c != (cfg{}) {
		t.Errorf("no options: %+v, %v", c, err)
	}
}
