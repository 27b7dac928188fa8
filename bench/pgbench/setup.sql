-- The business table of the pgbench scripts, beside the kit's ledger table
-- opl_pgbench (created by `opledger migrate up --table opl_pgbench`), and
-- 1,000 completed entries for the replay scripts. run.sh runs it before
-- every round.
CREATE TABLE IF NOT EXISTS opl_pgbench_biz (id bigserial PRIMARY KEY, account text NOT NULL, amount bigint NOT NULL);
TRUNCATE opl_pgbench_biz RESTART IDENTITY;
TRUNCATE opl_pgbench;
INSERT INTO opl_pgbench (id, caller, method, request_fp, code, response, response_type, created_at, completed_at, expires_at)
SELECT sha256(int8send(i)), 'svc-a', '/pay.v1.Payments/Create', sha256('x'::bytea), 0,
       '{"status":"ok","amount":4711,"account":"acct-42"}'::bytea, 'pay.v1.CreateResponse',
       (extract(epoch FROM now()) * 1000000)::bigint, (extract(epoch FROM now()) * 1000000)::bigint,
       (extract(epoch FROM now() + interval '24 hours') * 1000000)::bigint
FROM generate_series(1::bigint, 1000::bigint) AS i;
VACUUM ANALYZE opl_pgbench_biz;
VACUUM ANALYZE opl_pgbench;
CHECKPOINT;
