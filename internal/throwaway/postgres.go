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
	bin, ok := postgresBinDir()
	if !ok {
		return nil, fmt.Errorf("%w: PostgreSQL's initdb and postgres (PATH, /usr/lib/postgresql/*/bin)", ErrNotInstalled)
	}
	acct, err := runAs("postgres")
	if err != nil {
		return nil, err
	}
	s, err := newServer(KindPostgres, acct, "postgres.log", "postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", syscall.SIGINT) // fast shutdown
	if err != nil {
		return nil, err
	}
	dir, port, data := s.dir, s.port, filepath.Join(s.dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"),
		"-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	acct.credential(initdb)
	if err := run(ctx, s.log, initdb); err != nil {
		return nil, s.setupFailed("initdb", err)
	}
	s.command = func() *exec.Cmd {
		cmd := exec.Command(filepath.Join(bin, "postgres"),
			"-D", data,
			"-p", strconv.Itoa(port),
			"-k", dir,
			"-c", "listen_addresses=127.0.0.1",
			"-c", "fsync=off",
			"-c", "full_page_writes=off",
			"-c", "shared_buffers=32MB",
			"-c", "max_connections=120",
		)
		acct.credential(cmd)
		return cmd
	}
	s.ping = func(ctx context.Context) error {
		return pingSQL(ctx, "postgres", s.dsn+"&connect_timeout=2")
	}
	return launch(ctx, s)
}
