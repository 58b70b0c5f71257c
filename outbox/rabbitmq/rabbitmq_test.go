package rabbitmq_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/outbox"
	"github.com/sqlonce/sqlonce/outbox/rabbitmq"
)

// The checks that need no broker (New connects at the first Publish);
// tests/outboxbroker runs the Publisher against a real RabbitMQ node.

func TestNew(t *testing.T) {
	const url = "amqp://guest:guest@127.0.0.1:5672/"
	for name, c := range map[string]struct {
		url string
		opt rabbitmq.Option
		ok  bool
	}{
		"defaults":            {url, rabbitmq.WithExchange(""), true},
		"exchange":            {url, rabbitmq.WithExchange("orders"), true},
		"amqps":               {"amqps://u:p@broker.example:5671/vhost", rabbitmq.WithMaxChannels(1), true},
		"http url":            {"http://127.0.0.1/", rabbitmq.WithExchange(""), false},
		"nil option":          {url, nil, false},
		"exchange too long":   {url, rabbitmq.WithExchange(strings.Repeat("x", 256)), false},
		"key header empty":    {url, rabbitmq.WithKeyHeader(""), false},
		"key header too long": {url, rabbitmq.WithKeyHeader(strings.Repeat("h", 256)), false},
		"max channels 0":      {url, rabbitmq.WithMaxChannels(0), false},
		"max channels 2048":   {url, rabbitmq.WithMaxChannels(2048), false},
		"timeout 0":           {url, rabbitmq.WithTimeout(0), false},
		"config":              {url, rabbitmq.WithConfig(amqp.Config{Vhost: "/"}), true},
		"config with recover": {url, rabbitmq.WithConfig(amqp.Config{Recovery: &amqp.Recovery{}}), false},
	} {
		p, err := rabbitmq.New(c.url, c.opt)
		if (err == nil) != c.ok || err != nil && !errors.Is(err, sqlonce.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ok=%v", name, err, c.ok)
		}
		if p != nil {
			if err := p.Close(); err != nil {
				t.Errorf("%s: Close: %v", name, err)
			}
		}
	}
}

func TestPublishRefusesBeforeConnecting(t *testing.T) {
	// Port 1 on loopback: nothing answers, and nothing is dialed for
	// these.
	p, err := rabbitmq.New("amqp://guest:guest@127.0.0.1:1/")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for name, m := range map[string]outbox.Message{
		"no id":             {Topic: "q"},
		"routing key > 255": {ID: "x", Topic: strings.Repeat("k", 256)},
	} {
		if err := p.Publish(ctx, m); !errors.Is(err, sqlonce.ErrInvalidArgument) {
			t.Errorf("Publish %s: %v", name, err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Publish(ctx, outbox.Message{ID: "x", Topic: "q"}); !errors.Is(err, rabbitmq.ErrClosed) {
		t.Errorf("Publish after Close: %v, want ErrClosed", err)
	}
}
