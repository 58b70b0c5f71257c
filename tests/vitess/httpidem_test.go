package vitess

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sqlonce/sqlonce/grpcidem"
	"github.com/sqlonce/sqlonce/httpidem"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
	"github.com/sqlonce/sqlonce/tests/internal/vitess"
)

// idemModes builds httpidem's three modes on db, each reporting its
// errors to log.
var idemModes = []struct {
	name string
	new  func(t *testing.T, db *sql.DB, log func(*http.Request, error)) *httpidem.Middleware[*sql.Tx]
}{
	{"New", func(t *testing.T, db *sql.DB, log func(*http.Request, error)) *httpidem.Middleware[*sql.Tx] {
		return must(t)(httpidem.New(testdrv.MySQL(t, db), tenantOf, httpidem.WithErrorLog(log)))
	}},
	{"NewLeased", func(t *testing.T, db *sql.DB, log func(*http.Request, error)) *httpidem.Middleware[*sql.Tx] {
		return must(t)(httpidem.NewLeased(testdrv.MySQL(t, db), tenantOf, 0, httpidem.WithErrorLog(log)))
	}},
	{"NewWithTxFunc", func(t *testing.T, db *sql.DB, log func(*http.Request, error)) *httpidem.Middleware[*sql.Tx] {
		run := func(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if err := fn(ctx, tx); err != nil {
				return err
			}
			return tx.Commit()
		}
		return must(t)(httpidem.NewWithTxFunc(testdrv.MySQL(t, db), tenantOf, run, httpidem.WithErrorLog(log)))
	}},
}

func must(t *testing.T) func(*httpidem.Middleware[*sql.Tx], error) *httpidem.Middleware[*sql.Tx] {
	return func(m *httpidem.Middleware[*sql.Tx], err error) *httpidem.Middleware[*sql.Tx] {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
}

func tenantOf(r *http.Request) string { return r.Header.Get("X-Tenant") }

// noteHandler writes a note of the request's tenant, in the request's
// transaction (transactional mode) or on db (lease mode), on the shard
// of the key's scope ("k:" and the tenant).
func noteHandler(db *sql.DB, ran *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran.Add(1)
		body, _ := io.ReadAll(r.Body)
		scope := "k:" + r.Header.Get("X-Tenant")
		key := strings.Trim(r.Header.Get(httpidem.Header), `"`)
		const insert = "INSERT INTO notes (scope, note_id, body) VALUES (?, ?, ?)"
		var err error
		if tx, ok := httpidem.TxFrom[*sql.Tx](r.Context()); ok {
			_, err = tx.ExecContext(r.Context(), insert, scope, key, body)
		} else {
			_, err = db.ExecContext(r.Context(), insert, scope, key, body)
		}
		if err != nil {
			httpidem.Fail(r.Context(), err)
			http.Error(w, "not saved", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
}

type answer struct {
	status     int
	replayed   bool
	retryAfter string
	problem    httpidem.Problem
}

func postNote(url, tenant, key string) (answer, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader("n"))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("X-Tenant", tenant)
	req.Header.Set(httpidem.Header, `"`+key+`"`) // a Structured Field String
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode, replayed: resp.Header.Get(httpidem.ReplayHeader) == "true", retryAfter: resp.Header.Get("Retry-After")}
	body, err := io.ReadAll(resp.Body)
	if err == nil && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
		err = json.Unmarshal(body, &a.problem)
	}
	return a, err
}

