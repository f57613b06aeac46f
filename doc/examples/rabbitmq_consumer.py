#!/usr/bin/env python3
"""RabbitMQ side of the broker tests (test/t/014, 040, 041, 042) and of
test/demo.sh: pika, and psycopg2 or psycopg 3.

    rabbitmq_consumer.py wait-ready AMQP_PORT TIMEOUT
        connect until the broker accepts an AMQP connection (exit 0) or
        TIMEOUT seconds have passed (exit 1)

    rabbitmq_consumer.py declare-retry AMQP_PORT QUEUE DELAY_MS
        declare the durable QUEUE whose rejected messages are dead-lettered
        to QUEUE.delay, QUEUE.delay whose messages expire after DELAY_MS and
        are dead-lettered back to QUEUE (a delayed retry), and QUEUE.dlq
        (messages parked after too many failures)

    rabbitmq_consumer.py produce AMQP_PORT QUEUE MESSAGES_JSON [--declared]
        declare the durable QUEUE (unless --declared) and publish every
        message of MESSAGES_JSON (a list of {"message_id", "account",
        "amount", ...}) as a persistent message with that message_id
        property and the other fields as its JSON body, with publisher
        confirms; prints {"published": count}

    rabbitmq_consumer.py depth AMQP_PORT QUEUE
        prints {"messages": ready, "consumers": count} (passive declare)

    rabbitmq_consumer.py replay AMQP_PORT FROM_QUEUE TO_QUEUE
        move every message of FROM_QUEUE to TO_QUEUE (same body and
        properties, x-death included), each published with a confirm before
        it is acked; prints {"replayed": count}

    rabbitmq_consumer.py consume AMQP_PORT QUEUE PGHOST PGPORT DBNAME
                                 WORKER BEHAVIOUR CONTROL_DIR [OPTIONS]
        consume QUEUE with manual acks, prefetch 10, with the pattern of
        doc/use.md: one transaction { dedup_claim('ledger', message_id); if
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

        OPTIONS:
          --driver psycopg2|psycopg3   (default psycopg2; psycopg 3 runs with
                               prepare_threshold=None, as pgbouncer < 1.21
                               needs in transaction pooling mode)
          --user ROLE          connect as ROLE
          --qualify SCHEMA     call SCHEMA.dedup_claim and write
                               public.accounts and public.applied: nothing
                               resolved through search_path
          --work-ms N          sleep N ms inside each transaction, after the
                               claim (a slower consumer: faults hit
                               transactions in flight)
          --on-db-error fail|retry|requeue
                               what a connection error (terminated backend,
                               server restart) does: fail = the exception
                               ends the consumer (default); retry =
                               reconnect and handle the delivery again;
                               requeue = reconnect and nack it with requeue,
                               so that the broker redelivers it
          --max-failures N     delayed retries (declare-retry): a delivery
                               that fails (an error in its transaction, or
                               its post-commit step) is rejected without
                               requeue, so QUEUE's dead-letter exchange
                               sends it to QUEUE.delay and back; at its Nth
                               failure (counted by its x-death header) it
                               is parked in QUEUE.dlq instead.  Post-commit
                               failures come from the body: "fail_after_commit":
                               K fails its first K deliveries, "notify": true
                               fails while CONTROL_DIR/downstream-down exists

        Waits for CONTROL_DIR/go before consuming, stops (closing its
        connections) once CONTROL_DIR/stop exists.  Writes one JSON line
        per event to stdout, flushed before any ack, nack or exit.

    rabbitmq_consumer.py pool-noise PGHOST PGPORT DBNAME WORKER CONTROL_DIR
                                    [--driver D] [--user ROLE]
        another client of the same pool: in autocommit, SET search_path =
        hostile and SET noise.planted = hostile (session settings; the
        server reports search_path to clients from PostgreSQL 18 on, never
        noise.planted) and then run one statement, over and over until
        CONTROL_DIR/stop exists; prints {"sets", "statements",
        "saw_hostile", "saw_planted"} (statements that ran with that
        search_path, with that noise.planted)
"""
import argparse
import json
import os
import sys
import time

import pika

CONSUMER = "ledger"     # the dedup consumer name: one logical service
PREFETCH = 10
RECONNECT_TIMEOUT = 60  # seconds


def params(port):
    return pika.ConnectionParameters(
        host="127.0.0.1", port=int(port), connection_attempts=1,
        socket_timeout=5, blocked_connection_timeout=30)


def emit(**fields):
    print(json.dumps(fields, sort_keys=True), flush=True)


