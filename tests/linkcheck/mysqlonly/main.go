// Command mysqlonly is a program that uses sqlonce on MySQL/MariaDB
// through go-sql-driver/mysql only. TestLinks checks what it links.
package main

import (
	"database/sql"
	"fmt"
	"os"

	_ "github.com/go-sql-driver/mysql"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/mysqldriver"
)

func main() {
	db, err := sql.Open("mysql", os.Getenv("MYSQL_DSN"))
	if err != nil {
		panic(err)
	}
	drv, err := mysqldriver.New(db)
	if err != nil {
		panic(err)
	}
	store, err := dedupe.New(drv)
	fmt.Println(store != nil, err, sqlonce.IsRetryable(err))
}
