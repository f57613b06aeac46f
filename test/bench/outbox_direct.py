#!/usr/bin/python3
"""test/bench/outbox_direct.py: the baseline of the relay's throughput --
the same messages published straight to RabbitMQ with publisher confirms,
no database.

    outbox_direct.py AMQP_URL QUEUE COUNT BATCH windowed|blocking
    outbox_direct.py AMQP_URL QUEUE 0 0 purge   (declare QUEUE durable, empty it)

windowed: with dedup_relay's own publisher (its RabbitMQ class: BATCH
messages published, then their confirms awaited), so that the relay's
figure against this one is what the database side costs; blocking: pika's
BlockingChannel in confirm mode, each basic_publish waiting for its own
confirm (the textbook way).  The messages are those of outbox.sh's
transactions (a small JSON payload, a key header, persistent, mandatory).
Prints messages per second, from the connection to the last confirm.
"""
import importlib.machinery
import importlib.util
import json
import os
import sys
import time

import pika


def relay_module():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "..", "..", "src", "relay", "dedup_relay")
    loader = importlib.machinery.SourceFileLoader("dedup_relay", path)
    spec = importlib.util.spec_from_loader("dedup_relay", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def main(url, queue, count, batch, how):
    count, batch = int(count), int(batch)
    payloads = [json.dumps({"customer": i % 10000 + 1, "points": 120})
                for i in range(count)]
    started = time.monotonic()
    if how == "purge":
        conn = pika.BlockingConnection(pika.URLParameters(url))
        channel = conn.channel()
        channel.queue_declare(queue=queue, durable=True)
        channel.queue_purge(queue=queue)
        conn.close()
        return
    if how == "windowed":
        relay = relay_module()
        broker = relay.RabbitMQ(url, "", 30)
        broker.connect()
        for first in range(0, count, batch):
            messages = [relay.Message(i, "direct-%d" % i, queue,
                                      str(i % 10000 + 1), None, payloads[i])
                        for i in range(first, min(count, first + batch))]
            confirmed, refused = broker.publish(messages)
            if refused:
                sys.exit("%d messages not confirmed" % len(refused))
        broker.close()
    else:
        conn = pika.BlockingConnection(pika.URLParameters(url))
        channel = conn.channel()
        channel.confirm_delivery()
        for i in range(count):
            channel.basic_publish(
                exchange="", routing_key=queue, mandatory=True,
                body=payloads[i].encode(),
                properties=pika.BasicProperties(
                    message_id="direct-%d" % i, delivery_mode=2,
                    headers={"dedup-key": str(i % 10000 + 1)}))
        conn.close()
    print("%.0f" % (count / (time.monotonic() - started)))


if __name__ == "__main__":
    main(*sys.argv[1:])
