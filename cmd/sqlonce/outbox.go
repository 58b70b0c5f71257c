package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/outbox"
)

// outboxStore is what the outbox commands use of an outbox.Store, whatever
// its transaction type.
type outboxStore interface {
	Get(ctx context.Context, id string) (outbox.Info, error)
	List(ctx context.Context, state outbox.State, after int64, limit int) ([]outbox.Info, error)
	Stats(ctx context.Context) (outbox.Stats, error)
	Redrive(ctx context.Context, id string) error
	Forget(ctx context.Context, id string, opts ...outbox.ForgetOption) error
}

// outboxSubs are outbox's subcommands, in the order its help lists them.
var outboxSubs = []string{"stats", "list", "get", "redrive", "forget"}

// outboxStates are the states --state takes.
var outboxStates = map[string]outbox.State{"pending": outbox.Pending, "sent": outbox.Sent, "parked": outbox.Parked}

// outboxCmd looks at the transactional outbox's messages and mends parked
// ones, through package outbox's Store (Stats, List, Get, Redrive,
// Forget) on the driver the DSN selects.
func outboxCmd(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return cmdUsagef("outbox", "outbox takes stats, list, get, redrive or forget")
	}
	sub, args := args[0], args[1:]
	if isHelp(sub) {
		return helpRequest{outboxHelp()}
	}
	if !slices.Contains(outboxSubs, sub) {
		return cmdUsagef("outbox", "outbox %q: want stats, list, get, redrive or forget", sub)
	}
	name := "outbox " + sub
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	dsn, schema := dbFlag(fs), schemaFlag(fs)
	asJSON := fs.Bool("json", false, "write JSON for scripts (fields below)")
	var (
		leased      *bool
		state       *string
		after       *int64
		limit       *int
		stateLister = "pending, sent or parked"
	)
	switch sub {
	case "forget":
		leased = fs.Bool("leased", false, "forget a message a relay is publishing (it may reach the broker all the same)")
	case "list":
		state = fs.String("state", "", "list the messages in `STATE` (required): "+stateLister)
		after = fs.Int64("after", 0, "list the messages after the one whose seq is `SEQ` (the last seq of the page before)")
		limit = fs.Int("limit", outbox.DefaultListLimit, fmt.Sprintf("list at most `N` messages (1..%d)", outbox.MaxListLimit))
	}
	pos, err := flags(fs, args)
	if err != nil {
		return err
	}
	var st outbox.State
	switch sub {
	case "stats", "list":
		if len(pos) > 0 {
			return cmdUsagef(name, "%s takes no arguments, got %q", name, pos)
		}
	default:
		if len(pos) != 1 {
			return cmdUsagef(name, "%s takes one message ID", name)
		}
	}
	if sub == "list" {
		var ok bool
		switch st, ok = outboxStates[*state]; {
		case *state == "":
			return cmdUsagef(name, "outbox list needs --state %s", stateLister)
		case !ok:
			return cmdUsagef(name, "--state %q: want %s", *state, stateLister)
		case *after < 0:
			return cmdUsagef(name, "--after %d is below 0", *after)
		case *limit < 1 || *limit > outbox.MaxListLimit:
			return cmdUsagef(name, "--limit %d is outside 1..%d", *limit, outbox.MaxListLimit)
		}
	}
	if err := needDB(name, *dsn); err != nil {
		return err
	}
	run := func(s outboxStore) error {
		switch sub {
		case "stats":
			return outboxStats(ctx, s, *asJSON, stdout)
		case "list":
			return outboxList(ctx, s, st, *after, *limit, *asJSON, stdout)
		case "get":
			return outboxGet(ctx, s, pos[0], *asJSON, stdout)
		case "redrive":
			return outboxRedrive(ctx, s, pos[0], *asJSON, stdout)
		}
		return outboxForget(ctx, s, pos[0], *leased, *asJSON, stdout)
	}
	err = withDB(ctx, *dsn, *schema, false,
		func(b *backend[pgx.Tx]) error { return withOutbox(ctx, b, run) },
		func(b *backend[*sql.Tx]) error { return withOutbox(ctx, b, run) })
	if errors.Is(err, sqlonce.ErrInvalidKey) {
		return cmdUsagef(name, "%s: %v", name, err)
	}
	return err
}

