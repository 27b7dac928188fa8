package policy

import (
	"errors"
	"testing"
)

// The old name of the configuration error is the same value, so that
// errors.Is matches either way for one release.
func TestErrInvalidSettingsIsErrInvalidConfig(t *testing.T) {
	_, err := NewBudget(BudgetSettings{TTL: -1})
	if !errors.Is(err, ErrInvalidConfig) || !errors.Is(err, ErrInvalidSettings) {
		t.Fatalf("NewBudget: %v, want ErrInvalidConfig and ErrInvalidSettings", err)
	}
}
