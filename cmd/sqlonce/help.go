package main

import (
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
)

// help is what 'sqlonce CMD -h' says besides the command's flags.
type help struct {
	synopsis string // after "Usage: "
	short    string // one line, for 'sqlonce keys -h'
	about    string // what the command does, a few lines
	example  string
	// exit lists the statuses besides 0, 1 and 2 the command returns.
	exit []string
	// db tells whether the command takes --db, and so shows the DSN forms.
	db bool
	// json documents the fields --json writes.
	json string
}

var helps = map[string]help{
	"demo": {
		synopsis: "sqlonce demo [--db DSN] [--schema NAME] [--orders N] [--keep]",
		about: `Runs a checkout service whose requests all arrive more than once (double
clicks, client retries, broker redeliveries, two workers, two tabs) and
stages crashes and timeouts on the way, then proves from the database that
no effect happened twice. Without --db it runs on a SQLite file in a
temporary directory; on a server database it deletes its rows afterwards
unless --keep.`,
		example: "sqlonce demo\n  sqlonce demo --db 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'",
		db:      true,
	},
	"migrate": {
		synopsis: "sqlonce migrate [up|down|status] --db DSN [--schema NAME]",
		about: `Applies sqlonce's own migrations (up, the default), rolls back the last
one (down), or lists them (status). up creates a missing SQLite file, and
with --schema a missing PostgreSQL schema or MySQL/MariaDB database, as
migrations.Up with WithSchema does.`,
		example: "sqlonce migrate up --db 'root@tcp(127.0.0.1:3306)/shop'\n  sqlonce migrate up --db postgres://app@db:5432/shop --schema billing",
		db:      true,
	},
	"purge": {
		synopsis: "sqlonce purge --db DSN [--schema NAME] [--batch N]",
		about: `Deletes expired keys, then expired tokens, one batch per short
transaction, reporting each batch on stderr. Expired rows already count as
absent; purging frees their space.`,
		example: "sqlonce purge --db postgres://app@db:5432/shop --batch 5000",
		db:      true,
	},
	"stats": {
		synopsis: "sqlonce stats --db DSN [--schema NAME]",
		about: `Counts the keys of every kind and scope: all, leased (a holder is at
work), expired (purge deletes them), and the oldest; then the tokens, and
the transactional outbox's messages: pending (with the age of the oldest),
parked and sent ('sqlonce outbox stats' details them). The kind and scope
columns are what 'sqlonce keys' takes as --kind and --scope (election rows
are the leases that elect one purger or resumer).`,
		example: "sqlonce stats --db ./app.db",
		db:      true,
	},
	"keys get": {
		short:    "one key: kind, state, times, fencing token, sizes",
		synopsis: "sqlonce keys get --db DSN --scope S [--kind KIND] KEY [--json]",
		about: `Shows one key of every kind that holds it (or of --kind): its kind, its
state, when it was created and expires, a lease's deadline, its fencing
token (a number that grows with every claim of the key; a lease holder
hands it to other systems so they refuse a former holder's late writes),
the sizes of its fingerprint and recorded response, and for an operation
of several steps, where it stopped. A key of another kind than --kind
asked is named in the not-found message.`,
		example: "sqlonce keys get --db postgres://app@db:5432/shop --scope customer-7 refund-3\n  sqlonce keys get --db postgres://app@db:5432/shop --kind http --scope user-42 8e2f0c1a-5b7d-4c1e-9f3a-2d6b8e4f1a09",
		exit:    []string{"3  not found: the key does not exist (of --kind)"},
		json:    keyFields,
		db:      true,
	},
	"keys forget": {
		short:    "delete a key so that its next request runs again",
		synopsis: "sqlonce keys forget --db DSN --scope S [--kind KIND] KEY [--leased] [--json]",
		about: `Deletes one key, so that its next request (message delivery, operation)
runs the work again. Without --kind, the key must be of one kind only
(else a usage error: name it with --kind). A key a lease still holds is
refused unless --leased.`,
		example: "sqlonce keys forget --db 'root@tcp(127.0.0.1:3306)/shop' --scope customer-7 refund-3\n  sqlonce keys forget --db 'root@tcp(127.0.0.1:3306)/shop' --kind inbox --scope ledger-writer evt-991",
		exit:    []string{"3  not found: the key does not exist (of --kind)", "4  refused: a lease holds the key and --leased is not given"},
		json:    forgetFields,
		db:      true,
	},
	"keys redrive": {
		short:    "re-drive an operation given up, from its last recovery point",
		synopsis: "sqlonce keys redrive --db DSN --scope S [--kind steps] KEY [--json]",
		about: `Turns an operation of several steps that the resumer gave up (repeats get
ErrOperationFailed) back into a stopped operation, once its cause is
fixed: its next run (a retry of RunSteps, or the resumer) goes on from its
last recovery point, the steps done not run again, with a fresh count of
attempts (dedupe.Store.Redrive). Only --kind steps, the default. A key
running, stopped or done is refused, as is one given up by an earlier
build, which kept no recovery point ('sqlonce keys forget' starts it anew).`,
		example: "sqlonce keys redrive --db postgres://app@db:5432/shop --scope customer-7 order-3",
		exit:    []string{"3  not found: the key does not exist (as a steps key)", "4  refused: the key's operation was not given up, or kept no recovery point"},
		json:    redriveFields,
		db:      true,
	},
	"keys list": {
		short:    "the keys of a scope, with their kind and state",
		synopsis: "sqlonce keys list --db DSN --scope S [--kind KIND] [--state STATE] [--limit N] [--json]",
		about: `Lists the keys of one scope, of every kind (or of --kind), by kind then in
key order, with their state: done (repeats get the recorded answer),
leased (a holder is at work), lapsed (the lease ran out; the next request
takes the key over) or expired (counts as absent until purged). With
--kind steps (or http-steps), --state also takes running and stopped
(leased and lapsed: a retry or the resumer goes on) and failed (given up
by the resumer; 'sqlonce keys redrive' re-drives one), and done leaves
the failed out. With --kind, a note on stderr counts the scope's keys of
the other kinds.`,
		example: "sqlonce keys list --db ./app.db --scope customer-7 --state leased\n  sqlonce keys list --db ./app.db --kind inbox --scope ledger-writer",
		json:    "JSON: an array of the objects 'sqlonce keys get -h' describes.\n",
		db:      true,
	},
	"outbox stats": {
		short:    "the backlog, the age of its oldest message, parked and sent messages",
		synopsis: "sqlonce outbox stats --db DSN [--json]",
		about: `Counts the transactional outbox's messages (outbox.Store.Stats): the
pending ones (the backlog: due, waiting for a retry, being published, or
held back behind a parked message of their key) and when the oldest of
them was enqueued; the parked ones (failed for good, each holding back the
later messages of its ordering key); the sent ones not purged yet. An age
of the oldest pending message that keeps growing is a relay that does not
run, or a key held back: alert on it, and on parked above 0.`,
		example: "sqlonce outbox stats --db postgres://app@db:5432/shop",
		json:    outboxStatsFields,
		db:      true,
	},
	"outbox list": {
		short:    "the messages in a state, in enqueue order, a page at a time",
		synopsis: "sqlonce outbox list --db DSN --state pending|sent|parked [--after SEQ] [--limit N] [--json]",
		about: `Lists the messages in one state (outbox.Store.List), in the order they were
enqueued: their seq, id, topic, ordering key, times, failed attempts and
last error. A page holds --limit messages; when there are more, a last
line gives the --after that lists the next page (the last seq listed).`,
		example: "sqlonce outbox list --db ./app.db --state parked\n  sqlonce outbox list --db ./app.db --state pending --after 1200 --limit 50",
		json:    "JSON: an array of the objects 'sqlonce outbox get -h' describes.\n",
		db:      true,
	},
	"outbox get": {
		short:    "one message: state, topic, key, times, attempts, last error, payload",
		synopsis: "sqlonce outbox get --db DSN ID [--json]",
		about: `Shows the message with id ID (outbox.Store.Get): its state (pending, sent
or parked), topic, ordering key, when it was enqueued and is due or was
sent, whether a relay is publishing it now, its failed attempts and last
error, its headers, and its payload (quoted when it is text).`,
		example: "sqlonce outbox get --db postgres://app@db:5432/shop invoice-1",
		exit:    []string{"3  not found: no message ID in the outbox (never enqueued, not committed, forgotten or purged)"},
		json:    messageFields,
		db:      true,
	},
	"outbox redrive": {
		short:    "make a parked message pending again, once its cause is fixed",
		synopsis: "sqlonce outbox redrive --db DSN ID [--json]",
		about: `Makes a parked message pending again, due at once with its attempts back
to 0 (outbox.Store.Redrive), once the cause of its failures is fixed: a
relay publishes it next, then the later messages of its ordering key it
held back. A message pending or sent is refused, naming its state.`,
		example: "sqlonce outbox redrive --db postgres://app@db:5432/shop invoice-1",
		exit:    []string{"3  not found: no message ID in the outbox", "4  refused: the message is not parked (its state is named)"},
		json:    outboxRedriveFields,
		db:      true,
	},
	"outbox forget": {
		short:    "delete a message: a parked one lets its key go on, a pending one is never published",
		synopsis: "sqlonce outbox forget --db DSN ID [--leased] [--json]",
		about: `Deletes the message with id ID, whatever its state (outbox.Store.Forget):
a parked one, to let the later messages of its ordering key go; a pending
one, never to publish it; a sent one, before its retention. A message a
relay is publishing is refused unless --leased (it may then reach the
broker all the same). Once forgotten, its id can be enqueued again.`,
		example: "sqlonce outbox forget --db 'root@tcp(127.0.0.1:3306)/shop' invoice-1",
		exit:    []string{"3  not found: no message ID in the outbox", "4  refused: a relay is publishing the message and --leased is not given"},
		json:    outboxForgetFields,
		db:      true,
	},
	"version": {
		synopsis: "sqlonce version",
		about: `Prints the version of the sqlonce module the command was built from (a
release such as v0.1.0, or (devel) with the commit of a checkout), and the
Go version and platform it was built with.`,
		example: "sqlonce version",
	},
}

