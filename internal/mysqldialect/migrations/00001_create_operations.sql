-- opledger operation ledger, MySQL / MariaDB (InnoDB).
-- id is SHA-256 over the length-prefixed (caller, method, key hash) triple:
-- one compact 32-byte primary key holds the whole identity. caller and method
-- are kept for operators. Identity columns are binary, so they compare bytes:
-- two callers that differ only by letter case or trailing spaces never match.
-- response is LONGBLOB so that any WithMaxResultSize up to the server's
-- max_allowed_packet fits (MEDIUMBLOB would cap it at 16 MiB). Times are Unix
-- microseconds. completed_at IS NULL means the entry has no result yet.
-- Completion changes no indexed column.

-- +goose Up
CREATE TABLE {{.Table}} (
    id            BINARY(32)      NOT NULL,
    caller        VARBINARY(512)  NOT NULL,
    method        VARBINARY(512)  NOT NULL,
    request_fp    BINARY(32)      NOT NULL,
    code          INT UNSIGNED    NULL,
    response      LONGBLOB        NULL,
    response_type VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    created_at    BIGINT          NOT NULL,
    completed_at  BIGINT          NULL,
    expires_at    BIGINT          NOT NULL,
    PRIMARY KEY (id),
    KEY {{.Ident "expires_idx"}} (expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- +goose Down
DROP TABLE {{.Table}};
