-- opledger operation ledger, MySQL / MariaDB / TiDB: partitioned by the key's
-- birth. An empty table (a new one) is made again, partitioned by RANGE
-- (born_at), so that retention is a partition drop instead of a DELETE: a
-- partition below 1 for keys without a known birth (born0, swept by DELETE),
-- a bucket of a day of births each (pYYYYMMDD, in UTC, named by the day it
-- starts; MySQL's ranges have an upper bound only, so the first bucket also
-- holds every earlier birth) and a MAXVALUE partition (pmax) for births whose
-- bucket does not exist yet, which the sweep keeps empty by adding buckets
-- ahead (REORGANIZE PARTITION pmax). born_at comes from the key's identity,
-- so every attempt of a key meets one partition and the primary key
-- (id, born_at) is unique exactly when id is. The statements are prepared,
-- so that a table that already holds entries is left as it is
-- (docs/operations.md says how to move it); the sweep then deletes as before.

-- +goose Up
SET @opledger_day := 86400000000;
SET @opledger_today := TIMESTAMPDIFF(SECOND, '1970-01-01', UTC_DATE()) * 1000000;
SET @opledger_move := (SELECT COUNT(*) = 0 FROM (SELECT 1 FROM {{.Table}} LIMIT 1) AS one)
    AND (SELECT COUNT(*) FROM information_schema.PARTITIONS WHERE TABLE_SCHEMA = DATABASE()
         AND TABLE_NAME = REPLACE('{{.Table}}', '`', '') AND PARTITION_NAME IS NOT NULL) = 0;
SET @opledger_sql := IF(@opledger_move, 'DROP TABLE {{.Table}}', 'DO 0');
PREPARE opledger_stmt FROM @opledger_sql;
EXECUTE opledger_stmt;
DEALLOCATE PREPARE opledger_stmt;
SET @opledger_sql := IF(@opledger_move, CONCAT('CREATE TABLE {{.Table}} (',
    'id BINARY(32) NOT NULL, caller VARBINARY(512) NOT NULL, method VARBINARY(512) NOT NULL, ',
    'request_fp BINARY(32) NOT NULL, code INT UNSIGNED NULL, response LONGBLOB NULL, ',
    'response_type VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL, ',
    'created_at BIGINT NOT NULL, completed_at BIGINT NULL, expires_at BIGINT NOT NULL, ',
    'born_at BIGINT NOT NULL DEFAULT 0, ',
    'PRIMARY KEY (id, born_at), KEY {{.Ident "expires_idx"}} (expires_at)',
    ') ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin PARTITION BY RANGE (born_at) (',
    'PARTITION born0 VALUES LESS THAN (1), ',
    'PARTITION p', DATE_FORMAT(UTC_DATE() - INTERVAL 1 DAY, '%Y%m%d'), ' VALUES LESS THAN (', @opledger_today, '), ',
    'PARTITION p', DATE_FORMAT(UTC_DATE(), '%Y%m%d'), ' VALUES LESS THAN (', @opledger_today + @opledger_day, '), ',
    'PARTITION p', DATE_FORMAT(UTC_DATE() + INTERVAL 1 DAY, '%Y%m%d'), ' VALUES LESS THAN (', @opledger_today + 2 * @opledger_day, '), ',
    'PARTITION p', DATE_FORMAT(UTC_DATE() + INTERVAL 2 DAY, '%Y%m%d'), ' VALUES LESS THAN (', @opledger_today + 3 * @opledger_day, '), ',
    'PARTITION pmax VALUES LESS THAN MAXVALUE)'), 'DO 0');
PREPARE opledger_stmt FROM @opledger_sql;
EXECUTE opledger_stmt;
DEALLOCATE PREPARE opledger_stmt;

-- +goose Down
-- A partitioned table is made again without partitions, its entries kept:
-- renamed aside, created as 00001 and 00004 left it (TiDB cannot drop a
-- clustered primary key in place), filled, and the partitioned one dropped.
SET @opledger_move := (SELECT COUNT(*) FROM information_schema.PARTITIONS WHERE TABLE_SCHEMA = DATABASE()
         AND TABLE_NAME = REPLACE('{{.Table}}', '`', '') AND PARTITION_NAME IS NOT NULL) > 0;
SET @opledger_sql := IF(@opledger_move, 'RENAME TABLE {{.Table}} TO {{.Ident "partitioned"}}', 'DO 0');
PREPARE opledger_stmt FROM @opledger_sql;
EXECUTE opledger_stmt;
DEALLOCATE PREPARE opledger_stmt;
SET @opledger_sql := IF(@opledger_move, CONCAT('CREATE TABLE {{.Table}} (',
    'id BINARY(32) NOT NULL, caller VARBINARY(512) NOT NULL, method VARBINARY(512) NOT NULL, ',
    'request_fp BINARY(32) NOT NULL, code INT UNSIGNED NULL, response LONGBLOB NULL, ',
    'response_type VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL, ',
    'created_at BIGINT NOT NULL, completed_at BIGINT NULL, expires_at BIGINT NOT NULL, ',
    'born_at BIGINT NOT NULL DEFAULT 0, ',
    'PRIMARY KEY (id), KEY {{.Ident "expires_idx"}} (expires_at)',
    ') ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin'), 'DO 0');
PREPARE opledger_stmt FROM @opledger_sql;
EXECUTE opledger_stmt;
DEALLOCATE PREPARE opledger_stmt;
SET @opledger_sql := IF(@opledger_move, 'INSERT INTO {{.Table}} SELECT * FROM {{.Ident "partitioned"}}', 'DO 0');
PREPARE opledger_stmt FROM @opledger_sql;
EXECUTE opledger_stmt;
DEALLOCATE PREPARE opledger_stmt;
SET @opledger_sql := IF(@opledger_move, 'DROP TABLE {{.Ident "partitioned"}}', 'DO 0');
PREPARE opledger_stmt FROM @opledger_sql;
EXECUTE opledger_stmt;
DEALLOCATE PREPARE opledger_stmt;
