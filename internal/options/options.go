// Package options is the one option style of the kit's packages:
// functional options on an unexported config, each with a name, that can
// fail and that may not be given twice. Each package wraps [Option] in its
// own exported Option type so that callers only see that type and its
// With functions.
package options

import (
	"errors"
	"fmt"
)

// Option is one named option for a config of type C.
type Option[C any] struct {
	name  string
	apply func(*C) error
}

// New returns an option called name (the With function's name, as error
// messages show it) that applies f.
func New[C any](name string, f func(*C) error) Option[C] {
	return Option[C]{name: name, apply: f}
}

// Name returns the option's name.
func (o Option[C]) Name() string { return o.name }

// ErrZero is returned (wrapped) for an Option that was not built by a With
// function: its zero value.
var ErrZero = errors.New("zero option (build options with the With functions)")

// Apply applies opts to c in order. It stops at the first option that
// fails, and refuses a zero option and an option given twice: two
// WithTable calls are a mistake, not a way to override.
func Apply[C any, O any](c *C, opts []O, get func(O) Option[C]) error {
	seen := make(map[string]bool, len(opts))
	for i, raw := range opts {
		o := get(raw)
		if o.apply == nil {
			return fmt.Errorf("option %d: %w", i+1, ErrZero)
		}
		if seen[o.name] {
			return fmt.Errorf("option %s given twice", o.name)
		}
		seen[o.name] = true
		if err := o.apply(c); err != nil {
			return fmt.Errorf("%s: %w", o.name, err)
		}
	}
	return nil
}