class Database:
    """One PostgreSQL connection through psycopg2 or psycopg 3, reopened on
    demand after a connection error."""

    def __init__(self, driver, host, port, dbname, user, appname):
        if driver == "psycopg3":
            import psycopg
            self.module = psycopg
        elif driver == "psycopg2":
            import psycopg2
            self.module = psycopg2
        else:
            raise ValueError("unknown driver " + driver)
        self.driver = driver
        self.kw = {"host": host, "port": port, "dbname": dbname,
                   "application_name": appname}
        if user:
            self.kw["user"] = user
        self.conn = None
        self.connects = 0
        self.connection_errors = (self.module.OperationalError,
                                  self.module.InterfaceError)

    def lost(self, error):
        """Whether error means the connection is gone (a terminated backend,
        a restarting server, a pgbouncer that closed us): an error without
        an SQLSTATE from the server (psycopg2 raises a plain DatabaseError
        for "server closed the connection unexpectedly"), or of class 08
        (connection exception) or 57 (operator intervention: 57P01
        terminated, 57P02 crash of another backend, 57P03 starting up)."""
        code = getattr(error, "pgcode", None) or getattr(error, "sqlstate", None)
        return (isinstance(error, self.connection_errors) or code is None
                or code[:2] in ("08", "57")
                or self.conn is None or bool(self.conn.closed))

    def connect(self, timeout=RECONNECT_TIMEOUT):
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.driver == "psycopg3":
                    # no server-side prepared statements: pgbouncer 1.18 in
                    # transaction mode would send them to other backends
                    self.conn = self.module.connect(prepare_threshold=None,
                                                    **self.kw)
                else:
                    self.conn = self.module.connect(**self.kw)
                self.connects += 1
                return self.conn
            except self.connection_errors:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)     # the server is restarting

    def close(self):
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
            self.conn = None


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


def declare_retry(port, queue, delay_ms):
    conn = pika.BlockingConnection(params(port))
    ch = conn.channel()
    ch.queue_declare(queue=queue, durable=True, arguments={
        "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": queue + ".delay"})
    ch.queue_declare(queue=queue + ".delay", durable=True, arguments={
        "x-message-ttl": int(delay_ms),
        "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": queue})
    ch.queue_declare(queue=queue + ".dlq", durable=True)
    conn.close()
    emit(declared=[queue, queue + ".delay", queue + ".dlq"])
    return 0


