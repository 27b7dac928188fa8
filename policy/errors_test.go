package policy

import (
	"errors"
	"testing"
)

// A catalog's errors match ErrInvalidConfig, and keep their own message.
func TestCatalogErrorsAreInvalidConfig(t *testing.T) {
	p := MethodPolicy{FullMethod: "/a.B/C", Kind: KindIdempotent}
	_, err := NewCatalog(p, p)
	if !errors.Is(err, ErrInvalidConfig) || !errors.Is(err, errDuplicateMethod) {
		t.Fatalf("NewCatalog with a method twice: %v, want ErrInvalidConfig", err)
	}
	if _, err := NewCatalog(MethodPolicy{FullMethod: "x"}); !errors.Is(err, ErrInvalidConfig) || !errors.Is(err, errInvalidMethodName) {
		t.Fatalf("NewCatalog with a bad name: %v, want ErrInvalidConfig", err)
	}
}
