package main

import (
	"bufio"
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Machine describes where the numbers were taken.
type Machine struct {
	CPU        string  `json:"cpu"`
	CPUs       int     `json:"cpus"`
	GOMAXPROCS int     `json:"gomaxprocs"`
	MemoryGiB  float64 `json:"memory_gib"`
	OS         string  `json:"os"`
	Kernel     string  `json:"kernel"`
	Go         string  `json:"go"`
	// LoadBefore and LoadAfter are /proc/loadavg at the start and the end:
	// other work on the machine skews the numbers.
	LoadBefore string `json:"load_before"`
	LoadAfter  string `json:"load_after"`
}

func describeMachine() Machine {
	m := Machine{
		CPUs:       runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		OS:         runtime.GOOS + "/" + runtime.GOARCH,
		Go:         runtime.Version(),
		LoadBefore: loadAvg(),
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseFloat(f[1], 64); err == nil {
					m.MemoryGiB = float64(int(kb/1024/1024*10+0.5)) / 10
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/etc/debian_version"); err == nil {
		m.OS += ", Debian " + strings.TrimSpace(string(b))
	}
	return m
}

// loadAvg is the 1, 5 and 15 minute load averages.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func describeRedis(ctx context.Context, rdb *redis.Client) Server {
	s := Server{Name: "Redis", Settings: map[string]string{}}
	if info, err := rdb.Info(ctx, "server").Result(); err == nil {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				s.Version = v
			}
		}
	}
	for _, name := range []string{"appendonly", "appendfsync", "save"} {
		if kv, err := rdb.ConfigGet(ctx, name).Result(); err == nil {
			if v, ok := kv[name]; ok {
				s.Settings[name] = v
			}
		}
	}
	return s
}

// cleanRedis deletes the run's markers and tokens; they would expire on
// their own.
func cleanRedis(rdb *redis.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	it := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var batch []string
	for it.Next(ctx) {
		batch = append(batch, it.Val())
		if len(batch) == 1000 {
			rdb.Del(ctx, batch...)
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		rdb.Del(ctx, batch...)
	}
}

// cpuSample is cumulative CPU time, in clock ticks: the whole machine's,
// this process's, and the database and Redis servers' (every process named
// postgres, mariadbd, mysqld or redis-server).
type cpuSample struct {
	busy, total, self, servers uint64
	irq, steal                 uint64
	ok                         bool
}

// CPUUse splits the machine's CPU time over an interval: the benchmark's
// own process, the servers it drives, and everything else. Shares are of
// all CPUs together (1 = every CPU busy the whole time). The servers'
// share includes any work other clients give them.
type CPUUse struct {
	Bench   float64 `json:"bench"`
	Servers float64 `json:"servers"`
	Other   float64 `json:"other"`
	// Interrupts is the kernel's interrupt handling (network included);
	// Steal the time the hypervisor gave to other virtual machines.
	Interrupts float64 `json:"interrupts"`
	Steal      float64 `json:"steal"`
}

func sampleCPU() cpuSample {
	var s cpuSample
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return s
	}
	for i, v := range f[1:9] { // user nice system idle iowait irq softirq steal
		n, _ := strconv.ParseUint(v, 10, 64)
		s.total += n
		switch i {
		case 3, 4: // idle, iowait
		case 5, 6:
			s.irq += n
		case 7:
			s.steal += n
		default:
			s.busy += n
		}
	}
	s.self, _ = procCPU("/proc/self/stat")
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		if n, comm := procCPU("/proc/" + e.Name() + "/stat"); comm == "postgres" || comm == "mariadbd" || comm == "mysqld" || comm == "redis-server" {
			s.servers += n
		}
	}
	s.ok = true
	return s
}

// procCPU returns a process's user+system time and its command name.
func procCPU(path string) (uint64, string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, ""
	}
	open, close := strings.IndexByte(string(b), '('), strings.LastIndexByte(string(b), ')')
	if open < 0 || close < open {
		return 0, ""
	}
	f := strings.Fields(string(b[close+1:]))
	if len(f) < 13 { // state is f[0]; utime and stime are fields 14 and 15 of the line
		return 0, ""
	}
	u, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	return u + st, string(b[open+1 : close])
}

func cpuUse(a, b cpuSample) CPUUse {
	if !a.ok || !b.ok || b.total <= a.total {
		return CPUUse{}
	}
	total := float64(b.total - a.total)
	share := func(x, y uint64) float64 {
		if y < x {
			return 0
		}
		return float64(y-x) / total
	}
	u := CPUUse{Bench: share(a.self, b.self), Servers: share(a.servers, b.servers),
		Interrupts: share(a.irq, b.irq), Steal: share(a.steal, b.steal)}
	u.Other = max(0, share(a.busy, b.busy)-u.Bench-u.Servers)
	return u
}
