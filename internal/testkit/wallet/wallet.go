// Package wallet is the test fixture service of the transport tests
// (grpcint's, connectint's, xdstest's): [Service] implements
// walletpb.WalletServer over a SQL table, [Catalog] says which of its
// methods are keyed, and [Tokens] stands in for a service's own
// authentication. The library's tests serve it instead of the example
// payments service, so that no test of the library imports the examples.
package wallet

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/pgxledger"
	"github.com/opledger/opledger/policy"
	"github.com/opledger/opledger/txmiddleware"
)

// DefaultTable is the deposits table of the examples.
const DefaultTable = "wallet_deposits"

// Catalog returns the method catalog of the Wallet service, read from its
// descriptor (GetDeposit is NO_SIDE_EFFECTS there), with Deposit marked
// as a keyed mutation backed by a durable ledger.
func Catalog() (*policy.Catalog, error) {
	c, err := policy.CatalogFromDescriptorSet(&descriptorpb.FileDescriptorSet{
		File: []*descriptorpb.FileDescriptorProto{protodesc.ToFileDescriptorProto(walletpb.File_wallet_proto)},
	})
	if err != nil {
		return nil, err
	}
	return c.WithKeyed(walletpb.DepositMethod, true)
}

// Service implements walletpb.WalletServer over a deposits table.
type Service struct {
	db             *sql.DB
	insert, lookup string
}

// NewService returns the service for table in db (made by [CreateTable]);
// d is the database's dialect.
func NewService(db *sql.DB, d dialects.Dialect, table string) (*Service, error) {
	if db == nil || d == nil {
		return nil, errors.New("wallet: nil database or dialect")
	}
	if err := dialectkit.CheckTableName(table); err != nil {
		return nil, err
	}
	q, p := d.QuoteIdent(table), d.Placeholder
	return &Service{db: db,
		insert: "INSERT INTO " + q + " (id, account, amount, reference) VALUES (" + p(1) + ", " + p(2) + ", " + p(3) + ", " + p(4) + ")",
		lookup: "SELECT id, account, amount, reference FROM " + q + " WHERE id = " + p(1),
	}, nil
}

// CreateTable creates the deposits table if it is not there. Its
// reference column is not unique on purpose: the ledger, not the schema,
// keeps a retried deposit from being made twice, and the tests count the
// rows of a reference to see it.
func CreateTable(ctx context.Context, db *sql.DB, d dialects.Dialect, table string) error {
	return ddl(ctx, db, d, table, "CREATE TABLE IF NOT EXISTS %s (id BIGINT NOT NULL PRIMARY KEY,"+
		" account VARCHAR(64) NOT NULL, amount BIGINT NOT NULL, reference VARCHAR(128) NOT NULL)")
}

// DropTable drops the deposits table.
func DropTable(ctx context.Context, db *sql.DB, d dialects.Dialect, table string) error {
	return ddl(ctx, db, d, table, "DROP TABLE IF EXISTS %s")
}

// ddl runs stmt on db with table, a plain identifier, quoted in its %s.
func ddl(ctx context.Context, db *sql.DB, d dialects.Dialect, table, stmt string) error {
	if err := dialectkit.CheckTableName(table); err != nil {
		return err
	}
	_, err := db.ExecContext(ctx, fmt.Sprintf(stmt, d.QuoteIdent(table)))
	return err
}

// Deposit writes one row in the transaction of the ledger's claim (a
// *sql.Tx, or a pgx.Tx when served on pgxledger's transactions). A
// non-positive amount or no account is INVALID_ARGUMENT, a final outcome.
func (s *Service) Deposit(ctx context.Context, req *walletpb.DepositRequest) (*walletpb.DepositReply, error) {
	if req.GetAmount() <= 0 {
		return nil, status.Error(codes.InvalidArgument, "amount must be positive")
	}
	if req.GetAccount() == "" {
		return nil, status.Error(codes.InvalidArgument, "account is required")
	}
	r := &walletpb.DepositReply{DepositId: NewID(), Account: req.GetAccount(), Amount: req.GetAmount(), Reference: req.GetReference()}
	args := []any{r.DepositId, r.Account, r.Amount, r.Reference}
	var err error
	if tx, ok := pgxledger.TxFromContext(ctx); ok {
		_, err = tx.Exec(ctx, s.insert, args...)
	} else if tx, ok := txmiddleware.TxFromContext(ctx); ok {
		_, err = tx.ExecContext(ctx, s.insert, args...)
	} else {
		return nil, status.Error(codes.Internal, "wallet: Deposit runs behind the kit's server interceptor")
	}
	if err != nil {
		return nil, err
	}
	return r, nil
}

// GetDeposit reads one deposit: NOT_FOUND when there is none.
func (s *Service) GetDeposit(ctx context.Context, req *walletpb.GetDepositRequest) (*walletpb.DepositReply, error) {
	r := &walletpb.DepositReply{}
	err := s.db.QueryRowContext(ctx, s.lookup, req.GetDepositId()).Scan(&r.DepositId, &r.Account, &r.Amount, &r.Reference)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, status.Error(codes.NotFound, "no such deposit")
	case err != nil:
		return nil, status.Error(codes.Unavailable, "wallet: "+err.Error())
	}
	return r, nil
}

// NewID returns a random positive 63-bit id: the service picks its ids,
// so that one INSERT works on every database.
func NewID() int64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return int64(binary.BigEndian.Uint64(b[:]) >> 1)
}
