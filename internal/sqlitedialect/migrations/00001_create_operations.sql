-- opledger operation ledger, SQLite.
-- id is SHA-256 over the length-prefixed (caller, method, key hash) triple:
-- one compact 32-byte primary key holds the whole identity. caller and method
-- are kept for operators. Times are Unix microseconds. completed_at IS NULL
-- means the entry has no result yet.

-- +goose Up
CREATE TABLE {{.Table}} (
    id            BLOB    NOT NULL PRIMARY KEY,
    caller        TEXT    NOT NULL,
    method        TEXT    NOT NULL,
    request_fp    BLOB    NOT NULL,
    code          INTEGER,
    response      BLOB,
    response_type TEXT,
    created_at    INTEGER NOT NULL,
    completed_at  INTEGER,
    expires_at    INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX {{.Ident "expires_idx"}} ON {{.Table}} (expires_at);

-- +goose Down
DROP TABLE {{.Table}};
