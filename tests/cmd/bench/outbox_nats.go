package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sqlonce/sqlonce/tests/internal/ports"
)

// startNATS starts nats-server with JetStream (file storage in a temp
// dir) on a free loopback port below the ephemeral range, as a child
// process, and returns its URL once JetStream answers; stop kills it by
// pid and removes the dir.
func startNATS(ctx context.Context) (url string, stop func(), err error) {
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		bin = "/usr/sbin/nats-server"
		if _, serr := os.Stat(bin); serr != nil {
			return "", nil, fmt.Errorf("nats-server is missing (apt-get install nats-server), or pass -outbox-nats URL: %w", err)
		}
	}
	port, err := ports.One()
	if err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp("", "sqlonce-bench-nats-")
	if err != nil {
		return "", nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "nats-server.log"))
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	cmd := exec.Command(bin, "-js", "-sd", filepath.Join(dir, "js"), "-a", "127.0.0.1", "-p", strconv.Itoa(port))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a ^C to the bench does not reach it
	if err := cmd.Start(); err != nil {
		logf.Close()
		os.RemoveAll(dir)
		return "", nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		logf.Close()
		os.RemoveAll(dir)
	}
	url = fmt.Sprintf("nats://127.0.0.1:%d", port)
	deadline := time.Now().Add(time.Minute)
	for {
		err = func() error {
			nc, err := nats.Connect(url, nats.Timeout(time.Second), nats.MaxReconnects(0))
			if err != nil {
				return err
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				return err
			}
			actx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			_, err = js.AccountInfo(actx)
			return err
		}()
		if err == nil {
			return url, stop, nil
		}
		select {
		case <-exited:
			stop()
			return "", nil, fmt.Errorf("nats-server exited at start: %w", err)
		case <-ctx.Done():
			stop()
			return "", nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("nats-server on %d did not answer in a minute: %w", port, err)
		}
	}
}

// ackLog records, per message id, when the broker first acknowledged its
// publish (the publisher's confirm), and how many publishes of an id
// already acknowledged were made again.
type ackLog struct {
	mu      sync.Mutex
	first   map[string]time.Time
	again   int
	pending map[string]struct{}
	done    chan struct{}
}

func newAckLog() *ackLog { return &ackLog{first: map[string]time.Time{}} }

func (a *ackLog) ack(id string) {
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.first[id]; ok {
		a.again++
		return
	}
	a.first[id] = now
	if a.pending != nil {
		delete(a.pending, id)
		if len(a.pending) == 0 {
			close(a.done)
			a.pending, a.done = nil, nil
		}
	}
}

// wait returns once every id is acknowledged, or fails when ctx ends.
func (a *ackLog) wait(ctx context.Context, ids []string) error {
	a.mu.Lock()
	pending := map[string]struct{}{}
	for _, id := range ids {
		if _, ok := a.first[id]; !ok {
			pending[id] = struct{}{}
		}
	}
	if len(pending) == 0 {
		a.mu.Unlock()
		return nil
	}
	done := make(chan struct{})
	a.pending, a.done = pending, done
	a.mu.Unlock()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		a.mu.Lock()
		n := len(a.pending)
		a.pending, a.done = nil, nil
		a.mu.Unlock()
		return fmt.Errorf("%d of %d messages not acknowledged by the broker: %w", n, len(ids), ctx.Err())
	}
}

func (a *ackLog) at(id string) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.first[id]
	return t, ok
}

// count is how many ids were acknowledged.
func (a *ackLog) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.first)
}

func (a *ackLog) repeats() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.again
}

// streamIDs reads every message the stream holds on subject and returns
// how many times each Nats-Msg-Id is there: what reached the broker.
func streamIDs(ctx context.Context, s jetstream.Stream, subject string) (map[string]int, error) {
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return nil, err
	}
	want := int(info.State.Subjects[subject])
	got := map[string]int{}
	if want == 0 {
		return got, nil
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		return nil, err
	}
	for n := 0; n < want; {
		batch, err := c.Fetch(min(want-n, 500), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, err
		}
		k := 0
		for m := range batch.Messages() {
			got[m.Headers().Get(jetstream.MsgIDHeader)]++
			k++
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, err
		}
		if k == 0 {
			return got, fmt.Errorf("stream %s: read %d of %d messages", subject, n, want)
		}
		n += k
	}
	return got, nil
}
