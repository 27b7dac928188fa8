-- opledger operation ledger, SQLite: nothing to do. PostgreSQL and MySQL
-- partition a new ledger table by the key's birth at this version, so that
-- retention is a partition drop; SQLite has no partitions, and its sweep
-- deletes expired entries in batches as before. The version keeps the
-- dialects' migrations numbered alike.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
