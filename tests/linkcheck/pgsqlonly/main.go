// Command pgsqlonly is a program that uses sqlonce on PostgreSQL through
// database/sql, pgsqldriver and lib/pq only: pgsqldriver recognises pgx's
// errors without linking pgx. TestLinks checks what it links.
package main

import (
	"database/sql"
	"fmt"
	"os"

	_ "github.com/lib/pq"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/pgsqldriver"
)

func main() {
	db, err := sql.Open("postgres", os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	drv, err := pgsqldriver.New(db)
	if err != nil {
		panic(err)
	}
	store, err := dedupe.New(drv)
	fmt.Println(store != nil, err, sqlonce.IsRetryable(err))
}
