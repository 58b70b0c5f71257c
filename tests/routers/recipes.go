// Package routers holds tested recipes for httpidem on the routers most
// used besides net/http's ServeMux: chi, echo and gin. Copy the one you
// need; routers_test.go runs each against PostgreSQL, MariaDB and SQLite.
//
//   - chi takes func(http.Handler) http.Handler: pass Middleware.Wrap to
//     r.With (or r.Use) as it is. Register it with r.With on the route, so
//     that chi has matched the route and ChiRoute can name it.
//   - echo: its handlers return errors, which echo writes only after the
//     middleware chain has returned. Behind echo.WrapMiddleware the
//     handler's answer is then empty when httpidem records it, and the
//     key would replay an empty 200 forever. Echo writes the error inside
//     the wrapped handler, so that httpidem records what the client gets.
//   - gin: its Context writes through a gin.ResponseWriter; Gin hands the
//     handlers one that writes into httpidem's buffered answer, and stops
//     the chain when httpidem answers by itself (a replay, a problem).
package routers

import (
	"context"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi/v5"
	"github.com/labstack/echo/v4"
)

// ChiRoute names a request's route by chi's pattern ("/orders/{id}"),
// for httpidem.WithRoute. It is complete only once chi has matched the
// route: in middleware registered with r.With, or with r.Use on the
// subrouter that holds the route.
func ChiRoute(r *http.Request) string {
	if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
		return rc.RoutePattern()
	}
	return r.URL.Path
}

// Echo is an echo middleware around wrap (Middleware.Wrap). A handler's
// returned error is written by echo's HTTPErrorHandler before httpidem
// records the answer, so that the error answer is what a retry replays.
func Echo(wrap func(http.Handler) http.Handler) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			orig := c.Response()
			wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c.SetRequest(r)
				c.SetResponse(echo.NewResponse(w, c.Echo()))
				if err := next(c); err != nil {
					c.Error(err) // into the answer httpidem records
				}
			})).ServeHTTP(orig, withRoute(c.Request(), c.Path()))
			c.SetResponse(orig)
			return nil
		}
	}
}

// Gin is a gin middleware around wrap (Middleware.Wrap).
func Gin(wrap func(http.Handler) http.Handler) gin.HandlerFunc {
	return func(c *gin.Context) {
		orig := c.Writer
		ran := false
		wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ran = true
			c.Request = r
			c.Writer = &ginWriter{ResponseWriter: orig, w: w, size: -1}
			c.Next()
		})).ServeHTTP(orig, withRoute(c.Request, c.FullPath()))
		c.Writer = orig
		if !ran {
			c.Abort() // httpidem answered: a replay or a problem
		}
	}
}

// routeKey carries the route echo or gin matched into the request's
// context, for Route.
type routeKey struct{}

// Route names a request's route as echo ("/orders/:id", Context.Path) or
// gin (Context.FullPath) matched it, for httpidem.WithRoute behind Echo or
// Gin. Both routers match before they run middleware registered with Use.
func Route(r *http.Request) string {
	if p, _ := r.Context().Value(routeKey{}).(string); p != "" {
		return p
	}
	return r.URL.Path
}

func withRoute(r *http.Request, route string) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), routeKey{}, route))
}

// ginWriter is the gin.ResponseWriter the handlers get: status, header
// and body go to w, httpidem's buffered answer. Flush does nothing: the
// answer is sent once recorded.
type ginWriter struct {
	gin.ResponseWriter // Hijack, CloseNotify, Pusher: the connection's own
	w                  http.ResponseWriter
	status             int
	size               int // -1 until the header is written
}

func (g *ginWriter) Header() http.Header { return g.w.Header() }

func (g *ginWriter) WriteHeader(code int) {
	if code > 0 && !g.Written() {
		g.status = code
	}
}

func (g *ginWriter) WriteHeaderNow() {
	if !g.Written() {
		g.size = 0
		g.w.WriteHeader(g.Status())
	}
}

func (g *ginWriter) Write(b []byte) (int, error) {
	g.WriteHeaderNow()
	n, err := g.w.Write(b)
	g.size += n
	return n, err
}

func (g *ginWriter) WriteString(s string) (int, error) { return g.Write([]byte(s)) }

func (g *ginWriter) Status() int {
	if g.status == 0 {
		return http.StatusOK
	}
	return g.status
}

func (g *ginWriter) Size() int     { return g.size }
func (g *ginWriter) Written() bool { return g.size != -1 }
func (g *ginWriter) Flush()        {}
