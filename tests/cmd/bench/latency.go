package main

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlonce/sqlonce/tests/internal/wire"
)

// network puts every server the run talks to behind a proxy on loopback
// that holds each chunk of bytes cfg.Latency before forwarding it, each
// way: a network whose round trip takes twice that. It rewrites cfg's
// addresses to the proxies' and returns a func that stops them.
func network(cfg *Config) (stop func(), err error) {
	var proxies []*wire.Proxy
	stop = func() {
		for _, p := range proxies {
			p.Close()
		}
	}
	start := func(dialect, addr string) (string, error) {
		p, err := wire.Listen(dialect, addr, cfg.Latency)
		if err != nil {
			return "", err
		}
		proxies = append(proxies, p)
		return p.Addr(), nil
	}
	fail := func(err error) (func(), error) {
		stop()
		return nil, err
	}
	if cfg.PostgresDSN != "" {
		u, err := url.Parse(cfg.PostgresDSN)
		if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" || strings.Contains(u.Host, ",") {
			return fail(fmt.Errorf("-latency needs a PostgreSQL DSN in URL form with one host: %q", cfg.PostgresDSN))
		}
		host := u.Host
		if u.Port() == "" {
			host += ":5432"
		}
		if u.Host, err = start("postgres", host); err != nil {
			return fail(err)
		}
		cfg.PostgresDSN = u.String()
	}
	if cfg.MySQLDSN != "" {
		m, err := mysql.ParseDSN(cfg.MySQLDSN)
		if err != nil || m.Net != "tcp" {
			return fail(fmt.Errorf("-latency needs a MySQL DSN over tcp: %q", cfg.MySQLDSN))
		}
		if m.Addr, err = start("mysql", m.Addr); err != nil {
			return fail(err)
		}
		cfg.MySQLDSN = m.FormatDSN()
	}
	if cfg.RedisAddr != "" {
		if cfg.RedisAddr, err = start("", cfg.RedisAddr); err != nil {
			return fail(err)
		}
	}
	return stop, nil
}

func latencyLine(d time.Duration) string {
	return fmt.Sprintf("network:  every server behind a proxy on loopback adding %v each way (a %v round trip)", d, 2*d)
}
