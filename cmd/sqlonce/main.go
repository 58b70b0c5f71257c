// Command sqlonce shows the toolkit at work and looks after its tables.
//
//	sqlonce demo    [--db DSN] [--orders N]   a checkout service hammered by repeats
//	sqlonce migrate [up|down|status] --db DSN  sqlonce's own migrations
//	sqlonce purge   --db DSN [--batch N]       delete expired keys and tokens
//	sqlonce stats   --db DSN                   keys per scope, leased, expired, oldest
//	sqlonce keys get|forget --db DSN --scope S KEY [--json]   one key of a dedupe store
//	sqlonce keys list --db DSN --scope S [--state STATE] [--json]
//
// DSN picks the database by its scheme:
//
//	postgres://user:pass@host:5432/db?sslmode=disable   (or postgresql://)
//	mysql://user:pass@tcp(host:3306)/db                 (go-sql-driver/mysql's DSN after mysql://)
//	sqlite://path/to/file.db                            (a file; created if missing)
//
// --db defaults to $SQLONCE_DB. Without either, demo runs on a SQLite file
// in a temporary directory, removed afterwards.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
)

const usage = `sqlonce: make operations idempotent with the SQL database alone.

Usage:
  sqlonce demo    [--db DSN] [--orders N] [--keep]
  sqlonce migrate [up|down|status] --db DSN
  sqlonce purge   --db DSN [--batch N]
  sqlonce stats   --db DSN
  sqlonce keys get    --db DSN --scope S KEY [--json]
  sqlonce keys forget --db DSN --scope S KEY [--leased] [--json]
  sqlonce keys list   --db DSN --scope S [--state done|leased|lapsed|expired] [--limit N] [--json]

DSN schemes:
  postgres://user:pass@host:5432/db?sslmode=disable
  mysql://user:pass@tcp(host:3306)/db
  sqlite://path/to/file.db

--db defaults to $SQLONCE_DB; demo without it runs on a SQLite file in a
temporary directory.
`

// usageError is a command line that could not be understood: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return usageError{fmt.Sprintf(format, args...)}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(os.Stdout, usage)
	case errors.As(err, new(usageError)):
		fmt.Fprintf(os.Stderr, "sqlonce: %v (see 'sqlonce help')\n", oneLine(err))
		os.Exit(2)
	default:
		fmt.Fprintf(os.Stderr, "sqlonce: %v\n", oneLine(err))
		os.Exit(1)
	}
}

// oneLine keeps an error to the single line the command promises.
func oneLine(err error) string {
	s := strings.TrimSuffix(err.Error(), "\n")
	s = strings.ReplaceAll(s, "\n", "; ")
	return s
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("no command")
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "help", "-h", "-help", "--help":
		return flag.ErrHelp
	case "demo":
		return demoCmd(ctx, args, stdout, stderr)
	case "migrate":
		return migrateCmd(ctx, args, stdout)
	case "purge":
		return purgeCmd(ctx, args, stdout, stderr)
	case "stats":
		return statsCmd(ctx, args, stdout)
	case "keys":
		return keysCmd(ctx, args, stdout)
	}
	return usagef("unknown command %q", cmd)
}

// flags parses a command's flags, which may come before or after its
// positional arguments ("migrate up --db X" and "migrate --db X up").
func flags(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usagef("%s: %v", fs.Name(), err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func dbFlag(fs *flag.FlagSet) *string {
	return fs.String("db", os.Getenv("SQLONCE_DB"), "database `DSN` (postgres://, mysql://, sqlite://)")
}

func needDB(cmd, dsn string) error {
	if dsn == "" {
		return usagef("%s needs --db DSN (postgres://..., mysql://..., sqlite://path)", cmd)
	}
	return nil
}
