module github.com/sqlonce/sqlonce/outbox/rabbitmq

go 1.26.0

require (
	github.com/rabbitmq/amqp091-go v1.16.0
	github.com/sqlonce/sqlonce v0.1.0
)

replace github.com/sqlonce/sqlonce => ../..