func withOutbox[TTx any](ctx context.Context, b *backend[TTx], fn func(outboxStore) error) error {
	if err := needSchema(ctx, b); err != nil {
		return err
	}
	s, err := outbox.New(b.driver)
	if err != nil {
		return err
	}
	return fn(s)
}

// outboxNotFound is exit 3 for a message not in the outbox.
func outboxNotFound(id string) error {
	return exitError{exitNotFound, fmt.Sprintf("message %q: not in the outbox (never enqueued, not committed yet, forgotten, or purged after it was sent)", id)}
}

// outboxStatsJSON is outbox stats --json's answer.
type outboxStatsJSON struct {
	Pending          int64      `json:"pending"`
	OldestPending    *time.Time `json:"oldest_pending,omitempty"`
	OldestPendingAge *float64   `json:"oldest_pending_age_seconds,omitempty"`
	Parked           int64      `json:"parked"`
	Sent             int64      `json:"sent"`
}

const outboxStatsFields = `JSON fields (--json):
  pending                     the backlog: messages not sent yet (due, waiting for a retry, being
                              published, or held back behind a parked message of their key)
  oldest_pending              when the oldest pending message was enqueued (RFC 3339, the database's
                              clock; only while one is pending)
  oldest_pending_age_seconds  its age now, in seconds (only while one is pending)
  parked                      the messages that failed for good; each holds back its key
  sent                        the messages sent and not purged yet
`

func outboxStats(ctx context.Context, s outboxStore, asJSON bool, out io.Writer) error {
	st, err := s.Stats(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		j := outboxStatsJSON{Pending: st.Pending, Parked: st.Parked, Sent: st.Sent}
		if !st.OldestPending.IsZero() {
			at, age := st.OldestPending.UTC(), st.OldestPendingAge.Seconds()
			j.OldestPending, j.OldestPendingAge = &at, &age
		}
		return json.NewEncoder(out).Encode(j)
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "pending\t%d\t(the backlog: due, waiting for a retry, being published, or behind a parked message of their key)\n", st.Pending)
	if st.OldestPending.IsZero() {
		fmt.Fprintf(w, "oldest pending\t-\n")
	} else {
		fmt.Fprintf(w, "oldest pending\t%s\t(enqueued %s ago; an age that keeps growing is a relay that does not run, or a key held back)\n",
			st.OldestPending.UTC().Format(timeLayout), roundAge(st.OldestPendingAge))
	}
	if st.Parked > 0 {
		fmt.Fprintf(w, "parked\t%d\t(failed for good, each holding back its key: 'sqlonce outbox list --state parked' lists them)\n", st.Parked)
	} else {
		fmt.Fprintf(w, "parked\t0\n")
	}
	fmt.Fprintf(w, "sent\t%d\t(kept until the relay's retention purges them)\n", st.Sent)
	return w.Flush()
}

// roundAge rounds an age for people: to the millisecond below 10s, to
// the second above.
func roundAge(d time.Duration) time.Duration {
	if d < 10*time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Second)
}

// messageJSON is a message as outbox get --json and outbox list --json
// write it; messageFields documents its fields.
type messageJSON struct {
	Seq          int64             `json:"seq"`
	ID           string            `json:"id"`
	Topic        string            `json:"topic"`
	Key          string            `json:"key"`
	State        string            `json:"state"`
	Attempts     int               `json:"attempts"`
	LastError    string            `json:"last_error"`
	Leased       bool              `json:"leased"`
	LockedUntil  *time.Time        `json:"locked_until,omitempty"`
	Created      time.Time         `json:"created"`
	Available    *time.Time        `json:"available,omitempty"`
	Sent         *time.Time        `json:"sent,omitempty"`
	Headers      map[string]string `json:"headers"`
	Payload      []byte            `json:"payload"`
	PayloadBytes int               `json:"payload_bytes"`
}

