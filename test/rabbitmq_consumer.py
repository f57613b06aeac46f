#!/usr/bin/env python3
"""RabbitMQ side of test/t/014_rabbitmq_redelivery.pl (pika + psycopg2).

    rabbitmq_consumer.py wait-ready AMQP_PORT TIMEOUT
        connect until the broker accepts an AMQP connection (exit 0) or
        TIMEOUT seconds have passed (exit 1)

    rabbitmq_consumer.py produce AMQP_PORT QUEUE MESSAGES_JSON
        declare the durable QUEUE and publish every message of
        MESSAGES_JSON (a list of {"message_id", "account", "amount"}) as a
        persistent message with that message_id property and the JSON body
        {"account", "amount"}, with publisher confirms; prints
        {"published": count}

    rabbitmq_consumer.py depth AMQP_PORT QUEUE
        prints {"messages": ready, "consumers": count} (passive declare)

    rabbitmq_consumer.py consume AMQP_PORT QUEUE PGHOST PGPORT DBNAME
                                 WORKER BEHAVIOUR CONTROL_DIR
        consume QUEUE with manual acks, prefetch 10, with the README
        pattern: one transaction { dedup_claim('ledger', message_id); if
        true: credit the account and record the message in "applied" },
        commit, then ack.  BEHAVIOUR injects a failure:

          steady               none
          die-after-commit     ack 10 deliveries, then commit 5 without
                               acking them, then os._exit(3)
          die-before-commit    after 5 deliveries, os._exit(4) inside the
                               transaction of the next one whose claim
                               returned true (claimed, credited, not
                               committed)
          nack                 after committing, nack (requeue=True) the
                               1st, 6th, 11th... delivery that was not a
                               redelivery, as if the ack had failed

        Waits for CONTROL_DIR/go before consuming, stops (closing its
        connections) once CONTROL_DIR/stop exists.  Writes one JSON line
        per event to stdout, flushed before any ack, nack or exit.
"""
import json
import os
import sys
import time

import pika
import psycopg2

CONSUMER = "ledger"     # the dedup consumer name: one logical service
PREFETCH = 10


def params(port):
    return pika.ConnectionParameters(
        host="127.0.0.1", port=int(port), connection_attempts=1,
        socket_timeout=5, blocked_connection_timeout=30)


def emit(**fields):
    print(json.dumps(fields, sort_keys=True), flush=True)


def wait_ready(port, timeout):
    deadline = time.monotonic() + float(timeout)
    last = None
    while time.monotonic() < deadline:
        try:
            pika.BlockingConnection(params(port)).close()
            return 0
        except Exception as e:          # not up yet
            last = e
            time.sleep(0.2)
    print("broker not ready: %r" % (last,), file=sys.stderr)
    return 1


def produce(port, queue, messages_file):
    with open(messages_file) as f:
        messages = json.load(f)
    conn = pika.BlockingConnection(params(port))
    ch = conn.channel()
    ch.queue_declare(queue=queue, durable=True)
    ch.confirm_delivery()           # basic_publish raises unless confirmed
    for m in messages:
        ch.basic_publish(
            exchange="", routing_key=queue,
            body=json.dumps({"account": m["account"], "amount": m["amount"]}),
            properties=pika.BasicProperties(
                message_id=m["message_id"], delivery_mode=2,
                content_type="application/json"),
            mandatory=True)
    conn.close()
    emit(published=len(messages))
    return 0


def depth(port, queue):
    conn = pika.BlockingConnection(params(port))
    ch = conn.channel()
    ok = ch.queue_declare(queue=queue, passive=True)
    emit(messages=ok.method.message_count, consumers=ok.method.consumer_count)
    conn.close()
    return 0


def consume(port, queue, pghost, pgport, dbname, worker, behaviour, control):
    db = psycopg2.connect(host=pghost, port=pgport, dbname=dbname)
    conn = pika.BlockingConnection(params(port))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=PREFETCH)
    emit(event="ready", worker=worker, pid=os.getpid())
    while not os.path.exists(os.path.join(control, "go")):
        conn.process_data_events(time_limit=0.02)   # keep the connection serviced

    state = {"deliveries": 0, "fresh": 0, "unacked": 0}

    def on_message(channel, method, props, body):
        state["deliveries"] += 1
        if not method.redelivered:
            state["fresh"] += 1
        event = json.loads(body)
        rec = {"event": "delivery", "worker": worker, "t": time.time(),
               "message_id": props.message_id,
               "redelivered": bool(method.redelivered),
               "n": state["deliveries"]}
        # one transaction: the claim and the work commit or roll back together
        with db.cursor() as cur:
            cur.execute("SELECT dedup_claim(%s, %s)", (CONSUMER, props.message_id))
            first = cur.fetchone()[0]
            rec["claim"] = first
            if first:
                cur.execute(
                    "UPDATE accounts SET balance = balance + %s WHERE id = %s",
                    (event["amount"], event["account"]))
                if cur.rowcount != 1:
                    raise RuntimeError("no account %r" % (event["account"],))
                cur.execute(
                    "INSERT INTO applied (message_id, worker, redelivered) "
                    "VALUES (%s, %s, %s)",
                    (props.message_id, worker, bool(method.redelivered)))
            if (behaviour == "die-before-commit" and first
                    and state["deliveries"] > 5):
                emit(action="die-before-commit", **rec)
                os._exit(4)     # no commit, no rollback, no ack: just gone
        db.commit()

        if behaviour == "die-after-commit" and state["deliveries"] > 10:
            state["unacked"] += 1
            emit(action="commit-no-ack", **rec)
            if state["unacked"] == 5:
                os._exit(3)     # committed, never acked
            return
        if (behaviour == "nack" and not method.redelivered
                and state["fresh"] % 5 == 1):
            emit(action="nack", **rec)
            channel.basic_nack(method.delivery_tag, requeue=True)
            return
        emit(action="ack", **rec)
        channel.basic_ack(method.delivery_tag)

    ch.basic_consume(queue=queue, on_message_callback=on_message)
    while not os.path.exists(os.path.join(control, "stop")):
        conn.process_data_events(time_limit=0.05)
    ch.close()
    conn.close()
    db.close()
    emit(event="exit", worker=worker, deliveries=state["deliveries"])
    return 0


def main(argv):
    mode, args = argv[1], argv[2:]
    if mode == "wait-ready":
        return wait_ready(*args)
    if mode == "produce":
        return produce(*args)
    if mode == "depth":
        return depth(*args)
    if mode == "consume":
        return consume(*args)
    sys.exit("unknown mode " + mode)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
