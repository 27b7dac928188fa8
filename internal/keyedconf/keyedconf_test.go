package keyedconf

import (
	"errors"
	"strings"
	"testing"
	"time"
)

type ownA struct{ n int }
type ownB struct{}

// TestApply: the rules every transport's constructor gets from one place:
// a shared option it refuses, another transport's own option, an option
// given twice and a nil option are errors; its own options set its own
// settings.
func TestApply(t *testing.T) {
	lockWait := func(d time.Duration) ServerOpt {
		return ServerOption("WithLockWait", func(c *Server) error { c.LockWait = d; return nil })
	}
	setN := OwnServer("a", "WithN", func(o *ownA) error { o.n = 7; return nil })

	var a ownA
	c := NewServer("a", &a, map[string]string{"WithTypeResolver": "no messages"})
	if err := ApplyServer(&c, []ServerOpt{lockWait(time.Second), setN}); err != nil || c.LockWait != time.Second || a.n != 7 {
		t.Fatalf("apply: %v, %v, %d", err, c.LockWait, a.n)
	}
	for name, tc := range map[string]struct {
		opts []interface{ ApplyToServer(*Server) error }
		want string
	}{
		"twice":   {[]interface{ ApplyToServer(*Server) error }{lockWait(1), lockWait(2)}, "WithLockWait given twice"},
		"refused": {[]interface{ ApplyToServer(*Server) error }{ServerOption("WithTypeResolver", func(*Server) error { return nil })}, "a cannot honour it: no messages"},
		"other's": {[]interface{ ApplyToServer(*Server) error }{OwnServer("b", "WithB", func(*ownB) error { return nil })}, "WithB: an option of b; a cannot honour it"},
		"nil":     {[]interface{ ApplyToServer(*Server) error }{nil}, "option 1: nil option"},
		"failing": {[]interface{ ApplyToServer(*Server) error }{ServerOption("WithX", func(*Server) error { return errors.New("bad") })}, "WithX: bad"},
	} {
		c := NewServer("a", &ownA{}, map[string]string{"WithTypeResolver": "no messages"})
		if err := ApplyServer(&c, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
	// The telemetry options configure both sides; none given is nil.
	tel := TelemetryOption("WithLogger", func(*Telemetry) error { return nil })
	cl := NewClient("a", nil, nil)
	if cl.Telemetry != nil {
		t.Error("telemetry without a telemetry option")
	}
	if err := ApplyClient(&cl, []BothOpt{tel}); err != nil || cl.Telemetry == nil || cl.MaxAttempts != DefaultMaxAttempts {
		t.Errorf("client: %v, %+v", err, cl)
	}
}
