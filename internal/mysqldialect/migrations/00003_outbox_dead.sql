-- opledger transactional outbox, MySQL / MariaDB (InnoDB) and TiDB: the
-- dead-message state. attempts counts the relay's failed publishes of a
-- message; last_error is the publisher's last error. dead_at (Unix
-- microseconds) is set when the publisher refused the message as
-- undeliverable: the relay then sets it aside and holds back only the later
-- messages of its partition key, until an operator retries it (dead_at back
-- to NULL) or discards it (deleted). InnoDB has no partial index: the relay's
-- batch looks up whether an earlier message of a key is dead in (dead_at,
-- partition_key), whose entries also carry seq (the primary key): the live
-- messages' entries (NULL) come first and the lookup ranges over the dead
-- ones only, however many messages wait for one key.
--
-- Two statements each way, never one: TiDB checks every change of an ALTER
-- TABLE against the table as it was before the statement, so it refuses an
-- index on a column added by the same statement ("Error 1072: column does
-- not exist: dead_at") and the drop of a column that an index covers, even
-- when the same statement drops that index first ("Error 8200: can't drop
-- column dead_at with composite index covered"). TestTiDBDDLRules
-- (dialects/mysql/tidbddl_test.go) holds every statement to those rules.
-- MySQL does not roll back DDL: should the second statement fail, the first
-- stays, and the migration is not recorded; a set-up that started with no
-- ledger table is undone by package migrations, and an upgrade must drop the
-- three columns by hand before it runs again.
-- Down removes the state: dead messages become ordinary ones again, which
-- the relay publishes (and the publisher refuses) once more.

-- +goose Up
ALTER TABLE {{.Ident "outbox"}}
    ADD COLUMN attempts   INT     NOT NULL DEFAULT 0,
    ADD COLUMN last_error TEXT    CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    ADD COLUMN dead_at    BIGINT  NULL;
ALTER TABLE {{.Ident "outbox"}}
    ADD INDEX {{.Ident "outbox_dead_idx"}} (dead_at, partition_key);

-- +goose Down
ALTER TABLE {{.Ident "outbox"}}
    DROP INDEX {{.Ident "outbox_dead_idx"}};
ALTER TABLE {{.Ident "outbox"}}
    DROP COLUMN dead_at,
    DROP COLUMN last_error,
    DROP COLUMN attempts;
