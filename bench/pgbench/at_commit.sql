-- claim at commit, one statement at a time: BEGIN, the work, the completed
-- entry's record, COMMIT.
\set k random(1000000, 9223372036854775806)
\set amt random(1, 100000)
BEGIN;
INSERT INTO opl_pgbench_biz (account, amount) VALUES ('acct', :amt);
INSERT INTO opl_pgbench (id, caller, method, request_fp, code, response, response_type, created_at, completed_at, expires_at) VALUES (sha256(int8send(:k::bigint)), 'svc-a', '/pay.v1.Payments/Create', sha256('x'::bytea), 0, '{"status":"ok","amount":4711,"account":"acct-42"}'::bytea, 'pay.v1.CreateResponse', (extract(epoch FROM now()) * 1000000)::bigint, (extract(epoch FROM now()) * 1000000)::bigint, (extract(epoch FROM now() + interval '24 hours') * 1000000)::bigint) ON CONFLICT DO NOTHING;
COMMIT;
