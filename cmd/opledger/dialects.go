package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/dialects/mysql"
	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/dialects/sqlite"
)

// namedDialects are the dialects the command line knows by name (for
// `migrate export --dialect`).
var namedDialects = map[string]dialects.Dialect{
	"postgres": postgres.New(),
	"sqlite":   sqlite.New(),
	"mysql":    mysql.New(),
	"tidb":     mysql.NewTiDB(), // the same migrations as mysql
}

// dialectByName returns the dialect called name.
func dialectByName(name string) (dialects.Dialect, error) {
	if d, ok := namedDialects[strings.ToLower(name)]; ok {
		return d, nil
	}
	names := make([]string, 0, len(namedDialects))
	for n := range namedDialects {
		names = append(names, n)
	}
	sort.Strings(names)
	return nil, fmt.Errorf("unknown dialect %q (want %s)", name, strings.Join(names, ", "))
}