// findHelp tells support how to find a customer's key.
const findHelp = `A customer's key: httpidem and grpcidem keep keys per caller, so --scope is
the principal your principal func returns for the customer (a user or API
client id), and the key is the Idempotency-Key header's value as sent:
  sqlonce keys get --kind http --scope user-42 8e2f0c1a-5b7d-4c1e-9f3a-2d6b8e4f1a09
'sqlonce stats' lists every kind and scope that holds keys.
`

// kindsHelp lists the kinds in a keys subcommand's help.
var kindsHelp = func() string {
	var sb strings.Builder
	sb.WriteString("Kinds (--kind), and what --scope names:\n")
	w := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	for _, k := range keyKinds {
		fmt.Fprintf(w, "  %s\t%s\n", k.name, k.help)
	}
	w.Flush()
	return sb.String()
}()

// keysHelp is 'sqlonce keys -h'.
func keysHelp() string {
	var sb strings.Builder
	sb.WriteString("Usage: sqlonce keys get|forget|list|redrive --db DSN --scope S [--kind KIND] ...\n\n")
	sb.WriteString("Reads, lists, forgets and re-drives keys of every kind (--kind; default: every kind):\n\n")
	w := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	for _, k := range keyKinds {
		fmt.Fprintf(w, "  %s\t%s\n", k.name, k.help)
	}
	w.Flush()
	sb.WriteString("\n" + findHelp + "\n")
	for _, sub := range []string{"keys get", "keys forget", "keys list", "keys redrive"} {
		h := helps[sub]
		fmt.Fprintf(&sb, "  %s\n      %s\n", h.synopsis, h.short)
	}
	sb.WriteString("\n'sqlonce keys get -h' (forget, list, redrive) shows a subcommand's flags.\n\n")
	sb.WriteString("Example:\n  " + helps["keys get"].example + "\n")
	return sb.String()
}

