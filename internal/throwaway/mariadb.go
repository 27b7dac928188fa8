package throwaway

import (
	"context"
	"fmt"
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
	s, err := newServer(KindMariaDB, acct, "mariadb.log", "root@tcp(127.0.0.1:%d)/test", syscall.SIGTERM)
	if err != nil {
		return nil, err
	}
	dir, port, data := s.dir, s.port, filepath.Join(s.dir, "data")
	var userArg []string
	if acct != nil {
		userArg = []string{"--user=" + acct.name}
	}
	common := []string{
		"--no-defaults",
		"--datadir=" + data,
		"--tmpdir=" + dir, // its own: concurrent bootstraps collide in /tmp
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
		return nil, s.setupFailed("mariadb-install-db", err)
	}
	s.command = func() *exec.Cmd {
		// Started as mysql rather than with --user: a server that changes
		// its own user loses the parent-death signal.
		a := append([]string{}, common...)
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
		cmd := exec.Command(server, a...)
		acct.credential(cmd)
		return cmd
	}
	s.ping = func(ctx context.Context) error {
		cfg := gomysql.NewConfig()
		cfg.User = "root"
		cfg.Net = "tcp"
		cfg.Addr = s.Addr()
		cfg.Timeout = 2e9
		return pingSQL(ctx, "mysql", cfg.FormatDSN())
	}
	if _, err := launch(ctx, s); err != nil {
		return nil, err
	}
	if err := createTestDB(ctx, s); err != nil {
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
