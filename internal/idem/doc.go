// Package idem is the transport-neutral core of sqlonce's request
// idempotency (httpidem for HTTP, grpcidem for gRPC): how a key is scoped,
// and how one request is run in transactional mode, attempt after
// attempt, down to one Outcome that each transport turns into its own
// answer (a status code and problem, a gRPC status).
package idem
