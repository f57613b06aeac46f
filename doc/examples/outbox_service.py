#!/usr/bin/python3
"""A service in a chain: consume, claim, update, publish -- in one transaction.

    outbox_service.py --amqp URL --dsn DSN --queue QUEUE --consumer NAME
                      [--publish DESTINATION] [--work-ms N] [--prefetch N]

Consumes QUEUE (RabbitMQ, manual acks) and handles each delivery in one
PostgreSQL transaction:

    BEGIN;
    SELECT dedup_claim(NAME, message_id);          -- false: seen, skip it
    -- if true: the service's own work
    INSERT INTO ledger ... ON CONFLICT DO UPDATE;  -- the running total per key
    INSERT INTO applied ...;                       -- one row per application
    SELECT dedup_publish(DESTINATION, payload, key);  -- with --publish
    COMMIT;
    -- then basic_ack

The outgoing message commits with the claim and the update, or not at all;
dedup_relay takes it to RabbitMQ after the commit, and the next service
claims it by the id dedup_publish() gave it (the same id whenever this
delivery is handled again, however often the relay sends it).  So a crash
anywhere -- of this service before or after its commit, of the relay
between its publish and the broker's confirm, of the next service -- ends
in every message applied once by every service of the chain.

The message body is JSON: {"key": ..., "amount": ...} and whatever else;
the outgoing payload carries it on with "origin", the id of the message the
chain started with.  The tables (in the service's database):

    CREATE TABLE ledger (service text, key text, total bigint NOT NULL,
                         PRIMARY KEY (service, key));
    CREATE TABLE applied (seq bigserial PRIMARY KEY, service text NOT NULL,
                          message_id text NOT NULL, origin text NOT NULL,
                          key text, n integer, amount bigint);

On any lost connection (the broker or the database restarting) it drops
both, waits a little longer each time (at most 5 s) and starts over: the
broker redelivers what was not acked, and the claims tell which of those
were already applied.  Prints one JSON line per delivery (its claim) and
per reconnection; stops on SIGTERM.  psycopg2 and pika (Debian:
python3-psycopg2, python3-pika).
"""
import argparse
import json
import signal
import sys
import time

import pika
import psycopg2

stopping = False


def lost(error):
    """Whether a database error means the connection is gone (psycopg2
    raises a plain DatabaseError without an SQLSTATE for a server that
    closed it), rather than a bug to stop at."""
    code = getattr(error, "pgcode", None)
    return (isinstance(error, (psycopg2.OperationalError,
                               psycopg2.InterfaceError))
            or code is None or code[:2] in ("08", "57"))


def emit(**fields):
    print(json.dumps(fields, sort_keys=True), flush=True)


def handle(db, opt, props, body):
    """The claim, the work and the outgoing message: one transaction."""
    event = json.loads(body)
    origin = event.get("origin", props.message_id)
    with db.cursor() as cur:
        cur.execute("SELECT dedup_claim(%s, %s)", (opt.consumer, props.message_id))
        claimed = cur.fetchone()[0]
        if claimed:
            time.sleep(opt.work_ms / 1000.0)     # the service's real work
            cur.execute(
                "INSERT INTO ledger (service, key, total) VALUES (%s, %s, %s) "
                "ON CONFLICT (service, key) "
                "DO UPDATE SET total = ledger.total + excluded.total",
                (opt.consumer, event["key"], event["amount"]))
            cur.execute(
                "INSERT INTO applied (service, message_id, origin, key, n, amount) "
                "VALUES (%s, %s, %s, %s, %s, %s)",
                (opt.consumer, props.message_id, origin, event["key"],
                 event.get("n"), event["amount"]))
            if opt.publish:
                out = dict(event, origin=origin)
                cur.execute("SELECT dedup_publish(%s, %s, %s)",
                            (opt.publish, json.dumps(out, sort_keys=True),
                             event["key"]))
    db.commit()
    return claimed


def serve(opt):
    """Consume until SIGTERM or a lost connection (raised)."""
    db = psycopg2.connect(opt.dsn, application_name=opt.consumer)
    broker = pika.BlockingConnection(pika.URLParameters(opt.amqp))
    try:
        channel = broker.channel()
        channel.queue_declare(queue=opt.queue, durable=True)
        channel.basic_qos(prefetch_count=opt.prefetch)

        def on_message(ch, method, props, body):
            claimed = handle(db, opt, props, body)
            emit(id=props.message_id, claim=claimed,
                 redelivered=method.redelivered)
            ch.basic_ack(method.delivery_tag)

        channel.basic_consume(queue=opt.queue, on_message_callback=on_message)
        emit(event="ready", service=opt.consumer)
        while not stopping:
            broker.process_data_events(time_limit=0.2)
    finally:
        for close in (broker.close, db.close):
            try:
                close()
            except Exception:
                pass


def main(argv):
    ap = argparse.ArgumentParser(prog="outbox_service.py")
    ap.add_argument("--amqp", required=True, help="AMQP URL")
    ap.add_argument("--dsn", required=True, help="libpq connection string")
    ap.add_argument("--queue", required=True, help="the queue consumed")
    ap.add_argument("--consumer", required=True, help="the dedup consumer name")
    ap.add_argument("--publish", help="the dedup destination published to")
    ap.add_argument("--work-ms", type=int, default=0,
                    help="ms of work inside each transaction, after the claim")
    ap.add_argument("--prefetch", type=int, default=10)
    opt = ap.parse_args(argv)

    def stop(_signum, _frame):
        global stopping
        stopping = True
    signal.signal(signal.SIGTERM, stop)

    pause = 0.1
    while not stopping:
        started = time.monotonic()
        try:
            serve(opt)
        except (pika.exceptions.AMQPError, psycopg2.DatabaseError,
                OSError) as e:
            if isinstance(e, psycopg2.DatabaseError) and not lost(e):
                raise
            if time.monotonic() - started > 10:
                pause = 0.1     # it ran a while: a new outage
            emit(event="reconnect", why=type(e).__name__, pause=pause)
            time.sleep(pause)
            pause = min(5.0, pause * 2)
    emit(event="exit", service=opt.consumer)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
