package units

import (
	"testing"
	"time"
)

func TestMillis(t *testing.T) {
	cases := map[time.Duration]int64{
		-time.Second:                     1,
		0:                                1,
		time.Nanosecond:                  1,
		time.Millisecond:                 1,
		time.Millisecond + 1:             2,
		1500 * time.Microsecond:          2,
		time.Second:                      1000,
		time.Minute + time.Millisecond/2: 60001,
	}
	for d, want := range cases {
		if got := Millis(d); got != want {
			t.Errorf("Millis(%v) = %d, want %d", d, got, want)
		}
	}
}
