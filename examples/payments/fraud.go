package payments

import (
	"context"
	"database/sql"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/policy"
	"github.com/opledger/opledger/txmiddleware"
)

// DefaultFraudTable is the fraud check service's business table.
const DefaultFraudTable = "payments_fraud_checks"

// FraudLimitCents is the largest amount the fraud check approves.
const FraudLimitCents = 10_000_000

// FraudCaller is the principal the payments service authenticates as to
// the fraud check service (with a bearer token the fraud service issued
// it, see Tokens).
const FraudCaller = "payments"

// FraudService implements paymentspb.FraudServer: a ledger-backed
// downstream that records every check it makes in its own table, in the
// transaction of its own ledger claim.
type FraudService struct {
	insert string
}

// NewFraudService returns the service for a table (created by
// CreateFraudTable) in the database of dialect d.
func NewFraudService(d dialects.Dialect, table string) (*FraudService, error) {
	if d == nil {
		return nil, errors.New("payments: nil dialect")
	}
	if err := dialectkit.CheckTableName(table); err != nil {
		return nil, err
	}
	ph := d.Placeholder
	return &FraudService{insert: "INSERT INTO " + d.QuoteIdent(table) + " (id, reference, amount_cents, approved) VALUES (" +
		ph(1) + ", " + ph(2) + ", " + ph(3) + ", " + ph(4) + ")"}, nil
}

// CreateFraudTable creates the fraud check table if it does not exist.
// Like the transfers table it has no unique constraint on the reference:
// the ledger is what keeps a check from being recorded twice.
func CreateFraudTable(ctx context.Context, db *sql.DB, d dialects.Dialect, table string) error {
	if err := dialectkit.CheckTableName(table); err != nil {
		return err
	}
	_, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+d.QuoteIdent(table)+
		" (id BIGINT NOT NULL PRIMARY KEY, reference VARCHAR(128) NOT NULL, amount_cents BIGINT NOT NULL, approved INTEGER NOT NULL)")
	return err
}

// Check records one check: amounts up to FraudLimitCents are approved.
func (f *FraudService) Check(ctx context.Context, req *paymentspb.FraudCheckRequest) (*paymentspb.FraudCheckReply, error) {
	if req.GetAmountCents() <= 0 || req.GetReference() == "" {
		return nil, status.Error(codes.InvalidArgument, "a check needs a reference and a positive amount")
	}
	tx, ok := txmiddleware.TxFromContext(ctx)
	if !ok {
		return nil, status.Error(codes.Internal, "payments: Check must run behind the grpcint server interceptor")
	}
	approved := req.GetAmountCents() <= FraudLimitCents
	id := newTransferID()
	if _, err := tx.ExecContext(ctx, f.insert, id, req.GetReference(), req.GetAmountCents(), boolInt(approved)); err != nil {
		return nil, err
	}
	reply := &paymentspb.FraudCheckReply{CheckId: id, Approved: approved}
	if !approved {
		reply.Reason = "amount above the limit"
	}
	return reply, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// DialFraud is the payments service's channel to the fraud check
// service: the kit's client with WithDownstreamKeys, so that a Check
// called from a Transfer handler carries the key derived from the
// transfer's operation. kitOpts and extra are added to the kit's client
// options and dial options; extra holds the transport credentials and the
// payments service's own (grpc.WithPerRPCCredentials(BearerToken(token))
// with the token the fraud service issued to FraudCaller).
func DialFraud(target string, kitOpts []keyed.ClientOption, extra ...grpc.DialOption) (*grpc.ClientConn, *grpcint.Client, error) {
	cat, err := Catalog()
	if err != nil {
		return nil, nil, err
	}
	client, err := grpcint.NewClient(cat, policy.OwnerApplication, append([]keyed.ClientOption{keyed.WithDownstreamKeys()}, kitOpts...)...)
	if err != nil {
		return nil, nil, err
	}
	opts, err := client.DialOptions()
	if err != nil {
		return nil, nil, err
	}
	conn, err := grpc.NewClient(target, append(opts, extra...)...)
	if err != nil {
		return nil, nil, err
	}
	return conn, client, nil
}
