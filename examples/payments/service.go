package payments

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/options"
	"github.com/opledger/opledger/outbox"
	"github.com/opledger/opledger/pgxledger"
	"github.com/opledger/opledger/policy"
	"github.com/opledger/opledger/txmiddleware"
)

// DefaultTable is the business table of the example.
const DefaultTable = "payments_transfers"

// TransferCompletedTopic is the topic of the TransferCompleted events
// (the NATS subject, with the publisher's prefix).
const TransferCompletedTopic = "payments.transfers.completed"

// Catalog returns the method catalog of the Payments and Fraud services,
// read from their descriptors alone: GetTransfer is NO_SIDE_EFFECTS there,
// and Transfer and Fraud.Check carry the (opledger.v1.keyed) option, which
// makes them keyed mutations backed by a durable ledger.
func Catalog() (*policy.Catalog, error) {
	files := new(protoregistry.Files)
	if err := files.RegisterFile(paymentspb.File_payments_proto); err != nil {
		return nil, err
	}
	return policy.CatalogFromFiles(files)
}

// Service implements paymentspb.PaymentsServer over a SQL table.
type Service struct {
	db      *sql.DB
	table   string
	insert  string
	selectQ string
	fraud   paymentspb.FraudClient
	events  *outbox.Outbox
}

// ServiceOption configures a Service; the With functions build them.
// Giving the same option twice is an error.
type ServiceOption struct{ o options.Option[Service] }

// WithFraudCheck makes every transfer call the fraud check service first
// (the chain): a declined check is the transfer's final answer,
// FAILED_PRECONDITION. Dial fc with DialFraud, whose client attaches the
// key derived from the transfer's own operation (keyed.DownstreamKey),
// so that a retried transfer replays its check.
func WithFraudCheck(fc paymentspb.FraudClient) ServiceOption {
	return ServiceOption{options.New("WithFraudCheck", func(s *Service) error {
		if fc == nil {
			return errors.New("nil fraud client")
		}
		s.fraud = fc
		return nil
	})}
}

// WithEvents makes every transfer emit a TransferCompleted event through
// ob, in the transfer's transaction (topic TransferCompletedTopic,
// partition key the source account).
func WithEvents(ob *outbox.Outbox) ServiceOption {
	return ServiceOption{options.New("WithEvents", func(s *Service) error {
		if ob == nil {
			return errors.New("nil outbox")
		}
		s.events = ob
		return nil
	})}
}

// NewService returns the service for a table in db (created by
// CreateTable). d is the database's dialect; table must be a plain
// identifier.
func NewService(db *sql.DB, d dialects.Dialect, table string, opts ...ServiceOption) (*Service, error) {
	if db == nil || d == nil {
		return nil, errors.New("payments: database and dialect must not be nil")
	}
	if err := dialectkit.CheckTableName(table); err != nil {
		return nil, err
	}
	q := d.QuoteIdent(table)
	ph := d.Placeholder
	s := &Service{db: db, table: table,
		insert: "INSERT INTO " + q + " (id, from_account, to_account, amount_cents, reference) VALUES (" +
			ph(1) + ", " + ph(2) + ", " + ph(3) + ", " + ph(4) + ", " + ph(5) + ")",
		selectQ: "SELECT id, from_account, to_account, amount_cents, reference FROM " + q + " WHERE id = " + ph(1),
	}
	if err := options.Apply(s, opts, func(o ServiceOption) options.Option[Service] { return o.o }); err != nil {
		return nil, fmt.Errorf("payments: %w", err)
	}
	return s, nil
}

// Table returns the business table's name.
func (s *Service) Table() string { return s.table }

// CreateTable creates the business table if it does not exist, in SQL
// every supported database accepts. The reference column is deliberately
// not unique: the ledger, not the business schema, is what keeps a
// retried transfer from being recorded twice, and the demo counts rows per
// reference to prove it.
func CreateTable(ctx context.Context, db *sql.DB, d dialects.Dialect, table string) error {
	if err := dialectkit.CheckTableName(table); err != nil {
		return err
	}
	_, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+d.QuoteIdent(table)+
		" (id BIGINT NOT NULL PRIMARY KEY, from_account VARCHAR(64) NOT NULL, to_account VARCHAR(64) NOT NULL,"+
		" amount_cents BIGINT NOT NULL, reference VARCHAR(128) NOT NULL)")
	return err
}

