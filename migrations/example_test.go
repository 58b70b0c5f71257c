package migrations_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlonce/sqlonce/migrations"
)

// Apply sqlonce's migrations at start-up; a second run finds nothing to do.
func ExampleUp() {
	ctx := context.Background()
	db, err := sql.Open("mysql", mysqlDatabase("example_migrations"))
	if err != nil {
		panic(err)
	}
	defer db.Close()

	for range 2 {
		if err := migrations.Up(ctx, db, migrations.MySQL); err != nil {
			panic(err)
		}
	}
	p, err := migrations.NewProvider(migrations.MySQL, db)
	if err != nil {
		panic(err)
	}
	v, err := p.GetDBVersion(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("version:", v, "table:", migrations.TableName)
	// Output: version: 3 table: sqlonce_goose_db_version
}

// mysqlDatabase recreates an empty database and returns its DSN.
func mysqlDatabase(name string) string {
	server := os.Getenv("SQLONCE_MYSQL_DSN")
	if server == "" {
		server = "root@tcp(127.0.0.1:3306)/test?parseTime=true"
	}
	db, err := sql.Open("mysql", server)
	if err != nil {
		panic(err)
	}
	defer db.Close()
	for _, q := range []string{"DROP DATABASE IF EXISTS " + name, "CREATE DATABASE " + name} {
		if _, err := db.Exec(q); err != nil {
			panic(err)
		}
	}
	cfg, err := mysql.ParseDSN(server)
	if err != nil {
		panic(err)
	}
	cfg.DBName = name
	return cfg.FormatDSN()
}
