#!/usr/bin/env bash
# The hand-written SQL of every path of a keyed unit, run by pgbench the
# way the kit's Go benchmarks run (testdb.Rounds): each script alone on 16
# clients, in rounds that alternate the scripts (each round in an order of
# its own), ratios taken within a round, the median over the rounds
# printed. It is the measured limit each kit path is compared with
# (docs/benchmarks.md).
#
#   bench/pgbench/run.sh 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
#
# ROUNDS (default 5), SECONDS_EACH (per script and round, default 10), CLIENTS
# (default 16) and SCRIPTS (default: all, in this order) change the run.
# It creates the kit's table opl_pgbench (through the kit's migrations)
# and opl_pgbench_biz in that database, and drops them at the end.
set -euo pipefail
dsn=${1:?usage: $0 DSN}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
rounds=${ROUNDS:-5}
secs=${SECONDS_EACH:-10}
clients=${CLIENTS:-16}
scripts=(${SCRIPTS:-bare claim_first claim_first_pipelined at_commit at_commit_pipelined replay replay_pipelined})

tmp=$(mktemp -d)
cleanup() {
	(cd "$root" && go run ./cmd/opledger migrate down --dsn "$dsn" --table opl_pgbench >/dev/null 2>&1) || true
	psql -X -q "$dsn" -c 'DROP TABLE IF EXISTS opl_pgbench_biz, opl_pgbench_db_version' >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT
(cd "$root" && go run ./cmd/opledger migrate up --dsn "$dsn" --table opl_pgbench >/dev/null)

# round_bytes prints bytes that depend only on round $1.
round_bytes() {
	for ((i = 0; i < 64; i++)); do printf 'round %s, %s' "$1" "$i" | sha256sum; done
}

n=${#scripts[@]}
for ((r = 0; r < rounds; r++)); do
	PGOPTIONS="-c client_min_messages=warning" psql -X -q -v ON_ERROR_STOP=1 "$dsn" -f "$here/setup.sql" >/dev/null
	# Each round runs the scripts in an order of its own, the same in every
	# run (shuf's randomness is hashes of the round's number), as
	# testdb.Rounds does.
	for j in $(seq 0 $((n - 1)) | shuf --random-source=<(round_bytes "$r")); do
		s=${scripts[$j]}
		tps=$(pgbench -n -M prepared -c "$clients" -j 2 -T "$secs" -f "$here/$s.sql" "$dsn" 2>&1 |
			sed -n 's/^tps = \([0-9.]*\) .*/\1/p' | head -n1)
		if [ -z "$tps" ]; then
			echo "pgbench failed on $s.sql:" >&2
			pgbench -n -M prepared -c 1 -j 1 -t 1 -f "$here/$s.sql" "$dsn" >&2 || true
			exit 1
		fi
		echo "$r $s $tps" >>"$tmp/tps"
		printf 'round %d  %-24s %10.1f tps\n' "$((r + 1))" "$s" "$tps"
	done
done

# Medians: each script's tps, its ratio to bare within a round, and the
# pipelined scripts' ratio to their plain form within a round.
awk -v scripts="${scripts[*]}" '
	function median(list,    a, k, m, i, t) {
		m = split(list, a, " ")
		for (i = 1; i <= m; i++) for (k = i + 1; k <= m; k++) if (a[k] < a[i]) { t = a[i]; a[i] = a[k]; a[k] = t }
		return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
	}
	{ tps[$1, $2] = $3; if ($1 + 1 > nr) nr = $1 + 1 }
	END {
		n = split(scripts, s, " ")
		printf "\n%-24s %12s %10s %14s\n", "script", "median tps", "x bare", "x plain form"
		for (i = 1; i <= n; i++) {
			t = ""; x = ""; p = ""
			plain = s[i]; sub(/_pipelined$/, "", plain)
			for (r = 0; r < nr; r++) {
				t = t " " tps[r, s[i]]
				if (tps[r, "bare"] > 0) x = x " " tps[r, s[i]] / tps[r, "bare"]
				if (plain != s[i] && tps[r, plain] > 0) p = p " " tps[r, s[i]] / tps[r, plain]
			}
			printf "%-24s %12.1f %10s %14s\n", s[i], median(t), x == "" ? "-" : sprintf("%.3f", median(x)), p == "" ? "-" : sprintf("%.3f", median(p))
		}
	}' "$tmp/tps"
