package roundtrips

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// docRow names, for each path of documented, its row in the round-trip
// table of docs/benchmarks.md (backticks dropped).
var docRow = map[string]string{
	"bare tx: INSERT (reference)":                           "bare transaction: INSERT or UPDATE",
	"bare tx: UPDATE (reference)":                           "bare transaction: INSERT or UPDATE",
	"dedupe.Do first run":                                   "dedupe.Do, first run",
	"dedupe.Do replay":                                      "dedupe.Do, replay",
	"dedupe.DoResponse first run":                           "dedupe.DoResponse, first run",
	"dedupe.DoResponse replay":                              "dedupe.DoResponse, replay",
	"dedupe.Run first run":                                  "dedupe.Run, first run",
	"dedupe.Run replay":                                     "dedupe.Run, replay",
	"dedupe.Run takeover of a lapsed lease":                 "dedupe.Run, takeover of a lapsed lease",
	"dedupe.Run first run, FavorFirstRuns":                  "dedupe.Run, first run, FavorFirstRuns",
	"dedupe.Run replay, FavorFirstRuns":                     "dedupe.Run, replay, FavorFirstRuns",
	"dedupe.Run takeover of a lapsed lease, FavorFirstRuns": "dedupe.Run, takeover, FavorFirstRuns",
	"dedupe.Run first run, FavorRepeats":                    "dedupe.Run, first run, FavorRepeats",
	"dedupe.Run replay, FavorRepeats":                       "dedupe.Run, replay, FavorRepeats",
	"dedupe.Run first run, WithNoWait":                      "dedupe.Run, first run, WithNoWait",
	"dedupe.Do first run, WithNoWait":                       "dedupe.Do, first run, WithNoWait",
	"lease Claim":                                           "lease Claim",
	"lease Complete":                                        "lease Complete",
	"lease Release":                                         "lease Release",
	"dedupe.RunSteps first run, two steps":                  "dedupe.RunSteps, first run: a database and an outside step",
	"dedupe.RunSteps first run, one database step":          "dedupe.RunSteps, first run: one database step",
	"dedupe.RunSteps replay":                                "dedupe.RunSteps, replay",
	"unique.Insert first run":                               "unique.Insert, first run",
	"unique.Insert duplicate":                               "unique.Insert, duplicate",
	"unique.InsertOrGet duplicate":                          "unique.InsertOrGet, duplicate",
	"unique.Insert, 10 first runs in one tx":                "unique.Insert, 10 first runs in one transaction",
	"unique.InsertOne first run":                            "unique.InsertOne, first run",
	"unique.InsertOne duplicate":                            "unique.InsertOne, duplicate",
	"unique.InsertOneOrGet duplicate":                       "unique.InsertOneOrGet, duplicate",
	"unique.Inserted first run":                             "unique.Inserted (ON CONFLICT (code) DO NOTHING), first run",
	"unique.Inserted duplicate":                             "unique.Inserted, duplicate",
	"unique.Inserted duplicate + read":                      "unique.Inserted, duplicate, then the row read",
	"optimistic.Update first run":                           "optimistic.Update, first run",
	"optimistic.Update repeat":                              "optimistic.Update, repeat",
	"statemachine.Transition first run":                     "statemachine.Transition, first run",
	"statemachine.Transition repeat":                        "statemachine.Transition, repeat",
	"token.Issue":                                           "token.Issue",
	"token.Consume first run":                               "token.Consume, first run",
	"token.Consume repeat":                                  "token.Consume, repeat",
	"inbox.Handle first run":                                "inbox.Handle, first run",
	"inbox.Handle replay":                                   "inbox.Handle, replay",
	"inbox.HandleBatch of 100 ids, first run":               "inbox.HandleBatch of 100 ids, first run (fn: one bulk statement)",
	"inbox.HandleBatch of 100 ids, replay":                  "inbox.HandleBatch of 100 ids, replay",
	"httpidem first run":                                    "httpidem, first run",
	"httpidem replay":                                       "httpidem, replay",
}

// TestDocsTable holds docs/benchmarks.md's round-trip table to the counts
// TestRoundTrips holds the code to: every path has its row, every row a
// path, and the figures are the same.
func TestDocsTable(t *testing.T) {
	page, err := os.ReadFile("../../docs/benchmarks.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := docsTable(t, string(page))
	used := map[string]bool{}
	for path, c := range documented {
		name, ok := docRow[path]
		if !ok {
			t.Errorf("%q: no row of docs/benchmarks.md named in docRow", path)
			continue
		}
		cells, ok := rows[name]
		if !ok {
			t.Errorf("%q: docs/benchmarks.md has no row %q", path, name)
			continue
		}
		used[name] = true
		rt, st := figures(t, name, cells[1], 3), figures(t, name, cells[2], 4)
		if want := []int{c.pgRT, c.pgsqlRT, c.myRT}; !slices.Equal(rt, want) {
			t.Errorf("%q: the page says round trips %v, the code %v", name, rt, want)
		}
		if want := []int{c.pgSt, c.pgsqlSt, c.mySt, c.liteSt}; !slices.Equal(st, want) {
			t.Errorf("%q: the page says statements %v, the code %v", name, st, want)
		}
	}
	for name := range rows {
		if !used[name] {
			t.Errorf("docs/benchmarks.md row %q stands for no counted path", name)
		}
	}
	for path := range docRow {
		if _, ok := documented[path]; !ok {
			t.Errorf("docRow names %q, which is not counted", path)
		}
	}
}

// docsTable returns the rows of the table under "## Round trips and
// statements per operation", by their first cell, backticks dropped.
func docsTable(t *testing.T, page string) map[string][]string {
	_, after, ok := strings.Cut(page, "\n## Round trips and statements per operation\n")
	if !ok {
		t.Fatal("docs/benchmarks.md: no section \"Round trips and statements per operation\"")
	}
	rows := map[string][]string{}
	inTable := false
	for _, line := range strings.Split(after, "\n") {
		if strings.HasPrefix(line, "#") {
			break
		}
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		inTable = true
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		for i := range cells {
			cells[i] = strings.TrimSpace(strings.ReplaceAll(cells[i], "`", ""))
		}
		if len(cells) < 3 || cells[0] == "path" || strings.HasPrefix(cells[0], "---") {
			continue
		}
		rows[cells[0]] = cells
	}
	if len(rows) == 0 {
		t.Fatal("docs/benchmarks.md: the round-trip table is empty")
	}
	return rows
}

// figures parses a cell "a / b / c" of n numbers.
func figures(t *testing.T, row, cell string, n int) []int {
	parts := strings.Split(cell, " / ")
	if len(parts) != n {
		t.Errorf("%q: cell %q has %d figures, want %d", row, cell, len(parts), n)
		return nil
	}
	out := make([]int, n)
	for i, p := range parts {
		v, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			t.Errorf("%q: cell %q: %v", row, cell, err)
			return nil
		}
		out[i] = v
	}
	return out
}