const messageFields = `JSON fields (--json; outbox list writes an array of them):
  seq            the message's place in the outbox, in enqueue order (--after takes it)
  id             the message id (the consumer's inbox key)
  topic          the topic (a NATS subject, a RabbitMQ routing key)
  key            the ordering key ("" for none)
  state          pending, sent or parked
  attempts       the publishes that failed since it was enqueued or re-driven
  last_error     the last failed publish's error ("" for none)
  leased         whether a relay is publishing it now
  locked_until   the relay's lease's deadline (only while leased)
  created        when it was enqueued (RFC 3339, the database's clock)
  available      pending: when it is due (a failed message's next publish)
  sent           sent: when the broker confirmed it
  headers        the headers, an object of strings
  payload        the payload, base64
  payload_bytes  the payload's length
`

func messageToJSON(inf outbox.Info) messageJSON {
	j := messageJSON{
		Seq: inf.Seq, ID: inf.ID, Topic: inf.Topic, Key: inf.Key, State: inf.State.String(), Attempts: inf.Attempts,
		LastError: inf.LastError, Leased: inf.Leased, Created: inf.Created.UTC(), Headers: inf.Headers,
		Payload: inf.Payload, PayloadBytes: len(inf.Payload),
	}
	if j.Headers == nil {
		j.Headers = map[string]string{}
	}
	if j.Payload == nil {
		j.Payload = []byte{}
	}
	utc := func(t time.Time) *time.Time { t = t.UTC(); return &t }
	if inf.Leased {
		j.LockedUntil = utc(inf.LockedUntil)
	}
	switch inf.State {
	case outbox.Pending:
		j.Available = utc(inf.Available)
	case outbox.Sent:
		j.Sent = utc(inf.Sent)
	}
	return j
}

var outboxStateHelp = map[outbox.State]string{
	outbox.Pending: "(a relay publishes it when due, after the earlier messages of its key)",
	outbox.Sent:    "(the broker confirmed it; purged after the relay's retention)",
	outbox.Parked:  "(failed for good, holding back the later messages of its key: 'sqlonce outbox redrive' or 'forget')",
}

func outboxGet(ctx context.Context, s outboxStore, id string, asJSON bool, out io.Writer) error {
	inf, err := s.Get(ctx, id)
	switch {
	case errors.Is(err, sqlonce.ErrNotFound):
		return outboxNotFound(id)
	case err != nil:
		return err
	}
	if asJSON {
		return json.NewEncoder(out).Encode(messageToJSON(inf))
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "id\t%s\n", inf.ID)
	fmt.Fprintf(w, "seq\t%d\n", inf.Seq)
	fmt.Fprintf(w, "state\t%s\t%s\n", inf.State, outboxStateHelp[inf.State])
	fmt.Fprintf(w, "topic\t%s\n", inf.Topic)
	if inf.Key == "" {
		fmt.Fprintf(w, "key\t-\t(none: ordered after no other message)\n")
	} else {
		fmt.Fprintf(w, "key\t%s\n", inf.Key)
	}
	fmt.Fprintf(w, "created\t%s\n", inf.Created.UTC().Format(timeLayout))
	switch inf.State {
	case outbox.Pending:
		fmt.Fprintf(w, "due\t%s\n", inf.Available.UTC().Format(timeLayout))
	case outbox.Sent:
		fmt.Fprintf(w, "sent\t%s\n", inf.Sent.UTC().Format(timeLayout))
	}
	if inf.Leased {
		fmt.Fprintf(w, "leased until\t%s\t(a relay is publishing it)\n", inf.LockedUntil.UTC().Format(timeLayout))
	}
	fmt.Fprintf(w, "attempts\t%d\t(failed publishes since it was enqueued or re-driven)\n", inf.Attempts)
	if inf.LastError != "" {
		fmt.Fprintf(w, "last error\t%s\n", oneLineText(inf.LastError))
	}
	if len(inf.Headers) == 0 {
		fmt.Fprintf(w, "headers\tnone\n")
	} else {
		names := make([]string, 0, len(inf.Headers))
		for n := range inf.Headers {
			names = append(names, n)
		}
		slices.Sort(names)
		for i, n := range names {
			label := ""
			if i == 0 {
				label = "headers"
			}
			fmt.Fprintf(w, "%s\t%s: %s\n", label, n, oneLineText(inf.Headers[n]))
		}
	}
	fmt.Fprintf(w, "payload\t%s\n", payloadText(inf.Payload, 200))
	return w.Flush()
}

