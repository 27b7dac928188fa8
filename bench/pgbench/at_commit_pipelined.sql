-- claim at commit, pipelined (pgxledger's Begin and RecordCommit, its
-- Runner WithClaimAtCommit): BEGIN, the work, {the record, COMMIT}; the
-- record is the plain INSERT, which fails on a conflict.
\set k random(1000000, 9223372036854775806)
\set amt random(1, 100000)
BEGIN;
INSERT INTO opl_pgbench_biz (account, amount) VALUES ('acct', :amt);
\startpipeline
INSERT INTO opl_pgbench (id, caller, method, request_fp, code, response, response_type, created_at, completed_at, expires_at) VALUES (sha256(int8send(:k::bigint)), 'svc-a', '/pay.v1.Payments/Create', sha256('x'::bytea), 0, '{"status":"ok","amount":4711,"account":"acct-42"}'::bytea, 'pay.v1.CreateResponse', (extract(epoch FROM now()) * 1000000)::bigint, (extract(epoch FROM now()) * 1000000)::bigint, (extract(epoch FROM now() + interval '24 hours') * 1000000)::bigint);
COMMIT;
\endpipeline
