-- opledger operation ledger, MySQL / MariaDB / TiDB: placeholder, to be
-- replaced by the partitioned layout.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
