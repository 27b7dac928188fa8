package throwaway

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"

	_ "github.com/lib/pq" // driver "postgres", for the readiness ping
)

// postgresBinDir returns the directory holding initdb and postgres: the
// one of the initdb in PATH (through its symlink), else the newest
// /usr/lib/postgresql/*/bin.
func postgresBinDir() (string, bool) {
	var dirs []string
	if p, err := exec.LookPath("initdb"); err == nil {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			dirs = append(dirs, filepath.Dir(r))
		}
		dirs = append(dirs, filepath.Dir(p))
	}
	versions, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(versions, func(i, j int) bool { return pgVersion(versions[i]) > pgVersion(versions[j]) })
	dirs = append(dirs, versions...)
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d, true
		}
	}
	return "", false
}

func pgVersion(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// PostgresInstalled reports whether StartPostgres finds initdb and postgres.
func PostgresInstalled() bool {
	_, ok := postgresBinDir()
	return ok
}

// StartPostgres creates a PostgreSQL cluster with initdb in a new temporary
// directory (trust authentication, superuser "postgres", fsync off: a
// killed server loses nothing the kernel has, and a test needs no more)
// and starts it on a free port of 127.0.0.1, with its unix socket in the
// same directory. It returns when the server accepts connections, or an
// error when ctx ends first (leaving nothing behind). Call Cleanup when
// done.
func StartPostgres(ctx context.Context) (*Server, error) {
	bin, acct, err := postgresSetup()
	if err != nil {
		return nil, err
	}
	s, data, err := initPostgres(ctx, bin, acct)
	if err != nil {
		return nil, err
	}
	setPostgresCommand(s, bin, acct, data, "-c", "full_page_writes=off")
	return launch(ctx, s)
}

// postgresSetup finds the binaries and the account the servers run as.
func postgresSetup() (bin string, acct *account, err error) {
	bin, ok := postgresBinDir()
	if !ok {
		return "", nil, fmt.Errorf("%w: PostgreSQL's initdb and postgres (PATH, /usr/lib/postgresql/*/bin)", ErrNotInstalled)
	}
	acct, err = runAs("postgres")
	return bin, acct, err
}

// newPostgresServer makes a KindPostgres server's directory and port; its
// data directory (returned) is still to be made.
func newPostgresServer(acct *account) (*Server, string, error) {
	s, err := newServer(KindPostgres, acct, "postgres.log", "postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", syscall.SIGINT) // fast shutdown
	if err != nil {
		return nil, "", err
	}
	return s, filepath.Join(s.dir, "data"), nil
}

// initPostgres makes a new server whose data directory initdb created.
func initPostgres(ctx context.Context, bin string, acct *account) (*Server, string, error) {
	s, data, err := newPostgresServer(acct)
	if err != nil {
		return nil, "", err
	}
	if err := initdb(ctx, bin, acct, s, data); err != nil {
		return nil, "", err
	}
	return s, data, nil
}

// initdb creates s's data directory data; on error s's directory is gone.
func initdb(ctx context.Context, bin string, acct *account, s *Server, data string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "initdb"),
		"-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	acct.credential(cmd)
	if err := run(ctx, s.log, cmd); err != nil {
		return s.setupFailed("initdb", err)
	}
	return nil
}

// setPostgresCommand gives s (a KindPostgres server of newServer) the
// command line of a postgres on data, with settings ("-c", "name=value",
// …) after the common ones, and its readiness ping.
func setPostgresCommand(s *Server, bin string, acct *account, data string, settings ...string) {
	dir, port := s.dir, s.port
	s.command = func() *exec.Cmd {
		args := []string{
			"-D", data,
			"-p", strconv.Itoa(port),
			"-k", dir,
			"-c", "listen_addresses=127.0.0.1",
			"-c", "fsync=off",
			"-c", "shared_buffers=32MB",
			"-c", "max_connections=120",
		}
		cmd := exec.Command(filepath.Join(bin, "postgres"), append(args, settings...)...)
		acct.credential(cmd)
		return cmd
	}
	s.ping = func(ctx context.Context) error {
		return pingSQL(ctx, "postgres", s.dsn+"&connect_timeout=2")
	}
}
