-- opledger operation ledger, PostgreSQL.
-- id is SHA-256 over the length-prefixed (caller, method, key hash) triple:
-- one compact 32-byte primary key holds the whole identity. caller and method
-- are kept for operators. Times are Unix microseconds. completed_at IS NULL
-- means the entry has no result yet. Completion changes no indexed column,
-- so its UPDATE can stay heap-only (measured: 99% of completions are HOT
-- with the default fillfactor; see docs/benchmarks.md).

-- +goose Up
CREATE TABLE {{.Table}} (
    id            bytea    NOT NULL,
    caller        text     NOT NULL,
    method        text     NOT NULL,
    request_fp    bytea    NOT NULL,
    code          integer,
    response      bytea,
    response_type text,
    created_at    bigint   NOT NULL,
    completed_at  bigint,
    expires_at    bigint   NOT NULL,
    CONSTRAINT {{.Ident "pkey"}} PRIMARY KEY (id)
);
CREATE INDEX {{.Ident "expires_idx"}} ON {{.Table}} (expires_at);

-- +goose Down
DROP TABLE {{.Table}};