// oneLineText keeps a stored text (an error, a header) on one line.
func oneLineText(s string) string {
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' }), " ")
}

// payloadText shows a payload's size, and its text when it is printable
// UTF-8, quoted and cut to max bytes.
func payloadText(p []byte, max int) string {
	size := fmt.Sprintf("%d %s", len(p), plural(int64(len(p)), "byte"))
	if len(p) == 0 || !utf8.Valid(p) || strings.ContainsFunc(string(p), func(r rune) bool { return !unicode.IsPrint(r) && !unicode.IsSpace(r) }) {
		if len(p) > 0 {
			size += " (binary; --json shows it in base64)"
		}
		return size
	}
	text := string(p)
	if len(text) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		return size + ": " + strconv.Quote(text[:cut]) + "..."
	}
	return size + ": " + strconv.Quote(text)
}

func outboxList(ctx context.Context, s outboxStore, st outbox.State, after int64, limit int, asJSON bool, out io.Writer) error {
	list, err := s.List(ctx, st, after, limit)
	if err != nil {
		return err
	}
	more := false
	if len(list) == limit {
		next, err := s.List(ctx, st, list[len(list)-1].Seq, 1)
		if err != nil {
			return err
		}
		more = len(next) > 0
	}
	if asJSON {
		js := make([]messageJSON, len(list))
		for i, inf := range list {
			js[i] = messageToJSON(inf)
		}
		return json.NewEncoder(out).Encode(js)
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	switch st {
	case outbox.Pending:
		fmt.Fprintln(w, "seq\tid\ttopic\tkey\tcreated (UTC)\tdue (UTC)\tattempts\tleased\tlast error\t")
	case outbox.Sent:
		fmt.Fprintln(w, "seq\tid\ttopic\tkey\tcreated (UTC)\tsent (UTC)\tattempts\t")
	default:
		fmt.Fprintln(w, "seq\tid\ttopic\tkey\tcreated (UTC)\tattempts\tlast error\t")
	}
	for _, inf := range list {
		key := inf.Key
		if key == "" {
			key = "-"
		}
		lastErr := "-"
		if inf.LastError != "" {
			lastErr = cut(oneLineText(inf.LastError), 60)
		}
		created := inf.Created.UTC().Format(time.DateTime)
		switch st {
		case outbox.Pending:
			leased := "-"
			if inf.Leased {
				leased = "until " + inf.LockedUntil.UTC().Format(time.DateTime)
			}
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t\n", inf.Seq, inf.ID, inf.Topic, key, created, inf.Available.UTC().Format(time.DateTime), inf.Attempts, leased, lastErr)
		case outbox.Sent:
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t\n", inf.Seq, inf.ID, inf.Topic, key, created, inf.Sent.UTC().Format(time.DateTime), inf.Attempts)
		default:
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t\n", inf.Seq, inf.ID, inf.Topic, key, created, inf.Attempts, lastErr)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(list) == 0 {
		fmt.Fprintf(out, "(no %s messages)\n", st)
	}
	if more {
		fmt.Fprintf(out, "(the first %d; --after %d lists the next ones)\n", limit, list[len(list)-1].Seq)
	}
	return nil
}

// cut shortens s to at most n runes, marking the cut.
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-3]) + "..."
}

// outboxActionJSON is outbox redrive --json's and outbox forget --json's
// answer.
type outboxActionJSON struct {
	ID        string `json:"id"`
	Redriven  bool   `json:"redriven,omitempty"`
	Forgotten bool   `json:"forgotten,omitempty"`
	// Was is the message's state before (forget).
	Was string `json:"was,omitempty"`
}

const outboxRedriveFields = `JSON fields (--json):
  id        the message id
  redriven  true
`

const outboxForgetFields = `JSON fields (--json):
  id         the message id
  forgotten  true
  was        its state when it was forgotten: pending, sent or parked
`

