package throwaway

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

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
	s, err := startMariaDBNode(ctx, nil)
	if err != nil {
		return nil, err
	}
	if err := createTestDB(ctx, s); err != nil {
		s.Cleanup()
		return nil, err
	}
	return s, nil
}

// startMariaDBNode installs and starts a MariaDB whose command line has
// extra's settings (when not nil; read at every start) after the common
// ones, without the database "test".
func startMariaDBNode(ctx context.Context, extra func() []string) (*Server, error) {
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
	if err := installMariaDB(ctx, s, install, acct); err != nil {
		return nil, err
	}
	dir, port := s.dir, s.port
	common := mariadbCommon(s.dir)
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
		if extra != nil {
			a = append(a, extra()...)
		}
		cmd := exec.Command(server, a...)
		acct.credential(cmd)
		return cmd
	}
	s.ping = func(ctx context.Context) error {
		return pingSQL(ctx, "mysql", rootConfig(s).FormatDSN())
	}
	return launch(ctx, s)
}

// mariadbCommon are the settings of mariadb-install-db and mariadbd.
func mariadbCommon(dir string) []string {
	return []string{
		"--no-defaults",
		"--datadir=" + filepath.Join(dir, "data"),
		"--tmpdir=" + dir, // its own: concurrent bootstraps collide in /tmp
		"--innodb-buffer-pool-size=32M",
		"--innodb-log-file-size=16M",
		"--character-set-server=utf8mb4",
		"--collation-server=utf8mb4_general_ci",
	}
}

// installMariaDB creates s's data directory with mariadb-install-db; on
// error s's directory is gone.
func installMariaDB(ctx context.Context, s *Server, install string, acct *account) error {
	args := mariadbCommon(s.dir)
	if acct != nil {
		args = append(args, "--user="+acct.name)
	}
	args = append(args, "--auth-root-authentication-method=normal", "--skip-test-db")
	if filepath.Base(install) == "mariadb-install-db" {
		args = append(args, "--skip-name-resolve")
	}
	if err := run(ctx, s.log, exec.CommandContext(ctx, install, args...)); err != nil {
		return s.setupFailed("mariadb-install-db", err)
	}
	return nil
}

// rootConfig is go-sql-driver's configuration for root on s, over TCP.
func rootConfig(s *Server) *gomysql.Config {
	cfg := gomysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "tcp"
	cfg.Addr = s.Addr()
	cfg.Timeout = 2 * time.Second
	return cfg
}

func createTestDB(ctx context.Context, s *Server) error {
	db, err := openSQL("mysql", rootConfig(s).FormatDSN())
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS test"); err != nil {
		return fmt.Errorf("throwaway: create database test: %w", err)
	}
	return nil
}