// DropTable drops the business table.
func DropTable(ctx context.Context, db *sql.DB, d dialects.Dialect, table string) error {
	if err := dialectkit.CheckTableName(table); err != nil {
		return err
	}
	_, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+d.QuoteIdent(table))
	return err
}

// newTransferID returns a random positive 63-bit id: the service picks its
// ids itself, so one INSERT works on every database (no RETURNING, no
// LAST_INSERT_ID).
func newTransferID() int64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return int64(binary.BigEndian.Uint64(b[:]) >> 1)
}

// Transfer records one transfer in the transaction of the ledger claim.
// A non-positive amount or equal accounts is INVALID_ARGUMENT, which the
// kit records as the call's final outcome: a retry gets the same error.
func (s *Service) Transfer(ctx context.Context, req *paymentspb.TransferRequest) (*paymentspb.TransferReply, error) {
	switch {
	case req.GetAmountCents() <= 0:
		return nil, status.Error(codes.InvalidArgument, "amount_cents must be positive")
	case req.GetFromAccount() == "" || req.GetToAccount() == "":
		return nil, status.Error(codes.InvalidArgument, "both accounts are required")
	case req.GetFromAccount() == req.GetToAccount():
		return nil, status.Error(codes.InvalidArgument, "from_account and to_account must differ")
	}
	var checkID int64
	if s.fraud != nil {
		// The chain: the client from DialFraud sends the key derived from
		// this transfer's operation, the same on every run of this
		// handler, so the fraud service replays a check it already made.
		check, err := s.fraud.Check(ctx, &paymentspb.FraudCheckRequest{Reference: req.GetReference(),
			FromAccount: req.GetFromAccount(), ToAccount: req.GetToAccount(), AmountCents: req.GetAmountCents()})
		switch c := status.Code(err); {
		case err == nil:
		case c == codes.InvalidArgument || c == codes.FailedPrecondition:
			return nil, status.Error(codes.FailedPrecondition, "the fraud check refused the transfer: "+status.Convert(err).Message())
		default:
			return nil, status.Error(codes.Unavailable, "payments: the fraud check failed; nothing was committed: "+status.Convert(err).Message())
		}
		if !check.GetApproved() {
			return nil, status.Error(codes.FailedPrecondition, "declined by the fraud check: "+check.GetReason())
		}
		checkID = check.GetCheckId()
	}
	// Served on pgx's transactions (pgxledger.Transactions), the claim is
	// in a pgx.Tx; on database/sql's, in a *sql.Tx.
	if tx, ok := pgxledger.TxFromContext(ctx); ok {
		return s.transferPgx(ctx, tx, req, checkID)
	}
	tx, ok := txmiddleware.TxFromContext(ctx)
	if !ok {
		return nil, status.Error(codes.Internal, "payments: Transfer must run behind the grpcint server interceptor")
	}
	id := newTransferID()
	if _, err := tx.ExecContext(ctx, s.insert, id, req.GetFromAccount(), req.GetToAccount(), req.GetAmountCents(), req.GetReference()); err != nil {
		return nil, err
	}
	if s.events != nil {
		ev, err := proto.Marshal(&paymentspb.TransferCompleted{TransferId: id, FromAccount: req.GetFromAccount(),
			ToAccount: req.GetToAccount(), AmountCents: req.GetAmountCents(), Reference: req.GetReference(), FraudCheckId: checkID})
		if err != nil {
			return nil, err
		}
		if _, err := s.events.Enqueue(ctx, tx, outbox.Message{Name: "TransferCompleted", Topic: TransferCompletedTopic,
			Key: req.GetFromAccount(), Payload: ev}); err != nil {
			return nil, err
		}
	}
	return &paymentspb.TransferReply{
		TransferId: id, FromAccount: req.GetFromAccount(), ToAccount: req.GetToAccount(),
		AmountCents: req.GetAmountCents(), Reference: req.GetReference(),
	}, nil
}

// GetTransfer reads one transfer; NOT_FOUND if there is none.
func (s *Service) GetTransfer(ctx context.Context, req *paymentspb.GetTransferRequest) (*paymentspb.TransferReply, error) {
	r := &paymentspb.TransferReply{}
	err := s.db.QueryRowContext(ctx, s.selectQ, req.GetTransferId()).Scan(&r.TransferId, &r.FromAccount, &r.ToAccount, &r.AmountCents, &r.Reference)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, status.Error(codes.NotFound, "no such transfer")
	}
	if err != nil {
		return nil, status.Error(codes.Unavailable, "payments: database unavailable")
	}
	return r, nil
}
