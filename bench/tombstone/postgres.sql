-- The size of a tombstone (identity, fingerprint, outcome code, birth, expiry) against a ledger
-- entry with a 120-byte response, 1,000,000 rows each: docs/benchmarks.md, "The tombstone's cost".
-- psql -h 127.0.0.1 -U postgres -d test -q -f bench/tombstone/postgres.sql
DROP TABLE IF EXISTS tomb_measure, full_measure;
CREATE TABLE tomb_measure (id bytea PRIMARY KEY, request_fp bytea NOT NULL, code integer, born_at bigint NOT NULL, expires_at bigint NOT NULL);
CREATE INDEX tomb_measure_expires ON tomb_measure (expires_at);
CREATE TABLE full_measure (id bytea PRIMARY KEY, caller text NOT NULL, method text NOT NULL, request_fp bytea NOT NULL, code integer, response bytea, response_type text, created_at bigint NOT NULL, completed_at bigint, expires_at bigint NOT NULL, born_at bigint NOT NULL DEFAULT 0);
CREATE INDEX full_measure_expires ON full_measure (expires_at);
INSERT INTO tomb_measure SELECT sha256(int8send(g)), sha256(int8send(-g)), 0, 1765000000000000 + g, 1765086400000000 + g FROM generate_series(1, 1000000) g;
INSERT INTO full_measure SELECT sha256(int8send(g)), 'tenant-' || (g % 100), '/pay.v1.Payments/Transfer', sha256(int8send(-g)), 0, convert_to(repeat('x', 120), 'UTF8'), 'pay.v1.TransferResponse', 1765000000000000 + g, 1765000000000100 + g, 1765086400000000 + g, 1765000000000000 + g FROM generate_series(1, 1000000) g;
VACUUM ANALYZE tomb_measure; VACUUM ANALYZE full_measure;
SELECT 'tombstone' AS layout, pg_total_relation_size('tomb_measure') AS total_bytes, pg_total_relation_size('tomb_measure')/1000000.0 AS bytes_per_entry
UNION ALL SELECT 'ledger entry (120-byte response)', pg_total_relation_size('full_measure'), pg_total_relation_size('full_measure')/1000000.0;
DROP TABLE tomb_measure, full_measure;
