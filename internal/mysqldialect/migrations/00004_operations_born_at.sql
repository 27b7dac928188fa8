-- opledger operation ledger, MySQL / MariaDB / TiDB: the key's birth.
-- born_at is when the entry's key was born, in Unix microseconds, read from
-- the key (a UUIDv7) or from the first-sent time sent with it; 0 when the key
-- carries no readable birth. The ledger refuses a key born before its window
-- instead of running it again, and a partitioned ledger places an entry by it.
-- A column added last with a constant default is an instant change on MariaDB
-- 10.3+, MySQL 8.0.12+ and TiDB: no table copy.

-- +goose Up
ALTER TABLE {{.Table}} ADD COLUMN born_at BIGINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE {{.Table}} DROP COLUMN born_at;