// outboxRedrive makes a parked message pending again (outbox.Store.Redrive):
// exit 3 for no such message, 4 for one not parked, naming its state.
func outboxRedrive(ctx context.Context, s outboxStore, id string, asJSON bool, out io.Writer) error {
	err := s.Redrive(ctx, id)
	switch {
	case errors.Is(err, sqlonce.ErrNotFound):
		return outboxNotFound(id)
	case errors.Is(err, outbox.ErrNotParked):
		inf, gerr := s.Get(ctx, id)
		switch {
		case errors.Is(gerr, sqlonce.ErrNotFound):
			return outboxNotFound(id) // forgotten or purged since
		case gerr != nil:
			return exitError{exitRefused, fmt.Sprintf("message %q: not re-driven: %v", id, err)}
		}
		why := "only a parked message is re-driven"
		switch {
		case inf.State == outbox.Sent:
			why = "the broker confirmed it; only a parked message is re-driven"
		case inf.State == outbox.Pending && inf.Leased:
			why = "a relay is publishing it; only a parked message is re-driven"
		case inf.State == outbox.Pending:
			why = "a relay publishes it when due; only a parked message is re-driven"
		}
		return exitError{exitRefused, fmt.Sprintf("message %q is %s, not parked: %s", id, inf.State, why)}
	case err != nil:
		return err
	}
	if asJSON {
		return json.NewEncoder(out).Encode(outboxActionJSON{ID: id, Redriven: true})
	}
	fmt.Fprintf(out, "re-drove message %q: pending again, due now, attempts back to 0; a relay publishes it, then the later messages of its key\n", id)
	return nil
}

// outboxForget deletes a message (outbox.Store.Forget): exit 3 for no
// such message, 4 for one a relay is publishing without --leased.
func outboxForget(ctx context.Context, s outboxStore, id string, leased, asJSON bool, out io.Writer) error {
	inf, err := s.Get(ctx, id)
	switch {
	case errors.Is(err, sqlonce.ErrNotFound):
		return outboxNotFound(id)
	case err != nil:
		return err
	}
	var opts []outbox.ForgetOption
	if leased {
		opts = append(opts, outbox.ForgetLeased())
	}
	err = s.Forget(ctx, id, opts...)
	switch {
	case errors.Is(err, sqlonce.ErrNotFound):
		return outboxNotFound(id)
	case errors.Is(err, sqlonce.ErrInProgress):
		return exitError{exitRefused, fmt.Sprintf("message %q: a relay is publishing it; add --leased to forget it anyway (it may reach the broker all the same)", id)}
	case err != nil:
		return err
	}
	if asJSON {
		return json.NewEncoder(out).Encode(outboxActionJSON{ID: id, Forgotten: true, Was: inf.State.String()})
	}
	what := ""
	switch inf.State {
	case outbox.Parked:
		what = ": the later messages of its key go on"
	case outbox.Pending:
		what = ": no relay will publish it"
	}
	fmt.Fprintf(out, "forgot %s message %q%s; its id can be enqueued again\n", inf.State, id, what)
	return nil
}

// outboxStatsLine is sqlonce stats' line on the outbox, through
// outbox.Store.Stats; where the driver refuses the outbox (vtgate on a
// sharded keyspace), the line says so and stats still succeeds.
func outboxStatsLine[TTx any](ctx context.Context, b *backend[TTx], out io.Writer) error {
	s, err := outbox.New(b.driver)
	if err != nil {
		return err
	}
	st, err := s.Stats(ctx)
	switch {
	case errors.Is(err, sqlonce.ErrInvalidArgument):
		// The driver refuses the outbox here (vtgate on a sharded
		// keyspace): the keys and tokens above stand.
		fmt.Fprintf(out, "outbox: not counted: %v\n", err)
		return nil
	case err != nil:
		return fmt.Errorf("stats: outbox: %v", err)
	}
	oldest := ""
	if !st.OldestPending.IsZero() {
		oldest = fmt.Sprintf(" (the oldest enqueued %s ago)", roundAge(st.OldestPendingAge))
	}
	fmt.Fprintf(out, "outbox: %d pending%s, %d parked, %d sent\n", st.Pending, oldest, st.Parked, st.Sent)
	if st.Parked > 0 {
		fmt.Fprintln(out, "parked messages hold back their keys; 'sqlonce outbox list --state parked' lists them")
	}
	return nil
}
