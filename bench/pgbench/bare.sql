-- bare: the business transaction alone.
\set amt random(1, 100000)
BEGIN;
INSERT INTO opl_pgbench_biz (account, amount) VALUES ('acct', :amt);
COMMIT;
