package driver

// ObserverKey is the context key under which sqlonce.ContextWithObserver
// stores an Observer. It lives here because the root package and
// internal/obs both need it and the root package imports this one.
type ObserverKey struct{}