// TestIdemRefusedSharded: httpidem, in each of its three modes, and
// grpcidem through a real gRPC server, on the two-shard keyspace, with a
// tenant-scoped handler (the principal is the tenant's id, the handler
// writes a note into notes, sharded by a column holding the text of the
// key's scope, "k:" and the principal, so that the note would live on the
// key's shard). Their Stores claim with a bounded lock wait (WithNoWait),
// which the MySQL driver cannot bound through vtgate on a sharded
// keyspace (its SET runs on the keyspace's first shard). Every keyed
// request, 4 racing on each key of tenants on both shards, is refused
// before its handler runs, nothing commits, and the answer is not one a
// client retries: httpidem's 500 problem says that sending it again will
// not succeed and that the keys need an unsharded keyspace, with no
// Retry-After, and reports the fix to WithErrorLog; grpcidem's is
// FailedPrecondition, not Internal ("retry it with the same idempotency
// key"), its message naming the fix.
func TestIdemRefusedSharded(t *testing.T) {
	_, db := setup(t)
	const tenants, racers = 6, 4
	for mi, mode := range idemModes {
		t.Run(mode.name, func(t *testing.T) {
			var logged sync.Map
			var nLogged atomic.Int64
			m := mode.new(t, db, func(_ *http.Request, err error) {
				nLogged.Add(1)
				logged.Store(err.Error(), true)
			})
			var ran atomic.Int64
			srv := httptest.NewServer(m.Wrap(noteHandler(db, &ran)))
			defer srv.Close()
			base := int64(9_860_000 + 100*mi)
			var mu sync.Mutex
			statuses := map[int]int{}
			var wg sync.WaitGroup
			for ti := range int64(tenants) {
				tenant := strconv.FormatInt(base+ti, 10)
				key := fmt.Sprintf("note-%s-%d", tenant, time.Now().UnixNano())
				for range racers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						a, err := postNote(srv.URL, tenant, key)
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						statuses[a.status]++
						mu.Unlock()
						p := a.problem
						if a.status != http.StatusInternalServerError || p.Code != httpidem.CodeInternal || a.retryAfter != "" ||
							!strings.Contains(p.Detail, "unsharded keyspace") || !strings.Contains(p.Detail, "will not succeed") ||
							strings.Contains(strings.ToLower(p.Detail), "retry") {
							t.Errorf("answered %d (Retry-After %q) %+v; want 500 %s naming an unsharded keyspace, no retry", a.status, a.retryAfter, p, httpidem.CodeInternal)
						}
					}()
				}
			}
			wg.Wait()
			if ran.Load() != 0 {
				t.Errorf("the handler ran %d times", ran.Load())
			}
			logged.Range(func(k, _ any) bool {
				if !strings.Contains(k.(string), "unsharded keyspace") {
					t.Errorf("reported: %s; want the fix named", k)
				}
				return true
			})
			if nLogged.Load() == 0 {
				t.Error("nothing reported to WithErrorLog")
			}
			like := fmt.Sprintf("k:%d%%", base/100)
			nNotes := count(t, db, "SELECT COUNT(*) FROM notes WHERE scope LIKE ?", like)
			nKeys := count(t, db, "SELECT COUNT(*) FROM sqlonce_keys WHERE scope LIKE ?", like)
			if nNotes != 0 || nKeys != 0 {
				t.Errorf("%d notes, %d keys committed; want none", nNotes, nKeys)
			}
			var one string
			logged.Range(func(k, _ any) bool { one = k.(string); return false })
			t.Logf("%d requests: statuses %v; %d notes, %d keys; reported: %s", tenants*racers, statuses, nNotes, nKeys, one)
		})
	}
	t.Run("grpcidem", func(t *testing.T) {
		var ran atomic.Int64
		conn := grpcNotes(t, db, &ran)
		base := int64(9_869_000)
		var wg sync.WaitGroup
		for ti := range int64(tenants) {
			tenant := strconv.FormatInt(base+ti, 10)
			key := fmt.Sprintf("call-%s-%d", tenant, time.Now().UnixNano())
			for range racers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, _, err := callNote(conn, tenant, key)
					if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "unsharded keyspace") ||
						strings.Contains(strings.ToLower(status.Convert(err).Message()), "retry") {
						t.Errorf("call: %v; want FailedPrecondition naming an unsharded keyspace, no retry", err)
					}
				}()
			}
		}
		wg.Wait()
		if ran.Load() != 0 {
			t.Errorf("the handler ran %d times", ran.Load())
		}
		nNotes := count(t, db, "SELECT COUNT(*) FROM notes WHERE scope LIKE 'g:98690%'")
		nKeys := count(t, db, "SELECT COUNT(*) FROM sqlonce_keys WHERE scope LIKE 'g:98690%'")
		if nNotes != 0 || nKeys != 0 {
			t.Errorf("%d notes, %d keys committed; want none", nNotes, nKeys)
		}
	})
}

