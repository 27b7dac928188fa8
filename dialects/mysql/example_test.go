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
}
