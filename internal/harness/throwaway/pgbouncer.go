package throwaway

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// PgBouncerInstalled reports whether StartPgBouncer finds pgbouncer.
func PgBouncerInstalled() bool {
	_, ok := findBinary([]string{"pgbouncer"}, "/usr/sbin", "/usr/local/sbin", "/usr/bin", "/usr/local/bin")
	return ok
}

// PgBouncerOptions configures StartPgBouncer.
type PgBouncerOptions struct {
	// PoolSize is the number of server connections per database and user
	// (pgbouncer's default_pool_size); 0 means 10.
	PoolSize int
	// Settings are more lines of the [pgbouncer] section, name = value,
	// overriding the defaults (pool_mode = transaction,
	// server_login_retry = 0.2, ...).
	Settings map[string]string
}

// StartPgBouncer starts a PgBouncer in transaction pooling mode on a free
// port of 127.0.0.1, in front of backend (a throw-away PostgreSQL; its
// database "postgres", user "postgres", trust authentication), and
// returns when a connection through it answers a ping, or an error when
// ctx ends first. Its DSN has the form of the backend's, with its own
// port. Restarting or crashing the backend leaves PgBouncer running: it
// reconnects. Call Cleanup when done (before the backend's).
func StartPgBouncer(ctx context.Context, backend *Server, opts PgBouncerOptions) (*Server, error) {
	bin, ok := findBinary([]string{"pgbouncer"}, "/usr/sbin", "/usr/local/sbin", "/usr/bin", "/usr/local/bin")
	if !ok {
		return nil, fmt.Errorf("%w: pgbouncer", ErrNotInstalled)
	}
	if backend == nil || backend.kind != KindPostgres {
		return nil, fmt.Errorf("throwaway: PgBouncer needs a throw-away PostgreSQL as its backend")
	}
	acct, err := runAs("postgres") // pgbouncer refuses root
	if err != nil {
		return nil, err
	}
	s, err := newServer(KindPgBouncer, acct, "pgbouncer.log", "postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable",
		syscall.SIGTERM) // immediate shutdown (SIGINT waits for clients)
	if err != nil {
		return nil, err
	}
	dir, port := s.dir, s.port
	poolSize := opts.PoolSize
	if poolSize <= 0 {
		poolSize = 10
	}
	settings := map[string]string{
		"listen_addr":               "127.0.0.1",
		"listen_port":               fmt.Sprint(port),
		"unix_socket_dir":           dir,
		"pidfile":                   filepath.Join(dir, "pgbouncer.pid"),
		"auth_type":                 "trust",
		"auth_file":                 filepath.Join(dir, "users.txt"),
		"pool_mode":                 "transaction",
		"default_pool_size":         fmt.Sprint(poolSize),
		"max_client_conn":           "500",
		"server_login_retry":        "0.2",
		"server_connect_timeout":    "5",
		"query_wait_timeout":        "30",
		"ignore_startup_parameters": "extra_float_digits",
		"admin_users":               "postgres",
	}
	for k, v := range opts.Settings {
		settings[k] = v
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var ini strings.Builder
	fmt.Fprintf(&ini, "[databases]\n* = host=127.0.0.1 port=%d\n\n[pgbouncer]\n", backend.port)
	for _, k := range keys {
		fmt.Fprintf(&ini, "%s = %s\n", k, settings[k])
	}
	cfg := filepath.Join(dir, "pgbouncer.ini")
	if err := os.WriteFile(cfg, []byte(ini.String()), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("throwaway: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "users.txt"), []byte(`"postgres" ""`+"\n"), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("throwaway: %w", err)
	}
	if err := acct.chown(dir); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("throwaway: %w", err)
	}
	s.command = func() *exec.Cmd {
		cmd := exec.Command(bin, cfg)
		acct.credential(cmd)
		return cmd
	}
	s.ping = func(ctx context.Context) error {
		return pingSQL(ctx, "postgres", s.dsn+"&connect_timeout=2&binary_parameters=yes")
	}
	return launch(ctx, s)
}
