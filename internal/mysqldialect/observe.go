package mysqldialect

import (
	"errors"
	"strconv"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/opledger/opledger/internal/dialectkit"
)

var _ dialectkit.Observed = Dialect{}

// SystemName returns "mysql", for MariaDB as well: the dialect cannot
// tell them apart without asking the server.
func (Dialect) SystemName() string { return "mysql" }

// StatusCode returns err's MySQL error number in decimal, or "".
func (Dialect) StatusCode(err error) string {
	var me *gomysql.MySQLError
	if errors.As(err, &me) && me != nil {
		return strconv.Itoa(int(me.Number))
	}
	return ""
}
