-- opledger transactional outbox, SQLite: the dead-message state.
-- attempts counts the relay's failed publishes of a message; last_error is
-- the publisher's last error. dead_at (Unix microseconds) is set when the
-- publisher refused the message as undeliverable: the relay then sets it
-- aside and holds back only the later messages of its partition key, until
-- an operator retries it (dead_at back to NULL) or discards it (deleted).
-- The partial index holds dead messages only, so enqueueing writes nothing
-- more; the relay's batch looks up in it whether an earlier message of a
-- key is dead.
-- Down removes the state: dead messages become ordinary ones again, which
-- the relay publishes (and the publisher refuses) once more.

-- +goose Up
ALTER TABLE {{.Ident "outbox"}} ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {{.Ident "outbox"}} ADD COLUMN last_error TEXT;
ALTER TABLE {{.Ident "outbox"}} ADD COLUMN dead_at INTEGER;
CREATE INDEX {{.Ident "outbox_dead_idx"}} ON {{.Ident "outbox"}} (partition_key, seq) WHERE dead_at IS NOT NULL;

-- +goose Down
DROP INDEX {{.Ident "outbox_dead_idx"}};
ALTER TABLE {{.Ident "outbox"}} DROP COLUMN dead_at;
ALTER TABLE {{.Ident "outbox"}} DROP COLUMN last_error;
ALTER TABLE {{.Ident "outbox"}} DROP COLUMN attempts;
