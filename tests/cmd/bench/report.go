package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// WriteTable writes the report for people.
func WriteTable(w io.Writer, rep *Report) error {
	m := rep.Machine
	s := rep.Settings
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("sqlonce benchmark, %s (%.0f s)", rep.Started.Format("2006-01-02 15:04 MST"), rep.Seconds)
	if rep.Command != "" {
		p("command:  %s", rep.Command)
	}
	p("machine:  %s, %d CPUs (GOMAXPROCS %d), %.1f GiB, %s, kernel %s, %s", m.CPU, m.CPUs, m.GOMAXPROCS, m.MemoryGiB, m.OS, m.Kernel, m.Go)
	p("load:     %s at start, %s at end (1/5/15 min)", m.LoadBefore, m.LoadAfter)
	p("workload: %d clients for every technique; %d rounds of %v each, techniques shuffled per round, after a %v warm-up; medians over rounds",
		s.Clients, s.Rounds, msDur(s.DurationMs), msDur(s.WarmupMs))
	if s.FaultRequests > 0 {
		p("faults:   %d requests per technique; request i: i%%4=0 crash before commit, 1 duplicate mid-flight (%v), 2 both, 3 clean; clients retry for up to %.0f s; lease %v, Redis TTL %.0f s",
			s.FaultRequests, msDur(s.WindowMs), s.RetryBudgetS, msDur(s.LeaseMs), s.MarkerTTLSec)
	}
	if s.LatencyMs > 0 {
		p("%s", latencyLine(time.Duration(s.LatencyMs*float64(time.Millisecond))))
	}
	if rep.Redis != nil {
		p("redis:    %s %s (%s)", rep.Redis.Name, rep.Redis.Version, settings(rep.Redis.Settings))
	}
	for _, db := range rep.Databases {
		p("")
		p("%s %s (%s)", db.Server.Name, db.Server.Version, settings(db.Server.Settings))
		if c := db.CPU; c != (CPUUse{}) {
			p("CPU time during the timed rounds, of all %d CPUs: benchmark clients %.0f%%, database and Redis servers %.0f%%, interrupts %.0f%%, other processes %.0f%%, stolen by the hypervisor %.0f%%",
				m.CPUs, 100*c.Bench, 100*c.Servers, 100*c.Interrupts, 100*c.Other, 100*c.Steal)
		}
		width := len("technique")
		for _, r := range db.Results {
			width = max(width, len(r.Name))
		}
		row := func(name, tps, p50, p99, x, xr, xs, reqs, crashes, dups, lost, doubled string) {
			p("%-*s %6s %6s %6s %6s %-11s %6s | %6s %7s %4s %4s %7s", width, name, tps, p50, p99, x, xr, xs, reqs, crashes, dups, lost, doubled)
		}
		row("technique", "tx/s", "p50 ms", "p99 ms", "x base", "(rounds)", "x same", "faults", "crashes", "dups", "lost", "doubled")
		for _, r := range db.Results {
			cells := []string{"-", "-", "-", "-", "-"}
			if f := r.Fault; f != nil {
				lost := strconv.Itoa(f.Lost)
				if f.GaveUp > 0 {
					lost += fmt.Sprintf("(%d gave up)", f.GaveUp)
				}
				cells = []string{strconv.Itoa(f.Requests), strconv.Itoa(f.Crashes), strconv.Itoa(f.Duplicates), lost, strconv.Itoa(f.Doubled)}
			}
			row(r.Name, fmt.Sprintf("%.0f", r.TPS), fmt.Sprintf("%.2f", r.P50Ms), fmt.Sprintf("%.2f", r.P99Ms),
				fmt.Sprintf("%.2f", r.TimeRatio), fmt.Sprintf("(%.2f-%.2f)", r.TimeRatioMin, r.TimeRatioMax), fmt.Sprintf("%.2f", r.SameWriteRatio),
				cells[0], cells[1], cells[2], cells[3], cells[4])
		}
		writeWork(p, width, db)
	}
	p("")
	p("x base: time per request relative to the bare INSERT (baseline) in the same round (1.25 = 25%% more); median over")
	p("        rounds, then the lowest and highest round.")
	p("x same: the same against the unprotected transaction doing the same business write (bare INSERT order for")
	p("        the unique techniques, bare UPDATE order for optimistic and statemachine, the baseline for the others).")
	p("faults: requests sent under fault injection; crashes: server died after the check and the write, before the commit;")
	p("        dups: a duplicate sent while the first was in flight. Counted from the database after the clients' retries:")
	p("        lost: the write is not there; doubled: it is there more than once.")
	p("work:   the server's writes per request, medians over rounds. PostgreSQL: read back from the WAL (pg_walinspect),")
	p("        the run's own relations and transactions only; rows = heap inserts, updates, deletes; HOT = updates that")
	p("        wrote no index entry; locks = rows locked, not written; index = B-tree leaf inserts and BRIN changes.")
	p("        MariaDB: rows changed and rows x indexes (userstat, the run's database only); redo bytes are the whole")
	p("        server's (Innodb_lsn_current), other sessions included.")
	return nil
}

