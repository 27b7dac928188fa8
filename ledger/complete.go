package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/opledger/opledger/internal/ledgerkit"
)

// Complete records r as the result of c in tx, which must be the
// transaction that acquired c. It returns ErrNotAcquired for a replay, a
// claim from another transaction or store, or a claim already completed,
// and ErrInvalid for a result over the size limit.
func (s *Store) Complete(ctx context.Context, tx *sql.Tx, c *Claim, r Result) error {
	return s.core.Complete(ctx, tx, c, r)
}

// Complete records r as the result of c in tx. It behaves as
// [Store.Complete].
func (s *txStore[TX]) Complete(ctx context.Context, tx TX, c *Claim, r Result) error {
	var id Identity
	if c != nil {
		id = c.Identity
	}
	ctx, op := s.obs.begin(ctx, "opledger.complete", id)
	err := s.complete(ctx, tx, c, r)
	s.obs.completed(ctx, op, c, err)
	return err
}

// mine checks that c is an acquisition of this store in tx, not yet
// completed, and that r is within the limits.
func (s *txStore[TX]) mine(tx TX, c *Claim, r Result) error {
	if isNil(tx) {
		return invalid("tx", "transaction must not be nil")
	}
	if c == nil || c.Outcome != Acquired || !sameTx(c.tx, tx) || c.owner != any(s) || c.completed {
		return ErrNotAcquired
	}
	return s.checkResult(r)
}

// checkResult refuses a result over the limits.
func (s *txStore[TX]) checkResult(r Result) error {
	if len(r.Response) > s.maxResult {
		return invalid("result", fmt.Sprintf("response of %d bytes exceeds the limit of %d", len(r.Response), s.maxResult))
	}
	if r.Code > ledgerkit.MaxCode {
		return invalid("result", "code above 2147483647")
	}
	return checkTypeName(r.TypeName)
}

func checkTypeName(name string) error {
	switch {
	case len(name) > ledgerkit.MaxTypeNameLen:
		return invalid("result", "type name longer than 512 bytes")
	case !utf8.ValidString(name):
		return invalid("result", "type name is not valid UTF-8")
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return invalid("result", "type name contains a control character")
	}
	return nil
}

// completeArgs are the arguments of Complete and of the pipelined form.
func (s *txStore[TX]) completeArgs(c *Claim, r Result) []any {
	resp := r.Response
	if resp == nil {
		resp = []byte{}
	}
	args := []any{int64(r.Code), resp, r.TypeName, micros(s.now()), c.Identity.id[:]}
	if s.byBirth != nil {
		args = append(args, c.Identity.birth)
	}
	return args
}

func (s *txStore[TX]) complete(ctx context.Context, tx TX, c *Claim, r Result) error {
	if err := s.mine(tx, c, r); err != nil {
		return err
	}
	n, err := s.drv.Exec(ctx, tx, s.byHour(s.q.Complete, c.Identity.birth), s.completeArgs(c, r)...)
	if err != nil {
		return s.fail(ctx, "complete", err)
	}
	if n != 1 {
		return fmt.Errorf("ledger: complete: entry not pending (%d rows): %w", n, ErrNotAcquired)
	}
	c.completed = true
	return nil
}
