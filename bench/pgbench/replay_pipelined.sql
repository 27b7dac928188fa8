-- a replay, claim first, pipelined: {BEGIN, the claim that conflicts},
-- {the entry read back, ROLLBACK}.
\set k random(1, 1000)
\startpipeline
BEGIN;
INSERT INTO opl_pgbench (id, caller, method, request_fp, created_at, expires_at) VALUES (sha256(int8send(:k::bigint)), 'svc-a', '/pay.v1.Payments/Create', sha256('x'::bytea), (extract(epoch FROM now()) * 1000000)::bigint, (extract(epoch FROM now() + interval '24 hours') * 1000000)::bigint) ON CONFLICT DO NOTHING;
\endpipeline
\startpipeline
SELECT request_fp, code, response, response_type, created_at, completed_at, expires_at FROM opl_pgbench WHERE id = sha256(int8send(:k::bigint));
ROLLBACK;
\endpipeline
