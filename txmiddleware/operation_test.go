package txmiddleware_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/opledger/opledger/ledger"
)

// TestWorkCarriesOperation: every run of the work, the first and a retry
// after a transient failure, finds the operation's identity in its
// context.
func TestWorkCarriesOperation(t *testing.T) {
	forEachTarget(t, 2, func(t *testing.T, e *env) {
		r := e.runner(t)
		rq := req(t, "operation-in-context")
		var seen []ledger.Identity
		_, err := r.Run(context.Background(), rq, func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
			id, ok := ledger.OperationFromContext(ctx)
			if !ok {
				t.Fatal("the work's context carries no operation")
			}
			seen = append(seen, id)
			if len(seen) == 1 {
				return ledger.Result{}, transientErr{}
			}
			return ledger.Result{Response: []byte("ok")}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(seen) != 2 || seen[0].ID() != rq.Identity.ID() || seen[1].ID() != rq.Identity.ID() {
			t.Fatalf("runs saw %v, want the claimed identity twice", seen)
		}
	}, "sqlite")
}

// transientErr matches ledger.ErrRetryable, which the runner retries.
type transientErr struct{}

func (transientErr) Error() string        { return "injected transient failure" }
func (transientErr) Is(target error) bool { return target == ledger.ErrRetryable }
