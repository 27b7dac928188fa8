-- claim first, one statement at a time (database/sql, or pgx on the
-- caller's transaction): BEGIN, the claim, the work, the completion, COMMIT.
\set k random(1000000, 9223372036854775806)
\set amt random(1, 100000)
BEGIN;
INSERT INTO opl_pgbench (id, caller, method, request_fp, created_at, expires_at) VALUES (sha256(int8send(:k::bigint)), 'svc-a', '/pay.v1.Payments/Create', sha256('x'::bytea), (extract(epoch FROM now()) * 1000000)::bigint, (extract(epoch FROM now() + interval '24 hours') * 1000000)::bigint) ON CONFLICT DO NOTHING;
INSERT INTO opl_pgbench_biz (account, amount) VALUES ('acct', :amt);
UPDATE opl_pgbench SET code = 0, response = '{"status":"ok","amount":4711,"account":"acct-42"}'::bytea, response_type = 'pay.v1.CreateResponse', completed_at = (extract(epoch FROM now()) * 1000000)::bigint WHERE id = sha256(int8send(:k::bigint)) AND completed_at IS NULL;
COMMIT;
