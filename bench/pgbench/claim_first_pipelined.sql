-- claim first, pipelined (pgxledger's BeginClaim and CompleteCommit, its
-- Runner): {BEGIN, the claim}, the work, {the completion, COMMIT}; the
-- completion is the pipelined form, which fails unless it completed one
-- entry.
\set k random(1000000, 9223372036854775806)
\set amt random(1, 100000)
\startpipeline
BEGIN;
INSERT INTO opl_pgbench (id, caller, method, request_fp, created_at, expires_at) VALUES (sha256(int8send(:k::bigint)), 'svc-a', '/pay.v1.Payments/Create', sha256('x'::bytea), (extract(epoch FROM now()) * 1000000)::bigint, (extract(epoch FROM now() + interval '24 hours') * 1000000)::bigint) ON CONFLICT DO NOTHING;
\endpipeline
INSERT INTO opl_pgbench_biz (account, amount) VALUES ('acct', :amt);
\startpipeline
WITH done AS (UPDATE opl_pgbench SET code = 0, response = '{"status":"ok","amount":4711,"account":"acct-42"}'::bytea, response_type = 'pay.v1.CreateResponse', completed_at = (extract(epoch FROM now()) * 1000000)::bigint WHERE id = sha256(int8send(:k::bigint)) AND completed_at IS NULL RETURNING 1) SELECT CASE WHEN count(*) = 1 THEN 1 ELSE ('opledger: entry not pending (' || count(*) || ' rows)')::int END FROM done;
COMMIT;
\endpipeline
