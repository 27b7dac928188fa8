// Package natsjs is the outbox's publisher for NATS JetStream: each
// message goes to the subject of its topic with its outbox id as
// Nats-Msg-Id, so that JetStream's duplicate window drops the relay's
// re-sends and the stream stores one message per operation. Create one
// with [New].
//
//	nc, err := nats.Connect("nats://127.0.0.1:4222")
//	js, err := jetstream.New(nc)
//	pub, err := natsjs.New(js)
//	relay, err := outbox.NewRelay(db, ob, pub)
//	err = relay.Run(ctx)
//
// The stream that captures the topics must exist (opledger relay
// --stream creates one). Its duplicate window (JetStream's default is two
// minutes) must be longer than a message can wait between a relay's publish and its
// delete; a relay that died mid-batch leaves its messages to the next
// batch within seconds. Only this package of the kit imports the NATS
// client.
//
// Besides Nats-Msg-Id (the message's id), each message carries the
// headers Opledger-Message-Name (outbox.Message.Name),
// Opledger-Partition-Key (its key) and Opledger-Outbox-Seq (its position
// in the outbox), for consumers.
//
// The Publisher knows its limits (it implements outbox.Checker): give it
// to outbox.WithPublisherLimits and Enqueue refuses, in the handler's
// transaction, a topic that is no valid NATS subject and a message that,
// with the publisher's headers, exceeds the server's max_payload. A
// message the server refuses anyway (one enqueued without the check, or
// a limit lowered since) fails its publish with an error matching
// outbox.ErrUndeliverable, and the relay sets it aside: the server's
// maximum payload exceeded (nats.ErrMaxPayload), an invalid subject
// (nats.ErrBadSubject), the stream's maximum message size exceeded
// (JetStream error 10054), a subject captured by another stream than
// WithStream's (10060). Every other error (no stream answers, a timeout, a
// lost connection) is retried.
package natsjs
