package throwaway

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"

	gomysql "github.com/go-sql-driver/mysql" // driver "mysql", for the readiness ping
)

func mariadbBinaries() (server, install string, ok bool) {
	server, ok1 := findBinary([]string{"mariadbd", "mysqld"}, "/usr/sbin", "/usr/local/sbin", "/usr/local/mysql/bin")
	install, ok2 := findBinary([]string{"mariadb-install-db", "mysql_install_db"}, "/usr/bin", "/usr/local/bin", "/usr/local/mysql/scripts")
	return server, install, ok1 && ok2
}

// MariaDBInstalled reports whether StartMariaDB finds mariadbd and
// mariadb-install-db.
func MariaDBInstalled() bool {
	_, _, ok := mariadbBinaries()
	return ok
}

// StartMariaDB creates a MariaDB data directory with mariadb-install-db in
// a new temporary directory and starts mariadbd on a free port of
// 127.0.0.1 (its own socket and pid file in the same directory, grant
// tables skipped: any user, no password; InnoDB writes its log at every
// commit but leaves the flush to the kernel, so a killed server loses no
// commit). It creates the database "test" and returns when the server
// answers, or an error when ctx ends first (leaving nothing behind). Call
// Cleanup when done.
func StartMariaDB(ctx context.Context) (*Server, error) {
	server, install, ok := mariadbBinaries()
	if !ok {
		return nil, fmt.Errorf("%w: MariaDB's mariadbd and mariadb-install-db", ErrNotInstalled)
	}
	acct, err := runAs("mysql")
	if err != nil {
		return nil, err
	}
	dir, err := newDir("mariadb", acct)
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("throwaway: %w", err)
	}
	data := filepath.Join(dir, "data")
	s := &Server{
		kind:       KindMariaDB,
		dir:        dir,
		port:       port,
		log:        filepath.Join(dir, "mariadb.log"),
		dsn:        fmt.Sprintf("root@tcp(127.0.0.1:%d)/test", port),
		stopSignal: syscall.SIGTERM,
	}
	var userArg []string
	if acct != nil {
		userArg = []string{"--user=" + acct.name}
	}
	common := []string{
		"--no-defaults",
		"--datadir=" + data,
		"--innodb-buffer-pool-size=32M",
		"--innodb-log-file-size=16M",
		"--character-set-server=utf8mb4",
		"--collation-server=utf8mb4_general_ci",
	}
	args := append(append([]string{}, common...), userArg...)
	args = append(args, "--auth-root-authentication-method=normal", "--skip-test-db")
	if filepath.Base(install) == "mariadb-install-db" {
		args = append(args, "--skip-name-resolve")
	}
	installCmd := exec.CommandContext(ctx, install, args...)
	if err := run(ctx, s.log, installCmd); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("throwaway: mariadb-install-db: %v: %s", err, s.logTail())
	}
	s.command = func() *exec.Cmd {
		a := append(append([]string{}, common...), userArg...)
		a = append(a,
			"--port="+strconv.Itoa(port),
			"--bind-address=127.0.0.1",
			"--socket="+filepath.Join(dir, "mariadb.sock"),
			"--pid-file="+filepath.Join(dir, "mariadb.pid"),
			"--skip-grant-tables",
			"--skip-name-resolve",
			"--innodb-flush-log-at-trx-commit=2",
			"--max-connections=200",
		)
		return exec.Command(server, a...)
	}
	s.ping = func(ctx context.Context) error {
		cfg := gomysql.NewConfig()
		cfg.User = "root"
		cfg.Net = "tcp"
		cfg.Addr = s.Addr()
		cfg.Timeout = 2e9
		return pingSQL(ctx, "mysql", cfg.FormatDSN())
	}
	s.mu.Lock()
	err = s.startLocked(ctx)
	s.mu.Unlock()
	if err == nil {
		err = createTestDB(ctx, s)
	}
	if err != nil {
		s.Cleanup()
		return nil, err
	}
	return s, nil
}

func createTestDB(ctx context.Context, s *Server) error {
	cfg := gomysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "tcp"
	cfg.Addr = s.Addr()
	db, err := openSQL("mysql", cfg.FormatDSN())
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS test"); err != nil {
		return fmt.Errorf("throwaway: create database test: %w", err)
	}
	return nil
}
