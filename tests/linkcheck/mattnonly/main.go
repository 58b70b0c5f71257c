// Command mattnonly is a program that uses sqlonce on SQLite through
// mattn/go-sqlite3 only. TestLinks checks what it links.
package main

import (
	"fmt"

	_ "github.com/mattn/go-sqlite3"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/mattn"
)

func main() {
	db, err := mattn.Open("app.db")
	if err != nil {
		panic(err)
	}
	drv, err := sqlitedriver.New(db)
	if err != nil {
		panic(err)
	}
	store, err := dedupe.New(drv)
	fmt.Println(store != nil, err, sqlonce.IsRetryable(err))
}
