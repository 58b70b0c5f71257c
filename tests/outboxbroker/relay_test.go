package outboxbroker_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce/outbox"
	"github.com/sqlonce/sqlonce/tests/internal/brokers"
)

const (
	relayMessages   = 400
	relayPublishers = 4
	downProbe       = "while-down" // the id published while the broker is down
)

// relayThroughCrash publishes relayMessages messages (c-0 ...) with
// publish from relayPublishers goroutines, each message again until
// publish returns nil, and kills s once a quarter are acknowledged. While
// s is down it checks that a publish fails, then starts s again. It
// returns the publishes that failed while s was down (at least one, or t
// fails) and in all.
func relayThroughCrash(t *testing.T, s *brokers.Server, publish func(context.Context, outbox.Message) error) (down, failed int64) {
	t.Helper()
	var acked, errs atomic.Int64
	killed := make(chan struct{})
	restarted := make(chan struct{})
	var wg sync.WaitGroup
	deadline := time.Now().Add(3 * time.Minute)
	for w := range relayPublishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < relayMessages; i += relayPublishers {
				m := outbox.Message{ID: fmt.Sprintf("c-%d", i), Topic: fmt.Sprintf("k%d", i%5), Key: fmt.Sprintf("k%d", i%5), Payload: []byte(fmt.Sprint(i))}
				for {
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					err := publish(ctx, m)
					cancel()
					if err == nil {
						if acked.Add(1) == relayMessages/4 {
							close(killed)
						}
						break
					}
					errs.Add(1)
					if time.Now().After(deadline) {
						t.Errorf("publisher %d: %s not acknowledged by the deadline: %v", w, m.ID, err)
						return
					}
					time.Sleep(50 * time.Millisecond) // the relay's backoff
				}
				// The last quarter waits for the broker to be back, so that
				// the crash is mid-stream whatever the timing.
				if i >= relayMessages*3/4 {
					<-restarted
				}
			}
		}()
	}
	<-killed
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	if err := publish(ctx, outbox.Message{ID: downProbe, Topic: "down", Payload: []byte("x")}); err == nil {
		t.Errorf("publish while %s is down: nil error", s.Name)
	} else {
		t.Logf("publish while %s is down: %v", s.Name, err)
		down = 1
	}
	cancel()
	// A moment down, for the publishers' retries to fail too.
	time.Sleep(time.Second)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	close(restarted)
	wg.Wait()
	if n := acked.Load(); n != relayMessages {
		t.Fatalf("%d of %d messages acknowledged", n, relayMessages)
	}
	return down, errs.Load()
}
