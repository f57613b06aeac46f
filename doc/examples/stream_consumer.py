#!/usr/bin/env python3
"""RabbitMQ stream queues and dedup's claims by offset (test/t/052): pika
and psycopg 3.

    stream_consumer.py publish AMQP_PORT STREAM COUNT PREFIX
        declare the stream queue STREAM (durable, x-queue-type stream) and
        publish COUNT messages with publisher confirms, message i (from 0)
        with the JSON body {"message_id": "PREFIX-i", "account": i % 5 + 1,
        "amount": i + 1}; they get the offsets 0 .. COUNT - 1 of an empty
        stream; prints {"published": COUNT}

    stream_consumer.py consume AMQP_PORT STREAM DSN CONSUMER WORKER LAST
                               [--from dedup|first] [--crash before|after
                               --at OFFSET] [--work-ms N]
        the consumer of doc/streams.md: where to start is
        dedup_stream_positions(CONSUMER, STREAM)'s next_offset (--from dedup,
        the default; the start of the stream if it has no position) or the
        start of the stream (--from first: a replay of it all); then, for
        each delivery, one transaction { dedup_claim_offset(CONSUMER,
        STREAM, 0, offset); if true: credit the account and record the
        message in "applied" }, commit, then ack (a stream's acks only give
        credit).  Stops after the delivery of offset LAST.  --crash kills
        the process (SIGKILL, as kill -9) at offset OFFSET, inside the
        transaction before its commit or after the commit before the ack.
        Prints one JSON line per delivery: {"worker", "offset", "claimed"}.
"""
import json
import os
import signal
import sys
import time

import pika
import psycopg


def params(port):
    return pika.ConnectionParameters(host="127.0.0.1", port=int(port),
                                     heartbeat=30,
                                     blocked_connection_timeout=60)


def declare(channel, stream):
    channel.queue_declare(queue=stream, durable=True,
                          arguments={"x-queue-type": "stream"})


def publish(port, stream, count, prefix):
    connection = pika.BlockingConnection(params(port))
    channel = connection.channel()
    declare(channel, stream)
    channel.confirm_delivery()
    for i in range(int(count)):
        body = {"message_id": "%s-%d" % (prefix, i),
                "account": i % 5 + 1, "amount": i + 1}
        channel.basic_publish(exchange="", routing_key=stream,
                              body=json.dumps(body).encode(),
                              properties=pika.BasicProperties(delivery_mode=2))
    connection.close()
    print(json.dumps({"published": int(count)}), flush=True)
    return 0


def start_offset(db, consumer, stream, how):
    """Where to seek: the position's next offset, or the stream's start."""
    if how == "first":
        return 0
    row = db.execute("SELECT next_offset FROM dedup_stream_positions(%s, %s)"
                     " WHERE partition = 0", (consumer, stream)).fetchone()
    return row[0] if row else 0


def consume(port, stream, dsn, consumer, worker, last, how="dedup",
            crash=None, at=None, work_ms=0):
    db = psycopg.connect(dsn)
    connection = pika.BlockingConnection(params(port))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=50)       # streams need a prefetch
    offset = start_offset(db, consumer, stream, how)
    db.commit()

    for method, properties, body in channel.consume(
            stream, auto_ack=False, arguments={"x-stream-offset": offset}):
        offset = properties.headers["x-stream-offset"]
        message = json.loads(body)
        with db.transaction():
            claimed = db.execute(
                "SELECT dedup_claim_offset(%s, %s, 0, %s)",
                (consumer, stream, offset)).fetchone()[0]
            if claimed:
                db.execute("UPDATE accounts SET balance = balance + %s"
                           " WHERE id = %s",
                           (message["amount"], message["account"]))
                db.execute("INSERT INTO applied (message_id, worker, stream,"
                           " stream_offset) VALUES (%s, %s, %s, %s)",
                           (message["message_id"], worker, stream, offset))
                if work_ms:
                    time.sleep(work_ms / 1000.0)
            if crash == "before" and offset == at:
                os.kill(os.getpid(), signal.SIGKILL)
        if crash == "after" and offset == at:
            os.kill(os.getpid(), signal.SIGKILL)
        channel.basic_ack(method.delivery_tag)
        print(json.dumps({"worker": worker, "offset": offset,
                          "claimed": claimed}), flush=True)
        if offset >= last:
            break
    channel.cancel()
    connection.close()
    db.close()
    return 0


def main(argv):
    if argv[1] == "publish":
        return publish(*argv[2:6])
    if argv[1] == "consume":
        port, stream, dsn, consumer, worker, last = argv[2:8]
        options = dict(zip(argv[8::2], argv[9::2]))
        return consume(port, stream, dsn, consumer, worker, int(last),
                       how=options.get("--from", "dedup"),
                       crash=options.get("--crash"),
                       at=int(options.get("--at", -1)),
                       work_ms=int(options.get("--work-ms", 0)))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
