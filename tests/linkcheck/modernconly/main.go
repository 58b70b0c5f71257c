// Command modernconly is a program that uses sqlonce on SQLite through
// modernc.org/sqlite only. TestLinks checks what it links.
package main

import (
	"fmt"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
)

func main() {
	db, err := modernc.Open("app.db")
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
