-- opledger operation ledger, PostgreSQL: partitioned by the key's birth.
-- An empty table (a new one) is made again, partitioned by RANGE (born_at),
-- so that retention is a partition drop instead of a DELETE: a bucket of a
-- day of births each (<table>_pYYYYMMDD, in UTC: yesterday's to three days
-- ahead; the sweep creates the coming ones) and one partition for keys
-- without a known birth (<table>_born0, born_at 0, swept by DELETE). There
-- is no DEFAULT partition: PostgreSQL detaches a partition concurrently
-- (without blocking claims) only from a table that has none, and attaches
-- a new bucket without scanning one. A claim whose birth has no bucket
-- fails (SQLSTATE 23514) and names the sweep. born_at comes from the key's
-- identity, so every attempt of a key meets one partition and the primary
-- key (id, born_at) is unique exactly when id is. Only born0, swept by
-- DELETE, has the expires_at index: a bucket is dropped whole, so a claim
-- into it maintains one index, not two.
-- A table that already holds entries is left as it is (docs/operations.md
-- says how to move it); the sweep then deletes as before.

-- +goose Up
-- +goose StatementBegin
DO $opledger$
DECLARE
    day   constant bigint := 86400000000;
    today bigint := (extract(epoch FROM date_trunc('day', now() AT TIME ZONE 'UTC')) * 1000000)::bigint;
    prefix text := trim(both '"' FROM '{{.Ident "p"}}');
BEGIN
    LOCK TABLE {{.Table}} IN ACCESS EXCLUSIVE MODE;
    IF EXISTS (SELECT 1 FROM {{.Table}}) OR
       (SELECT relkind FROM pg_class WHERE oid = '{{.Table}}'::regclass) = 'p' THEN
        RETURN;
    END IF;
    ALTER TABLE {{.Table}} RENAME TO {{.Ident "unpartitioned"}};
    CREATE TABLE {{.Table}} (LIKE {{.Ident "unpartitioned"}} INCLUDING DEFAULTS) PARTITION BY RANGE (born_at);
    DROP TABLE {{.Ident "unpartitioned"}};
    ALTER TABLE {{.Table}} ADD CONSTRAINT {{.Ident "pkey"}} PRIMARY KEY (id, born_at);
    CREATE TABLE {{.Ident "born0"}} PARTITION OF {{.Table}} FOR VALUES FROM (MINVALUE) TO (1);
    CREATE INDEX {{.Ident "born0_expires_idx"}} ON {{.Ident "born0"}} (expires_at);
    FOR i IN -1..3 LOOP
        EXECUTE format('CREATE TABLE %I PARTITION OF {{.Table}} FOR VALUES FROM (%s) TO (%s)',
            prefix || to_char(to_timestamp((today + i * day) / 1000000) AT TIME ZONE 'UTC', 'YYYYMMDD'),
            today + i * day, today + (i + 1) * day);
    END LOOP;
END
$opledger$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $opledger$
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = '{{.Table}}'::regclass) <> 'p' THEN
        RETURN;
    END IF;
    ALTER TABLE {{.Table}} RENAME TO {{.Ident "partitioned"}};
    CREATE TABLE {{.Table}} (LIKE {{.Ident "partitioned"}} INCLUDING DEFAULTS);
    INSERT INTO {{.Table}} SELECT id, caller, method, request_fp, code, response, response_type,
        created_at, completed_at, expires_at, born_at FROM {{.Ident "partitioned"}};
    DROP TABLE {{.Ident "partitioned"}};
    ALTER TABLE {{.Table}} ADD CONSTRAINT {{.Ident "pkey"}} PRIMARY KEY (id);
    CREATE INDEX {{.Ident "expires_idx"}} ON {{.Table}} (expires_at);
END
$opledger$;
-- +goose StatementEnd
