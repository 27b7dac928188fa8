package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	"github.com/opledger/opledger/dialects/mysql"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/migrations"
)

// Open a MySQL or MariaDB database, create the ledger's table and build
// the ledger. Importing the dialect registers go-sql-driver/mysql's
// "mysql" driver. This needs a server, so it is compiled, not run.
func Example() {
	ctx := context.Background()
	dsn, err := mysql.DSN("mysql://app:secret@db.internal:3306/orders") // or app:secret@tcp(db.internal:3306)/orders
	if err != nil {
		log.Fatal(err)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	m, err := migrations.New(db, mysql.New()) // creates opledger_operations
	if err != nil {
		log.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		log.Fatal(err)
	}
	store, err := ledger.New(mysql.New())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("ledger table:", store.Table())
}

// DSN turns either form of connection string into the driver's, with
// parseTime=true; Display shows one without its password.
func ExampleDSN() {
	for _, s := range []string{
		"mysql://app:secret@db.internal:3306/orders",
		"mariadb://app:p%40ss@db.internal/orders?clientFoundRows=true",
		"mysql://app@/orders?socket=/run/mysqld/mysqld.sock",
		"app:secret@tcp(db.internal:3306)/orders",
		"tidb://app:secret@tidb.internal/orders",
	} {
		dsn, err := mysql.DSN(s)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(dsn)
		fmt.Println("  shown as", mysql.Display(s))
	}
	// Output:
	// app:secret@tcp(db.internal:3306)/orders?parseTime=true
	//   shown as mysql://app:xxxxx@db.internal:3306/orders
	// app:p@ss@tcp(db.internal:3306)/orders?clientFoundRows=true&parseTime=true
	//   shown as mysql://app:xxxxx@db.internal:3306/orders
	// app@unix(/run/mysqld/mysqld.sock)/orders?parseTime=true
	//   shown as mysql://app@/orders?socket=%2Frun%2Fmysqld%2Fmysqld.sock
	// app:secret@tcp(db.internal:3306)/orders?parseTime=true
	//   shown as mysql://app:xxxxx@db.internal:3306/orders
	// app:secret@tcp(tidb.internal:4000)/orders?parseTime=true&tidb_txn_mode=%27pessimistic%27
	//   shown as tidb://app:xxxxx@tidb.internal:4000/orders
}

// Open a database that may be MySQL, MariaDB or TiDB, and let the server
// say which dialect it needs. On TiDB, open the pool again with what the
// TiDB dialect needs on every connection (pessimistic transactions); a
// tidb:// URL through DSN has it from the start. This needs a server, so
// it is compiled, not run.
func ExampleDetect() {
	ctx := context.Background()
	cfg, err := mysql.Config("mysql://app:secret@db.internal:4000/orders")
	if err != nil {
		log.Fatal(err)
	}
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		log.Fatal(err)
	}
	d, err := mysql.Detect(ctx, db) // mysql.NewTiDB() on TiDB, else mysql.New()
	if err != nil {
		log.Fatal(err)
	}
	if mysql.Configure(d, cfg) { // TiDB: tidb_txn_mode = 'pessimistic' on every connection
		db.Close()
		if db, err = sql.Open("mysql", cfg.FormatDSN()); err != nil {
			log.Fatal(err)
		}
	}
	defer db.Close()
	store, err := ledger.New(d)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("ledger on", d.Name(), "in", store.Table())
}
