package throwaway_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/lib/pq"

	"github.com/opledger/opledger/internal/harness/throwaway"
)

func open(t *testing.T, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// count returns the rows of table k, through a fresh connection (the
// server restarted under the pool).
func count(t *testing.T, db *sql.DB, table string) int {
	t.Helper()
	db.SetMaxIdleConns(0)
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM " + table).Scan(&n); err != nil {
		t.Fatalf("count: %v", err)
	}
	return n
}

// lifecycle writes a row, restarts, crashes, stops and starts s, checking
// that the row survives each, and that Cleanup removes everything.
func lifecycle(t *testing.T, s *throwaway.Server, driver string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := open(t, driver, s.DSN())
	if _, err := db.Exec("CREATE TABLE kept (k INTEGER)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO kept VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if n := count(t, db, "kept"); n != 1 {
		t.Fatalf("after restart: %d rows, want 1", n)
	}
	if _, err := db.Exec("INSERT INTO kept VALUES (2)"); err != nil {
		t.Fatal(err)
	}
	if err := s.Crash(ctx); err != nil {
		t.Fatalf("crash: %v", err)
	}
	if n := count(t, db, "kept"); n != 2 {
		t.Fatalf("after crash: %d rows, want 2 (a committed row was lost)", n)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if s.Running() {
		t.Fatal("running after Stop")
	}
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	err := db.PingContext(pctx)
	pcancel()
	if err == nil {
		t.Fatal("ping answered after Stop")
	}
	if err := s.Stop(ctx); !errors.Is(err, throwaway.ErrStopped) {
		t.Fatalf("second stop: %v, want ErrStopped", err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
	if n := count(t, db, "kept"); n != 2 {
		t.Fatalf("after stop and start: %d rows, want 2", n)
	}
	if s.Starts() != 4 {
		t.Fatalf("Starts() = %d, want 4", s.Starts())
	}
	db.Close()
	dir := s.Dir()
	if err := s.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s still there after Cleanup (%v)", dir, err)
	}
	if s.Running() {
		t.Fatal("running after Cleanup")
	}
	if err := s.Start(ctx); !errors.Is(err, throwaway.ErrStopped) {
		t.Fatalf("start after cleanup: %v, want ErrStopped", err)
	}
}

func TestPostgresLifecycle(t *testing.T) {
	t.Parallel()
	lifecycle(t, throwaway.Postgres(t), "postgres")
}

func TestMariaDBLifecycle(t *testing.T) {
	t.Parallel()
	lifecycle(t, throwaway.MariaDB(t), "mysql")
}

// TestPgBouncerFollowsBackend: PgBouncer answers, in transaction pooling
// mode, through both drivers, and again after its backend crashed and
// after its own restart.
func TestPgBouncerFollowsBackend(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pg := throwaway.Postgres(t)
	pb := throwaway.PgBouncer(t, pg, throwaway.PgBouncerOptions{PoolSize: 2})
	if pb.Kind() != throwaway.KindPgBouncer || pb.Port() == pg.Port() {
		t.Fatalf("kind %q port %d (backend %d)", pb.Kind(), pb.Port(), pg.Port())
	}
	admin := open(t, "postgres", pb.DSN()[:len("postgres://postgres@")]+pb.Addr()+"/pgbouncer?sslmode=disable&binary_parameters=yes")
	var mode string
	rows, err := admin.Query("SHOW CONFIG")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		cols, _ := rows.Columns()
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		if vals[0].String == "pool_mode" {
			mode = vals[1].String
		}
	}
	rows.Close()
	if mode != "transaction" {
		t.Fatalf("pool_mode = %q, want transaction", mode)
	}
	if pb.DriverDSN("pgx") != pb.DSN()+"&default_query_exec_mode=exec" || pb.DriverDSN("postgres") != pb.DSN()+"&binary_parameters=yes" ||
		pg.DriverDSN("pgx") != pg.DSN() {
		t.Fatalf("DriverDSN: %q %q %q", pb.DriverDSN("pgx"), pb.DriverDSN("postgres"), pg.DriverDSN("pgx"))
	}
	for _, dsn := range []struct{ driver, dsn string }{
		{"postgres", pb.DriverDSN("postgres")},
		{"pgx", pb.DriverDSN("pgx")},
	} {
		db := open(t, dsn.driver, dsn.dsn)
		db.SetMaxIdleConns(0)
		var one int
		if err := db.QueryRow("SELECT $1::int", 1).Scan(&one); err != nil || one != 1 {
			t.Fatalf("%s through pgbouncer: %v %d", dsn.driver, err, one)
		}
		if err := pg.Crash(ctx); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRow("SELECT $1::int", 2).Scan(&one); err != nil || one != 2 {
			t.Fatalf("%s through pgbouncer after the backend crashed: %v %d", dsn.driver, err, one)
		}
		if err := pb.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRow("SELECT $1::int", 3).Scan(&one); err != nil || one != 3 {
			t.Fatalf("%s through pgbouncer after its restart: %v %d", dsn.driver, err, one)
		}
	}
}

// TestStartBoundedByContext: a context that ends stops a start, and
// nothing is left behind.
func TestStartBoundedByContext(t *testing.T) {
	t.Parallel()
	needInstalled(t, "postgres")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	s, err := throwaway.StartPostgres(ctx)
	if err == nil {
		s.Cleanup()
		t.Skip("initdb and start took less than 50ms")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Logf("error: %v", err)
	}
}

// TestServersDieWithTheirProcess: a process that exits without Cleanup (a
// test binary killed by its timeout) takes its servers with it.
func TestServersDieWithTheirProcess(t *testing.T) {
	if kind := os.Getenv("THROWAWAY_CHILD"); kind != "" {
		var servers []*throwaway.Server
		var err error
		switch kind {
		case "pair": // a primary and its standby
			var p *throwaway.PostgresPair
			if p, err = throwaway.StartPostgresPair(context.Background(), throwaway.PairOptions{}); err == nil {
				n := p.Nodes()
				servers = n[:]
			}
		case "mariadb-pair":
			var p *throwaway.MariaDBPair
			if p, err = throwaway.StartMariaDBPair(context.Background(), throwaway.MariaDBPairOptions{SemiSync: true}); err == nil {
				n := p.Nodes()
				servers = n[:]
			}
		default:
			var s *throwaway.Server
			s, err = map[string]func(context.Context) (*throwaway.Server, error){
				"postgres": throwaway.StartPostgres, "mariadb": throwaway.StartMariaDB,
			}[kind](context.Background())
			servers = []*throwaway.Server{s}
		}
		if err != nil {
			fmt.Println("ERR", err)
			os.Exit(1)
		}
		for _, s := range servers {
			fmt.Println("SERVER", s.PID(), s.Dir())
		}
		os.Exit(0) // no Cleanup
	}
	t.Parallel()
	for _, kind := range []string{"postgres", "mariadb", "pair", "mariadb-pair"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			needInstalled(t, map[string]string{"postgres": "postgres", "mariadb": "mariadb", "pair": "postgres", "mariadb-pair": "mariadb"}[kind])
			cmd := exec.Command(os.Args[0], "-test.run=^TestServersDieWithTheirProcess$")
			cmd.Env = append(os.Environ(), "THROWAWAY_CHILD="+kind)
			out, err := cmd.Output()
			var pids []int
			for _, line := range strings.Split(string(out), "\n") {
				if strings.HasPrefix(line, "SERVER ") {
					var pid int
					var dir string
					fmt.Sscan(strings.TrimPrefix(line, "SERVER "), &pid, &dir)
					pids = append(pids, pid)
					t.Cleanup(func() { os.RemoveAll(dir) })
				}
			}
			if want := map[string]int{"pair": 2, "mariadb-pair": 2}[kind]; err != nil || len(pids) != max(want, 1) || slices.Contains(pids, 0) {
				t.Fatalf("child: %v, servers %v\n%s", err, pids, out)
			}
			deadline := time.Now().Add(20 * time.Second)
			for _, pid := range pids {
				for processAlive(pid) {
					if time.Now().After(deadline) {
						syscall.Kill(pid, syscall.SIGKILL)
						t.Fatalf("server %d still runs 20s after its process exited", pid)
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}
}

// processAlive reports whether pid runs and is not a zombie.
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// TestParallelStarts: servers of one kind started at once do not collide
// (MariaDB's bootstrap once did, on temporary tables in /tmp), and each
// gets its own port and directory.
func TestParallelStarts(t *testing.T) {
	t.Parallel()
	for name, start := range map[string]func(context.Context) (*throwaway.Server, error){
		"postgres": throwaway.StartPostgres, "mariadb": throwaway.StartMariaDB,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			needInstalled(t, name)
			const n = 3
			servers := make([]*throwaway.Server, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					s, err := start(context.Background())
					if err != nil {
						t.Error(err)
						return
					}
					servers[i] = s
				})
			}
			wg.Wait()
			seen := map[int]bool{}
			for _, s := range servers {
				if s == nil {
					continue
				}
				if seen[s.Port()] {
					t.Errorf("port %d twice", s.Port())
				}
				seen[s.Port()] = true
				if err := s.Cleanup(); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// needInstalled skips t when kind's server binaries ("postgres" or
// "mariadb") are missing, or fails it when OPLEDGER_TEST_REQUIRE_DBS=1,
// as the package's own test helpers do.
func needInstalled(t *testing.T, kind string) {
	t.Helper()
	installed := map[string]func() bool{"postgres": throwaway.PostgresInstalled, "mariadb": throwaway.MariaDBInstalled}[kind]
	if installed() {
		return
	}
	if os.Getenv("OPLEDGER_TEST_REQUIRE_DBS") == "1" {
		t.Fatalf("%s's server binaries are not installed, and OPLEDGER_TEST_REQUIRE_DBS=1 requires every database", kind)
	}
	t.Skipf("%s's server binaries are not installed", kind)
}

// sqlDB adds a row count to *sql.DB.
type sqlDB struct{ *sql.DB }

func (db *sqlDB) count(t *testing.T, table string) int { t.Helper(); return count(t, db.DB, table) }
