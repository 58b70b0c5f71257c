package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/httpidem"
	"github.com/sqlonce/sqlonce/inbox"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/internal/idem"
	"github.com/sqlonce/sqlonce/internal/storecfg"
)

// keyKind is a kind of key the keys commands reach: the package that
// keeps it, in its namespace of sqlonce_keys, and how --scope names it.
type keyKind struct {
	name string
	ns   driver.Namespace
	// prefix is the kind byte idem.Scope puts before a principal (0 for
	// the kinds whose --scope is the stored scope itself).
	prefix byte
	// help says what the kind is and what --scope names.
	help string
}

// keyKinds are the kinds of key, in the order the commands list them.
var keyKinds = []keyKind{
	{"dedupe", driver.NamespaceDedupe, 0, "a dedupe.Store's keys (Do, Run, Claim); --scope is the Request's Scope"},
	{"steps", driver.NamespaceSteps, 0, "operations of several steps (dedupe.Store.RunSteps); --scope is the Request's Scope"},
	{"inbox", driver.NamespaceInbox, 0, "inbox message ids; --scope is the consumer name given to inbox.New"},
	{"http", driver.NamespaceHTTP, 'k', "httpidem Idempotency-Keys; --scope is the principal (what the principal func returned)"},
	{"http-steps", driver.NamespaceHTTPSteps, 'k', "httpidem requests run as steps (Middleware.Steps); --scope is the principal"},
	{"http-norepeat", driver.NamespaceHTTP, 's', "httpidem keys derived by WithNoRepeatSubmit (the fingerprint in hex); --scope is the principal"},
	{"grpc", driver.NamespaceHTTP, 'g', "grpcidem idempotency-keys; --scope is the principal"},
}

// kindNames lists the kinds for messages: "dedupe, steps, ...".
func kindNames() string {
	var s []string
	for _, k := range keyKinds {
		s = append(s, k.name)
	}
	return strings.Join(s, ", ")
}

// findKind returns the kind named name.
func findKind(name string) (keyKind, bool) {
	for _, k := range keyKinds {
		if k.name == name {
			return k, true
		}
	}
	return keyKind{}, false
}

// stored is the scope sqlonce_keys holds for --scope scope.
func (k keyKind) stored(scope string) string {
	if k.prefix == 0 {
		return scope
	}
	return idem.Scope(k.prefix, scope)
}

// kindOf names the kind of a row of sqlonce_keys and its scope as --scope
// names it; ok is false for rows no keys command reaches (the leases that
// elect a purger or a resumer).
func kindOf(ns int64, scope string) (kind, userScope string, ok bool) {
	for _, k := range keyKinds {
		if int64(k.ns) != ns {
			continue
		}
		if k.prefix == 0 {
			return k.name, scope, true
		}
		if p, ok := strings.CutPrefix(scope, string(k.prefix)+":"); ok {
			return k.name, p, true
		}
		if strings.HasPrefix(scope, string(k.prefix)+"#") {
			// The hash of a principal no scope can hold as it is.
			return k.name, scope, true
		}
	}
	if driver.Namespace(ns) == driver.NamespaceElection {
		return "election", scope, false
	}
	return fmt.Sprintf("namespace %d", ns), scope, false
}

// keyOps reads and forgets the keys of a kind, through the API of the
// package that keeps them.
type keyOps struct {
	inspect func(ctx context.Context, scope, key string) (dedupe.StepsInfo, error)
	forget  func(ctx context.Context, scope, key string, leased bool) error
	// redrive re-drives a given-up operation; nil for kinds without.
	redrive func(ctx context.Context, scope, key string) error
}

func forgetOpts(leased bool) []dedupe.ForgetOption {
	if leased {
		return []dedupe.ForgetOption{dedupe.ForgetLeased()}
	}
	return nil
}

// opsOf returns the operations on keys of kind k on drv.
func opsOf[TTx any](drv sqlonce.Driver[TTx], k keyKind) (keyOps, error) {
	keyInfo := func(info dedupe.KeyInfo, err error) (dedupe.StepsInfo, error) {
		return dedupe.StepsInfo{KeyInfo: info}, err
	}
	switch k.name {
	case "dedupe", "steps":
		s, err := dedupe.New(drv)
		if err != nil {
			return keyOps{}, err
		}
		if k.name == "steps" {
			return keyOps{
				inspect: s.InspectSteps,
				forget: func(ctx context.Context, scope, key string, leased bool) error {
					return s.ForgetSteps(ctx, scope, key, forgetOpts(leased)...)
				},
				redrive: s.Redrive,
			}, nil
		}
		return keyOps{
			inspect: func(ctx context.Context, scope, key string) (dedupe.StepsInfo, error) {
				return keyInfo(s.Inspect(ctx, scope, key))
			},
			forget: func(ctx context.Context, scope, key string, leased bool) error {
				return s.Forget(ctx, scope, key, forgetOpts(leased)...)
			},
		}, nil
	case "inbox":
		// An Inbox is its consumer's: one per call.
		in := func(consumer string) (*inbox.Inbox[TTx], error) { return inbox.New(drv, consumer) }
		return keyOps{
			inspect: func(ctx context.Context, scope, key string) (dedupe.StepsInfo, error) {
				i, err := in(scope)
				if err != nil {
					return dedupe.StepsInfo{}, err
				}
				return keyInfo(i.Inspect(ctx, key))
			},
			forget: func(ctx context.Context, scope, key string, _ bool) error {
				i, err := in(scope)
				if err != nil {
					return err
				}
				return i.Forget(ctx, key)
			},
		}, nil
	case "http", "http-steps":
		// The principal func serves no request here.
		m, err := httpidem.New(drv, func(*http.Request) string { return "" })
		if err != nil {
			return keyOps{}, err
		}
		if k.name == "http-steps" {
			return keyOps{
				inspect: m.InspectSteps,
				forget: func(ctx context.Context, scope, key string, leased bool) error {
					return m.ForgetSteps(ctx, scope, key, forgetOpts(leased)...)
				},
			}, nil
		}
		return keyOps{
			inspect: func(ctx context.Context, scope, key string) (dedupe.StepsInfo, error) {
				return keyInfo(m.Inspect(ctx, scope, key))
			},
			forget: func(ctx context.Context, scope, key string, leased bool) error {
				return m.Forget(ctx, scope, key, forgetOpts(leased)...)
			},
		}, nil
	}
	// httpidem's derived keys and grpcidem's (a module of its own, which
	// this one does not import): a Store on their namespace, with their
	// scopes.
	s, err := dedupe.New(drv, func(o *storecfg.Options) error {
		o.Namespace = k.ns
		return nil
	})
	if err != nil {
		return keyOps{}, err
	}
	return keyOps{
		inspect: func(ctx context.Context, scope, key string) (dedupe.StepsInfo, error) {
			info, err := s.Inspect(ctx, k.stored(scope), key)
			info.Scope = scope
			return dedupe.StepsInfo{KeyInfo: info}, err
		},
		forget: func(ctx context.Context, scope, key string, leased bool) error {
			return s.Forget(ctx, k.stored(scope), key, forgetOpts(leased)...)
		},
	}, nil
}

// isNotFound tells a key that does not exist.
func isNotFound(err error) bool { return errors.Is(err, sqlonce.ErrNotFound) }

// steps tells the kinds of operations of several steps.
func (k keyKind) steps() bool {
	return k.ns == driver.NamespaceSteps || k.ns == driver.NamespaceHTTPSteps
}
