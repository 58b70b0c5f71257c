// Package linkcheck checks which database libraries sqlonce's packages
// link: each driver package links its own library only, and the root
// package and the strategy packages link none; the broker clients (NATS,
// RabbitMQ) are linked by the outbox's adapter modules only. The commands under it are
// small programs that each use one driver; TestLinks lists their
// dependencies with go list -deps.
package linkcheck
