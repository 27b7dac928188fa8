package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// defaultDuplicateWindow is the duplicate window ensureStream gives a
// stream it creates: JetStream's own default.
const defaultDuplicateWindow = 2 * time.Minute

// ensureStream returns the stream called name, creating it when missing
// with subjects, file storage and a duplicate window of dupWindow
// (defaultDuplicateWindow when zero). An existing stream is left as it is;
// one without a duplicate window is an error, since it would store the
// relay's re-sends.
func ensureStream(ctx context.Context, js jetstream.JetStream, name string, subjects []string, dupWindow time.Duration) (jetstream.Stream, error) {
	if dupWindow <= 0 {
		dupWindow = defaultDuplicateWindow
	}
	s, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: subjects,
			Storage: jetstream.FileStorage, Duplicates: dupWindow})
	}
	if err != nil {
		return nil, fmt.Errorf("natsjs: stream %s: %w", name, err)
	}
	if s.CachedInfo().Config.Duplicates <= 0 {
		return nil, fmt.Errorf("natsjs: stream %s has no duplicate window", name)
	}
	return s, nil
}
