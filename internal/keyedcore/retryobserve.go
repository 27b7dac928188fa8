package keyedcore

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/opledger/opledger/internal/telemetry"
)

// Retries judges a request's retry headers (see [JudgeRetries]) against
// the owner its client declares, else the server's (ServerConfig.
// RetryOwner), else the method's kind (retrySafe: the catalog lets a
// layer retry the method), and records what it found: each layer that
// retried the request counts once in opledger.server.retries_by_layer,
// and the first retry of each method by each layer that is a second owner
// is logged, at Warn ("opledger: second retry owner"). A transport calls
// it for every request of a method its catalog knows, before running it;
// resolve requests, which run nothing, are not judged. method must come
// from a bounded set (the catalog's methods, a middleware's routes): the
// server remembers which pairs it logged. A request with no count header
// at all is every layer's first attempt: its judgement is empty, and its
// declaration is not read.
func (s *Server) Retries(ctx context.Context, method string, h RetryHeaders, retrySafe bool) RetryJudgement {
	if h.Attempt == nil && h.EnvoyAttempt == nil && h.PreviousAttempts == nil {
		return RetryJudgement{} // a first attempt everywhere: nothing to judge
	}
	j := JudgeRetries(h, s.owner, retrySafe)
	if len(j.Retries) > 0 {
		s.obs.retried(ctx, method, j)
	}
	return j
}

// loggedPair is a method and a layer whose second owner was logged.
type loggedPair struct {
	method string
	layer  Layer
}

// retried records the retries of one request.
func (o *observer) retried(ctx context.Context, method string, j RetryJudgement) {
	owner := ""
	if j.Owner.Valid() {
		owner = j.Owner.String()
	}
	for _, r := range j.Retries {
		if o.retries.Enabled(ctx) {
			attrs := []attribute.KeyValue{telemetry.Method.String(method), telemetry.RetryLayer.String(string(r.Layer)),
				telemetry.SecondOwner.Bool(r.SecondOwner)}
			if owner != "" {
				attrs = append(attrs, telemetry.Owner.String(owner))
			}
			o.retries.Add(ctx, 1, metric.WithAttributes(attrs...))
		}
		if !r.SecondOwner || !o.log.Enabled(ctx, slog.LevelWarn) {
			continue
		}
		if _, seen := o.logged.LoadOrStore(loggedPair{method, r.Layer}, true); seen {
			continue
		}
		against := owner
		if against == "" {
			against = "unknown"
		}
		o.log.LogAttrs(ctx, slog.LevelWarn, "opledger: second retry owner",
			slog.String(telemetry.LogMethod, method), slog.String("layer", string(r.Layer)), slog.String("owner", against),
			slog.String("owner_from", string(j.From)), slog.String("header", r.Header), slog.Int("attempt", r.Attempt))
	}
}