// outboxHelp is 'sqlonce outbox -h'.
func outboxHelp() string {
	var sb strings.Builder
	sb.WriteString("Usage: sqlonce outbox stats|list|get|redrive|forget --db DSN ...\n\n")
	sb.WriteString(`Looks at the transactional outbox's messages (package outbox: Enqueue in
the caller's transaction, a Relay publishes them) and mends the parked
ones, through outbox.Store's Stats, List, Get, Redrive and Forget. A
message a relay failed to publish for good (a permanent error, or its
attempts spent) is parked: it holds back the later messages of its
ordering key until re-driven (once its cause is fixed) or forgotten.

`)
	for _, sub := range outboxSubs {
		h := helps["outbox "+sub]
		fmt.Fprintf(&sb, "  %s\n      %s\n", h.synopsis, h.short)
	}
	sb.WriteString("\n'sqlonce outbox get -h' (stats, list, redrive, forget) shows a subcommand's flags.\n\n")
	sb.WriteString("Example:\n  " + helps["outbox list"].example + "\n")
	return sb.String()
}

// commandHelp is 'sqlonce CMD -h': usage, what it does, its flags, an
// example, the DSN forms and its exit statuses.
func commandHelp(fs *flag.FlagSet) string {
	h := helps[fs.Name()]
	var sb strings.Builder
	fmt.Fprintf(&sb, "Usage: %s\n\n%s\n\n", h.synopsis, h.about)
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		sb.WriteString("Flags:\n")
		w := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
		fs.VisitAll(func(f *flag.Flag) {
			name, text := flag.UnquoteUsage(f)
			arg := "--" + f.Name
			if name != "" {
				arg += " " + name
			}
			// --db's default is $SQLONCE_DB, which may hold a password:
			// its text says so without showing it.
			if f.Name != "db" && f.DefValue != "" && f.DefValue != "false" {
				text += fmt.Sprintf(" (default %s)", f.DefValue)
			}
			fmt.Fprintf(w, "  %s\t%s\n", arg, text)
		})
		w.Flush()
		sb.WriteString("\n")
	}
	fmt.Fprintf(&sb, "Example:\n  %s\n\n", h.example)
	if strings.HasPrefix(h.synopsis, "sqlonce keys") {
		sb.WriteString(kindsHelp + "\n")
	}
	if h.json != "" {
		sb.WriteString(h.json + "\n")
	}
	if h.db {
		sb.WriteString(dsnHelp + "\n")
	}
	sb.WriteString("Exit status:\n  0  success\n")
	if h.db && strings.HasPrefix(h.synopsis, "sqlonce demo") {
		sb.WriteString("  1  operational failure: database unreachable, migrations missing, SQL error,\n     a demo check failed\n")
	} else if h.db {
		sb.WriteString("  1  operational failure: database unreachable, migrations missing, SQL error\n")
	} else {
		sb.WriteString("  1  operational failure\n")
	}
	sb.WriteString("  2  usage error\n")
	for _, e := range h.exit {
		sb.WriteString("  " + e + "\n")
	}
	return sb.String()
}
