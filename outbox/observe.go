package outbox

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/telemetry"
)

// relayObserver holds a relay's instruments.
type relayObserver struct {
	published, failedBatches, dead metric.Int64Counter
	attrs                          metric.AddOption // db.system.name, db.collection.name
}

func newRelayObserver(ob *Outbox, mp metric.MeterProvider) *relayObserver {
	m := telemetry.MeterProvider(mp).Meter(telemetry.ScopePrefix + "outbox")
	return &relayObserver{
		published: telemetry.Inst(m.Int64Counter("opledger.outbox.published", metric.WithUnit("{message}"),
			metric.WithDescription("Messages of the outbox the publisher acknowledged."))),
		failedBatches: telemetry.Inst(m.Int64Counter("opledger.outbox.failed_batches", metric.WithUnit("{batch}"),
			metric.WithDescription("Relay batches that stopped at a failure and are retried after a backoff."))),
		dead: telemetry.Inst(m.Int64Counter("opledger.outbox.dead", metric.WithUnit("{message}"),
			metric.WithDescription("Messages set aside as undeliverable: each holds back the rest of its partition key until retried or discarded."))),
		attrs: metric.WithAttributeSet(attribute.NewSet(
			telemetry.DBSystemName.String(dialectkit.SystemNameOf(ob.d)),
			telemetry.DBCollectionName.String(ob.table),
		)),
	}
}
