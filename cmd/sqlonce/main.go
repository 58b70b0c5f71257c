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
  sqlonce demo    [--db DSN] [--schema NAME] [--orders N] [--keep]
  sqlonce migrate [up|down|status] --db DSN [--schema NAME]
  sqlonce purge   --db DSN [--schema NAME] [--batch N]
  sqlonce stats   --db DSN [--schema NAME]
  sqlonce keys get    --db DSN --scope S [--kind KIND] KEY [--json]
  sqlonce keys forget --db DSN --scope S [--kind KIND] KEY [--leased] [--json]
  sqlonce keys list   --db DSN --scope S [--kind KIND] [--state done|leased|lapsed|expired] [--limit N] [--json]
  sqlonce keys redrive --db DSN --scope S [--kind steps] KEY [--json]
  sqlonce outbox stats   --db DSN [--json]
  sqlonce outbox list    --db DSN --state pending|sent|parked [--after SEQ] [--limit N] [--json]
  sqlonce outbox get     --db DSN ID [--json]
  sqlonce outbox redrive --db DSN ID [--json]
  sqlonce outbox forget  --db DSN ID [--leased] [--json]
  sqlonce version

--schema names the PostgreSQL schema (MySQL/MariaDB database) of sqlonce's
tables when the application keeps them apart (WithSchema, WithDatabase).
keys reach every kind of key: dedupe, steps, inbox, http, http-steps,
http-norepeat, grpc ('sqlonce keys -h'). outbox looks at the transactional
outbox's messages (package outbox) and re-drives or forgets parked ones
('sqlonce outbox -h').

'sqlonce CMD -h' or 'sqlonce help CMD' shows a command's flags and an example.

` + dsnHelp + `
Without --db or $SQLONCE_DB, demo runs on a SQLite file in a temporary
directory.

` + exitHelp

// dsnHelp is the DSN forms --db accepts, shown by every command's help.
const dsnHelp = `DSN (--db, default $SQLONCE_DB), as each driver's users write it:
  postgres://user:pass@host:5432/db?sslmode=disable   PostgreSQL URL (or postgresql://)
  host=localhost user=app dbname=shop                 PostgreSQL key=value DSN
  user:pass@tcp(host:3306)/db                         MySQL/MariaDB (go-sql-driver/mysql)
  mysql://user:pass@tcp(host:3306)/db                 the same, with a scheme
  ./app.db  /var/lib/app.db  file:app.db              SQLite file (or sqlite://path)
`

const exitHelp = `Exit status:
  0  success
  1  operational failure: database unreachable, migrations missing, SQL error,
     a demo check failed
  2  usage error: unknown command or flag, missing --db
  3  not found: keys get/forget/redrive named a key that does not exist, or
     outbox get/redrive/forget a message that is not in the outbox
  4  refused: keys forget named a key a lease still holds (see --leased),
     keys redrive a key whose operation was not given up, outbox redrive a
     message that is not parked, or outbox forget one a relay is publishing
`

// Exit statuses; see the package documentation.
const (
	exitFailure  = 1
	exitUsage    = 2
	exitNotFound = 3
	exitRefused  = 4
)

// usageError is a command line that could not be understood: exit status 2.
// cmd is the command whose -h helps, "" for the global usage.
type usageError struct{ msg, cmd string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return usageError{msg: fmt.Sprintf(format, args...)}
}

// cmdUsagef is a usage error of command cmd ("keys get").
func cmdUsagef(cmd, format string, args ...any) error {
	return usageError{msg: fmt.Sprintf(format, args...), cmd: cmd}
}

// exitError is a failure that exits with its own status, not 1.
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return e.msg }

// helpRequest is -h or help: its text goes to stdout, exit status 0.
type helpRequest struct{ text string }

func (helpRequest) Error() string { return "help requested" }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(report(err, os.Stdout, os.Stderr))
}

// report writes err for people and returns the exit status it means.
func report(err error, stdout, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	if h, ok := errors.AsType[helpRequest](err); ok {
		fmt.Fprint(stdout, h.text)
		return 0
	}
	if u, ok := errors.AsType[usageError](err); ok {
		see := "sqlonce help"
		if u.cmd != "" {
			see = "sqlonce " + u.cmd + " -h"
		}
		fmt.Fprintf(stderr, "sqlonce: %v (see '%s')\n", oneLine(err), see)
		return exitUsage
	}
	fmt.Fprintf(stderr, "sqlonce: %v\n", oneLine(err))
	if e, ok := errors.AsType[exitError](err); ok {
		return e.code
	}
	return exitFailure
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
	case "-h", "-help", "--help":
		return helpRequest{usage}
	case "help":
		if len(args) == 0 {
			return helpRequest{usage}
		}
		// "help keys get" is "keys get -h".
		return run(ctx, append(args, "-h"), stdout, stderr)
	case "demo":
		return demoCmd(ctx, args, stdout, stderr)
	case "migrate":
		return migrateCmd(ctx, args, stdout)
	case "purge":
		return purgeCmd(ctx, args, stdout, stderr)
	case "stats":
		return statsCmd(ctx, args, stdout)
	case "keys":
		return keysCmd(ctx, args, stdout, stderr)
	case "outbox":
		return outboxCmd(ctx, args, stdout)
	case "version", "-version", "--version":
		return versionCmd(args, stdout)
	}
	return usagef("unknown command %q", cmd)
}

// isHelp tells whether arg asks for help.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}

// flags parses a command's flags, which may come before or after its
// positional arguments ("migrate up --db X" and "migrate --db X up").
// -h returns a helpRequest with the command's help.
func flags(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, helpRequest{commandHelp(fs)}
			}
			return nil, cmdUsagef(fs.Name(), "%s: %v", fs.Name(), err)
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
	return fs.String("db", os.Getenv("SQLONCE_DB"), "the database's `DSN` (forms below; default $SQLONCE_DB)")
}

func schemaFlag(fs *flag.FlagSet) *string {
	return fs.String("schema", "", "the PostgreSQL schema or MySQL/MariaDB database `NAME` that holds sqlonce's tables, as WithSchema/WithDatabase name it (default: where the connection finds them)")
}

func needDB(cmd, dsn string) error {
	if dsn == "" {
		return cmdUsagef(cmd, "%s needs --db DSN (or $SQLONCE_DB)", cmd)
	}
	return nil
}
