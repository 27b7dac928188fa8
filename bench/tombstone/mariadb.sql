-- The size of a tombstone (identity, fingerprint, outcome code, birth, expiry) against a ledger
-- entry with a 120-byte response, 1,000,000 rows each (seq_1_to_1000000: MariaDB's Sequence engine):
-- docs/benchmarks.md, "The tombstone's cost".
-- mariadb -h 127.0.0.1 -u root test < bench/tombstone/mariadb.sql
DROP TABLE IF EXISTS tomb_measure, full_measure;
CREATE TABLE tomb_measure (id BINARY(32) NOT NULL, request_fp BINARY(32) NOT NULL, code INT UNSIGNED NULL, born_at BIGINT NOT NULL, expires_at BIGINT NOT NULL, PRIMARY KEY (id), KEY tomb_measure_expires (expires_at)) ENGINE=InnoDB;
CREATE TABLE full_measure (id BINARY(32) NOT NULL, caller VARBINARY(512) NOT NULL, method VARBINARY(512) NOT NULL, request_fp BINARY(32) NOT NULL, code INT UNSIGNED NULL, response LONGBLOB NULL, response_type VARCHAR(512) NULL, created_at BIGINT NOT NULL, completed_at BIGINT NULL, expires_at BIGINT NOT NULL, born_at BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (id), KEY full_measure_expires (expires_at)) ENGINE=InnoDB;
INSERT INTO tomb_measure SELECT UNHEX(SHA2(seq, 256)), UNHEX(SHA2(-seq, 256)), 0, 1765000000000000 + seq, 1765086400000000 + seq FROM seq_1_to_1000000;
INSERT INTO full_measure SELECT UNHEX(SHA2(seq, 256)), CONCAT('tenant-', seq % 100), '/pay.v1.Payments/Transfer', UNHEX(SHA2(-seq, 256)), 0, REPEAT('x', 120), 'pay.v1.TransferResponse', 1765000000000000 + seq, 1765000000000100 + seq, 1765086400000000 + seq, 1765000000000000 + seq FROM seq_1_to_1000000;
ANALYZE TABLE tomb_measure, full_measure;
SELECT table_name, data_length + index_length AS total_bytes, (data_length + index_length) / 1000000 AS bytes_per_entry FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name IN ('tomb_measure', 'full_measure');
DROP TABLE tomb_measure, full_measure;