// writeWork writes the server's work per request, when the server told it.
func writeWork(p func(string, ...any), width int, db DBReport) {
	if !slices.ContainsFunc(db.Results, func(r Result) bool { return r.Work != nil }) {
		return
	}
	var base *Work
	for _, r := range db.Results {
		if r.ID == "baseline" {
			base = r.Work
		}
	}
	logName := "WAL B"
	if db.Database == "mysql" {
		logName = "redo B"
	}
	p("")
	p("%-*s %8s %6s %7s %6s %5s %6s %6s %7s", width, "server work per request", logName, "x base", "FPI B", "rows", "HOT", "locks", "index", "commits")
	for _, r := range db.Results {
		w := r.Work
		if w == nil {
			continue
		}
		x := "-"
		if base != nil && base.LogBytes > 0 {
			x = fmt.Sprintf("%.2f", w.LogBytes/base.LogBytes)
		}
		p("%-*s %8.0f %6s %7.0f %6.2f %5.2f %6.2f %6.2f %7.2f", width, r.Name, w.LogBytes, x, w.FPIBytes, w.Rows, w.HOT, w.Locks, w.IndexEntries, w.Commits)
	}
}

func msDur(ms float64) string {
	if ms >= 1000 {
		return strconv.FormatFloat(ms/1000, 'f', -1, 64) + "s"
	}
	return strconv.FormatFloat(ms, 'f', -1, 64) + "ms"
}

func settings(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		if v == "" {
			v = `""`
		}
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, " ")
}

// WriteJSON writes the whole report.
func WriteJSON(w io.Writer, rep *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteCSV writes one row per database and technique, for plotting.
func WriteCSV(w io.Writer, rep *Report) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"database", "server_version", "technique", "name", "kind", "clients", "rounds",
		"tps", "p50_ms", "p99_ms", "mean_ms", "x_baseline", "x_baseline_min", "x_baseline_max", "throughput_vs_baseline", "same_write_as", "x_same_write", "ops", "retries",
		"fault_requests", "crashes", "duplicates", "lost", "doubled", "gave_up",
		"log_bytes", "fpi_bytes", "rows", "hot", "locks", "index_entries", "commits"})
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', 3, 64) }
	for _, db := range rep.Databases {
		for _, r := range db.Results {
			row := []string{db.Database, db.Server.Version, r.ID, r.Name, r.Kind,
				strconv.Itoa(rep.Settings.Clients), strconv.Itoa(rep.Settings.Rounds),
				f(r.TPS), f(r.P50Ms), f(r.P99Ms), f(r.MeanMs), f(r.TimeRatio), f(r.TimeRatioMin), f(r.TimeRatioMax), f(r.ThroughputRatio), r.SameWriteAs, f(r.SameWriteRatio),
				strconv.FormatInt(r.Ops, 10), strconv.FormatInt(r.Retries, 10)}
			if fr := r.Fault; fr != nil {
				for _, n := range []int{fr.Requests, fr.Crashes, fr.Duplicates, fr.Lost, fr.Doubled, fr.GaveUp} {
					row = append(row, strconv.Itoa(n))
				}
			} else {
				row = append(row, "", "", "", "", "", "")
			}
			if w := r.Work; w != nil {
				for _, x := range []float64{w.LogBytes, w.FPIBytes, w.Rows, w.HOT, w.Locks, w.IndexEntries, w.Commits} {
					row = append(row, f(x))
				}
			} else {
				row = append(row, "", "", "", "", "", "", "")
			}
			_ = cw.Write(row)
		}
	}
	cw.Flush()
	return cw.Error()
}
