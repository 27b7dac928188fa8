package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opledger/opledger/examples/payments"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/migrationfs"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/migrations"
	"github.com/opledger/opledger/outbox"
	"github.com/opledger/opledger/outbox/natsjs"
	"github.com/opledger/opledger/policy"
)

// demoStream is the JetStream stream `demo --chain --to` publishes to.
const demoStream = "OPLEDGER_DEMO"

// eventsTarget names where the demo's events go: servers (none: the
// in-memory broker), with every credential masked.
func eventsTarget(servers *natsServers) string {
	if servers == nil {
		return "an in-memory broker that drops repeated message ids"
	}
	return servers.display + " (JetStream stream " + demoStream + ")"
}

// setUpChain adds the fraud check service and the outbox's events to sc:
// the fraud service's ledger lives in another SQLite file (a transfer
// holds its database's write lock while it calls the check) or, on a
// server database, in its own tables of the same database.
func setUpChain(ctx context.Context, sc *payments.Scenario, dsn, dir string, t target, run int64, to string, servers *natsServers, loss float64) (func(), error) {
	fdsn, ledgerTable := dsn, fmt.Sprintf("opledger_demo_fraud_%d", run)
	if dialectkit.TraitsOf(t.dialect).SerialWriters {
		fdsn, ledgerTable = "sqlite:"+filepath.Join(dir, "fraud.db"), "opledger_operations"
	}
	fdb, ft, err := openDB(ctx, fdsn)
	if err != nil {
		return nil, err
	}
	var cleanups []func()
	stop := func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}
	cleanups = append(cleanups, func() { fdb.Close() })
	m, err := migrations.New(fdb, ft.dialect, migrations.WithTable(ledgerTable))
	if err != nil {
		stop()
		return nil, err
	}
	if _, err := m.Up(ctx); err != nil {
		stop()
		return nil, err
	}
	checks := fmt.Sprintf("opledger_demo_checks_%d", run)
	cleanups = append(cleanups, func() {
		c := context.WithoutCancel(ctx)
		_ = payments.DropTable(c, fdb, ft.dialect, checks)
		if !dialectkit.TraitsOf(t.dialect).SerialWriters {
			_, _ = m.Down(c)
			_, _ = fdb.ExecContext(c, "DROP TABLE "+ft.dialect.QuoteIdent(migrationfs.VersionTable(ledgerTable)))
		}
	})
	budget, err := policy.NewBudget(policy.BudgetSettings{TTL: 2 * time.Second, Percent: 1, MinRetriesPerSecond: 5})
	if err != nil {
		stop()
		return nil, err
	}
	sc.Chain = &payments.Chain{DB: fdb, Dialect: ft.dialect, LedgerTable: ledgerTable, Table: checks,
		Faults: payments.FaultSettings{FailBeforeSend: 0.05, Delay: 0.05,
			DropAfterCommit: loss / 3, LoseAfterHeaders: loss / 3, LoseAfterResponse: loss / 3},
		ClientOptions: []keyed.ClientOption{keyed.WithBudget(budget), keyed.WithBudgetFundedBySuccess(), keyed.WithMaxAttempts(8),
			keyed.WithBackoff(policy.Backoff{Initial: 10 * time.Millisecond, Max: 200 * time.Millisecond})}}
	sc.Faults.FailTransaction = 0.1
	sc.RefPrefix = fmt.Sprintf("chain-%d", run)
	if to == "" {
		sc.Events = &memBroker{seen: map[string]bool{}}
		return stop, nil
	}
	nc, err := nats.Connect(to, nats.MaxReconnects(-1), nats.ReconnectWait(200*time.Millisecond))
	if err != nil {
		stop()
		return nil, fmt.Errorf("connect %s: %s", eventsTarget(servers), servers.scrub(err.Error()))
	}
	cleanups = append(cleanups, nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		stop()
		return nil, errors.New(servers.scrub(err.Error()))
	}
	if _, err := ensureStream(ctx, js, demoStream, []string{"opledger.demo.>"}, 0); err != nil {
		stop()
		return nil, fmt.Errorf("%s: %s", eventsTarget(servers), servers.scrub(err.Error()))
	}
	pub, err := natsjs.New(js, natsjs.WithSubjectPrefix("opledger.demo."), natsjs.WithStream(demoStream))
	if err != nil {
		stop()
		return nil, err
	}
	sc.Events = pub
	return stop, nil
}

// memBroker is the demo's default broker: it keeps nothing but the ids it
// has seen, and acknowledges every publish, as a deduplicating broker
// does.
type memBroker struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (b *memBroker) Publish(ctx context.Context, e outbox.Envelope) error {
	if e.ID == "" {
		return errors.New("demo broker: a message without an id")
	}
	b.mu.Lock()
	b.seen[e.ID] = true
	b.mu.Unlock()
	return ctx.Err()
}