// grpcNotes serves test.Notes/Add through grpcidem on db, on loopback,
// and returns a client connection to it. The handler writes a note of
// the call's tenant (the principal, from the x-tenant metadata) with the
// key in the call's transaction.
func grpcNotes(t *testing.T, db *sql.DB, ran *atomic.Int64) *grpc.ClientConn {
	t.Helper()
	principal := func(ctx context.Context) string {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("x-tenant"); len(v) == 1 {
			return v[0]
		}
		return ""
	}
	ic, err := grpcidem.New(testdrv.MySQL(t, db), principal)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(ic.Unary()))
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "test.Notes",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Add",
			Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.StringValue)
				if err := dec(in); err != nil {
					return nil, err
				}
				return icpt(ctx, in, &grpc.UnaryServerInfo{FullMethod: "/test.Notes/Add"}, func(ctx context.Context, req any) (any, error) {
					ran.Add(1)
					tx, ok := grpcidem.TxFrom[*sql.Tx](ctx)
					if !ok {
						return nil, status.Error(codes.Internal, "no transaction")
					}
					md, _ := metadata.FromIncomingContext(ctx)
					if _, err := tx.ExecContext(ctx, "INSERT INTO notes (scope, note_id, body) VALUES (?, ?, 'g')",
						"g:"+principal(ctx), md.Get(grpcidem.MetadataKey)[0]); err != nil {
						return nil, err
					}
					return wrapperspb.String("added"), nil
				})
			},
		}},
	}, struct{}{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func callNote(conn *grpc.ClientConn, tenant, key string) (string, bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, grpcidem.MetadataKey, key, "x-tenant", tenant)
	out := new(wrapperspb.StringValue)
	var header metadata.MD
	err := conn.Invoke(ctx, "/test.Notes/Add", wrapperspb.String("x"), out, grpc.Header(&header))
	return out.GetValue(), len(header.Get(grpcidem.ReplayedKey)) > 0, err
}

// TestIdemUnsharded: the same middlewares on an unsharded keyspace (a
// vttestserver of its own, one shard) work through vtgate: 4 racers on a
// key of each mode, then the same request again; the handler ran once
// per key, one note per key, and the last request replays.
func TestIdemUnsharded(t *testing.T) {
	vitess.Shared(t) // skips as the other tests do without a cluster
	c, err := vitess.Start(1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	db := open(t, c.DSN(vitess.Keyspace, single))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := migrations.Up(ctx, db, migrations.MySQL); err != nil {
		t.Fatalf("migrations.Up: %v", err)
	}
	if _, err := db.ExecContext(ctx, notesDDL); err != nil {
		t.Fatal(err)
	}
	if shards := vitessShards(t, db); len(shards) != 1 {
		t.Fatalf("the keyspace's shards: %v; want one", shards)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		var n int
		err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM notes").Scan(&n)
		if err == nil {
			err = db.QueryRowContext(ctx, "SELECT COUNT(namespace) FROM sqlonce_keys").Scan(&n)
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	const racers = 4
	for _, mode := range idemModes {
		t.Run(mode.name, func(t *testing.T) {
			m := mode.new(t, db, func(_ *http.Request, err error) { t.Errorf("reported: %v", err) })
			var ran atomic.Int64
			srv := httptest.NewServer(m.Wrap(noteHandler(db, &ran)))
			defer srv.Close()
			tenant, key := "7", "note-"+mode.name
			var wg sync.WaitGroup
			for range racers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					a, err := postNote(srv.URL, tenant, key)
					if err != nil || (a.status != http.StatusCreated && a.status != http.StatusConflict) {
						t.Errorf("racer: %v %+v; want 201 or 409", err, a)
					}
				}()
			}
			wg.Wait()
			a, err := postNote(srv.URL, tenant, key)
			if err != nil || a.status != http.StatusCreated || !a.replayed {
				t.Errorf("again: %v %+v; want 201 replayed", err, a)
			}
			if n := count(t, db, "SELECT COUNT(*) FROM notes WHERE scope = 'k:7' AND note_id = ?", key); n != 1 || ran.Load() != 1 {
				t.Errorf("%d notes, the handler ran %d times; want 1 each", n, ran.Load())
			}
		})
	}
	t.Run("grpcidem", func(t *testing.T) {
		var ran atomic.Int64
		conn := grpcNotes(t, db, &ran)
		out, replayed, err := callNote(conn, "7", "call-1")
		if err != nil || out != "added" || replayed {
			t.Fatalf("first call: %q %v %v", out, replayed, err)
		}
		out, replayed, err = callNote(conn, "7", "call-1")
		if err != nil || out != "added" || !replayed {
			t.Errorf("again: %q %v %v; want the replay", out, replayed, err)
		}
		if n := count(t, db, "SELECT COUNT(*) FROM notes WHERE scope = 'g:7'"); n != 1 || ran.Load() != 1 {
			t.Errorf("%d notes, the handler ran %d times; want 1 each", n, ran.Load())
		}
	})
}

// vitessShards lists the shards of the session's keyspace, as vtgate
// knows them.
func vitessShards(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rows, err := db.Query("SHOW VITESS_SHARDS")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(s, vitess.Keyspace+"/") {
			out = append(out, s)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