def produce(port, queue, messages_file, *opts):
    with open(messages_file) as f:
        messages = json.load(f)
    conn = pika.BlockingConnection(params(port))
    ch = conn.channel()
    if "--declared" not in opts:
        ch.queue_declare(queue=queue, durable=True)
    ch.confirm_delivery()           # basic_publish raises unless confirmed
    for m in messages:
        body = {k: v for k, v in m.items() if k != "message_id"}
        ch.basic_publish(
            exchange="", routing_key=queue,
            body=json.dumps(body, sort_keys=True),
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


def replay(port, from_queue, to_queue):
    conn = pika.BlockingConnection(params(port))
    ch = conn.channel()
    ch.confirm_delivery()
    count = 0
    while True:
        method, props, body = ch.basic_get(from_queue, auto_ack=False)
        if method is None:
            break
        ch.basic_publish(exchange="", routing_key=to_queue, body=body,
                         properties=props, mandatory=True)
        ch.basic_ack(method.delivery_tag)   # only once the copy is confirmed
        count += 1
    conn.close()
    emit(replayed=count)
    return 0


def failures_of(props, queue):
    """How many times this message was rejected from queue (its x-death
    header, which RabbitMQ keeps per queue and reason)."""
    for death in (props.headers or {}).get("x-death", []) or []:
        if death.get("queue") == queue and death.get("reason") == "rejected":
            return int(death.get("count", 0))
    return 0


def consume(port, queue, pghost, pgport, dbname, worker, behaviour, control,
            *options):
    ap = argparse.ArgumentParser(prog="consume")
    ap.add_argument("--driver", default="psycopg2")
    ap.add_argument("--user")
    ap.add_argument("--qualify")
    ap.add_argument("--work-ms", type=int, default=0)
    ap.add_argument("--on-db-error", default="fail",
                    choices=("fail", "retry", "requeue"))
    ap.add_argument("--max-failures", type=int, default=0)
    opt = ap.parse_args(options)

    if opt.qualify:
        claim_fn = opt.qualify + ".dedup_claim"
        accounts, applied = "public.accounts", "public.applied"
    else:
        claim_fn, accounts, applied = "dedup_claim", "accounts", "applied"

    db = Database(opt.driver, pghost, pgport, dbname, opt.user, worker)
    db.connect()
    conn = pika.BlockingConnection(params(port))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=PREFETCH)
    emit(event="ready", worker=worker, pid=os.getpid(), driver=opt.driver)
    while not os.path.exists(os.path.join(control, "go")):
        conn.process_data_events(time_limit=0.02)   # keep the connection serviced

    state = {"deliveries": 0, "fresh": 0, "unacked": 0, "db_errors": 0}

    def transaction(rec, event, method, attempt):
        """The claim and the work, one transaction; returns the claim."""
        with db.conn.cursor() as cur:
            cur.execute("SELECT %s(%%s, %%s)" % claim_fn,
                        (CONSUMER, rec["message_id"]))
            first = cur.fetchone()[0]
            rec["claim"] = first
            if opt.work_ms:
                time.sleep(opt.work_ms / 1000.0)
            if first:
                cur.execute(
                    "UPDATE %s SET balance = balance + %%s WHERE id = %%s"
                    % accounts, (event["amount"], event["account"]))
                if cur.rowcount != 1:
                    raise LookupError("no account %r" % (event["account"],))
                cur.execute(
                    "INSERT INTO %s (message_id, worker, redelivered, attempt) "
                    "VALUES (%%s, %%s, %%s, %%s)" % applied,
                    (rec["message_id"], worker, bool(method.redelivered),
                     attempt))
            if (behaviour == "die-before-commit" and first
                    and state["deliveries"] > 5):
                emit(action="die-before-commit", **rec)
                os._exit(4)     # no commit, no rollback, no ack: just gone
        rec["stage"] = "commit"
        db.conn.commit()
        return first

    def fail(channel, method, props, body, rec, why):
        """--max-failures: a delayed retry, or the DLQ at the Nth failure."""
        rec["error"] = why
        if rec["failures"] + 1 >= opt.max_failures:
            emit(action="dead-letter", **rec)
            channel.basic_publish(exchange="", routing_key=queue + ".dlq",
                                  body=body, properties=props,
                                  mandatory=True)
            channel.basic_ack(method.delivery_tag)   # after the confirm
        else:
            emit(action="retry-later", **rec)
            channel.basic_reject(method.delivery_tag, requeue=False)

    def on_message(channel, method, props, body):
        state["deliveries"] += 1
        if not method.redelivered:
            state["fresh"] += 1
        event = json.loads(body)
        rec = {"event": "delivery", "worker": worker, "t": time.time(),
               "message_id": props.message_id,
               "redelivered": bool(method.redelivered),
               "n": state["deliveries"],
               "failures": failures_of(props, queue)}
        tries = 0
        while True:
            tries += 1
            attempt = "%s:%d.%d" % (worker, state["deliveries"], tries)
            rec.update(attempt=attempt, stage="claim")
            rec.pop("claim", None)
            try:
                if db.conn is None:
                    db.connect()
                    rec["reconnected"] = db.connects
                first = transaction(rec, event, method, attempt)
                break
            except db.module.Error as e:
                if not db.lost(e):
                    raise
                state["db_errors"] += 1
                rec["error"] = type(e).__name__
                if opt.on_db_error == "fail":
                    emit(action="db-error-exit", **rec)
                    raise
                db.close()
                if opt.on_db_error == "retry":
                    emit(action="db-error-retry", **rec)
                    continue        # reconnect, handle it again
                emit(action="db-error-requeue", **rec)
                channel.basic_nack(method.delivery_tag, requeue=True)
                return
            except LookupError as e:
                if not opt.max_failures:
                    raise
                db.conn.rollback()  # the claim goes with the failed work
                fail(channel, method, props, body, rec, str(e))
                return
        rec.pop("stage", None)
        rec.pop("error", None)

        if opt.max_failures:
            down = os.path.exists(os.path.join(control, "downstream-down"))
            if (rec["failures"] < int(event.get("fail_after_commit", 0))
                    or (event.get("notify") and down)):
                fail(channel, method, props, body, rec,
                     "post-commit step failed")
                return
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

    if opt.max_failures:
        ch.confirm_delivery()       # parking in the DLQ is confirmed
    ch.basic_consume(queue=queue, on_message_callback=on_message)
    while not os.path.exists(os.path.join(control, "stop")):
        conn.process_data_events(time_limit=0.05)
    ch.close()
    conn.close()
    db.close()
    emit(event="exit", worker=worker, deliveries=state["deliveries"],
         connects=db.connects, db_errors=state["db_errors"])
    return 0


def pool_noise(pghost, pgport, dbname, worker, control, *options):
    ap = argparse.ArgumentParser(prog="pool-noise")
    ap.add_argument("--driver", default="psycopg2")
    ap.add_argument("--user")
    opt = ap.parse_args(options)
    db = Database(opt.driver, pghost, pgport, dbname, opt.user, worker)
    conn = db.connect()
    conn.autocommit = True          # every statement is its own transaction
    sets = statements = saw = saw_planted = 0
    while not os.path.exists(os.path.join(control, "stop")):
        with conn.cursor() as cur:
            cur.execute("SET search_path = hostile")
            cur.execute("SET noise.planted = hostile")
            sets += 1
            cur.execute("SELECT current_setting('search_path'), "
                        "current_setting('noise.planted', true)")
            statements += 1
            path, planted = cur.fetchone()
            saw += path == "hostile"
            saw_planted += planted == "hostile"
        time.sleep(0.002)
    db.close()
    emit(sets=sets, statements=statements, saw_hostile=saw,
         saw_planted=saw_planted)
    return 0


def main(argv):
    mode, args = argv[1], argv[2:]
    modes = {"wait-ready": wait_ready, "declare-retry": declare_retry,
             "produce": produce, "depth": depth, "replay": replay,
             "consume": consume, "pool-noise": pool_noise}
    if mode not in modes:
        sys.exit("unknown mode " + mode)
    return modes[mode](*args)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
