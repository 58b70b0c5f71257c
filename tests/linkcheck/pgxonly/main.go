// Command pgxonly is a program that uses sqlonce on PostgreSQL through pgx
// only. TestLinks checks what it links.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/pgxdriver"
)

func main() {
	pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	drv, err := pgxdriver.New(pool)
	if err != nil {
		panic(err)
	}
	store, err := dedupe.New(drv)
	fmt.Println(store != nil, err, sqlonce.IsRetryable(err))
}
