-- opledger operation ledger, MySQL / MariaDB / TiDB: partitioned by the key's
-- birth. An empty table (a new one) is made again, partitioned by RANGE
-- (born_at), so that retention is a partition drop instead of a DELETE: a
-- partition below 1 for keys without a known birth (born0, swept by DELETE),
-- a bucket of an hour of births each (pYYYYMMDDtHH0000, in UTC, named by the
-- hour it starts: from 24 hours before this hour to 48 hours after it;
-- MySQL's ranges have an upper bound only, so the first bucket also holds
-- every earlier birth) and a MAXVALUE partition (pmax) for births whose
-- bucket does not exist yet, which the sweep keeps empty by adding buckets
-- ahead (REORGANIZE PARTITION pmax), as wide as the retention's 24th, at
-- least an hour. The buckets' list is built by a recursive query, so
-- GROUP_CONCAT's bound is raised for this session. born_at comes from the
-- key's identity, so every attempt of a key meets one partition and the
-- primary key (id, born_at) is unique exactly when id is. The statements
-- are prepared, so that a table that already holds entries is left as it
-- is (docs/operations.md says how to move it); the sweep then deletes as
-- before.

-- +goose Up
SET SESSION group_concat_max_len = 1048576;
SET @opledger_hour := TIMESTAMPDIFF(SECOND, '1970-01-01', UTC_TIMESTAMP()) DIV 3600 * 3600;
SET @opledger_buckets := (WITH RECURSIVE opledger_n (i) AS (SELECT -24 UNION ALL SELECT i + 1 FROM opledger_n WHERE i < 47)
    SELECT GROUP_CONCAT(CONCAT('PARTITION p', DATE_FORMAT(DATE_ADD('1970-01-01 00:00:00', INTERVAL @opledger_hour + i * 3600 SECOND), '%Y%m%dt%H%i%s'),
        ' VALUES LESS THAN (', (@opledger_hour + (i + 1) * 3600) * 1000000, ')') ORDER BY i SEPARATOR ', ') FROM opledger_n);
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
    'PARTITION born0 VALUES LESS THAN (1), ', @opledger_buckets, ', ',
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
