"""test/relay/test_dedup_relay.py: unit tests of src/relay/dedup_relay, with
neither a broker nor a server: a fake broker whose confirms, nacks and
returns each test scripts, a fake outbox, a fake database connection, and
pgoutput records built here for the WAL parser.

    python3 -m unittest discover -s test/relay      (from the top of the tree)

Without pika or psycopg2 (the relay's modules) it is skipped, unless
DEDUP_REQUIRE_TOOLS is set (test/run.sh as root).

What each test guards is in its docstring (test/README.md lists them).
"""
import hashlib
import hmac
import importlib.machinery
import importlib.util
import json
import os
import struct
import threading
import types
import unittest
import unittest.mock


def load_relay():
    """The relay, a script without .py, as a module."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "..", "..", "src", "relay", "dedup_relay")
    loader = importlib.machinery.SourceFileLoader("dedup_relay", path)
    spec = importlib.util.spec_from_loader("dedup_relay", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


try:
    relay = load_relay()
except ImportError as e:        # pika or psycopg2
    if os.environ.get("DEDUP_REQUIRE_TOOLS"):
        raise
    raise unittest.SkipTest("the relay's modules are missing: %s" % e)


def message(id, destination="q1", key=None):
    return relay.Message(id, id, destination, key, None, "payload of " + id)


def options(**kw):
    opt = dict(batch=100, max_backoff=30, report_every=3600, poll=0.01,
               exit_when_idle=False, destination=None, lease=40, name="r",
               schema=None, slot="s", publication="p", dsn="")
    opt.update(kw)
    return types.SimpleNamespace(**opt)


class FakeBroker:
    """A broker that answers each batch with answer(batch): (confirmed,
    refused), refused a list of (message, reason)."""

    def __init__(self, answer):
        self.answer = answer
        self.connects = 0

    def connect(self):
        self.connects += 1

    def send(self, messages):
        self.sending = list(messages)

    def wait(self):
        return self.answer(self.sending)

    def idle(self, seconds, fd=None):
        pass

    def close(self):
        pass


class FakeOutbox:
    """An outbox whose batches come from supply(); it keeps what the relay
    marks sent, gives back and holds.  can_hold: as table mode (a
    destination waits alone), else as WAL mode (the relay waits)."""

    def __init__(self, supply, can_hold):
        self.supply, self.can_hold = supply, can_hold
        self.sent, self.back, self.refused, self.holds = [], [], [], []
        self.lock = threading.Lock()

    def connect(self):
        pass

    def take(self, n):
        with self.lock:
            return self.supply()

    def done(self, confirmed):
        self.sent.extend(m.id for m in confirmed)

    def give_back(self, messages, refused=()):
        self.back.extend(m.id for m in messages)
        self.refused.extend((m.id, why) for m, why in refused)

    def hold(self, destination, seconds):
        self.holds.append((destination, seconds))
        return self.can_hold

    def close(self):
        pass


def batches(*lists):
    """A supply of these batches, then nothing."""
    queue = [list(b) for b in lists]
    return lambda: queue.pop(0) if queue else []


NO_ROUTE = "returned by the broker: 312 NO_ROUTE"


class PartialRefusal(unittest.TestCase):
    """Per-key order: a message is never marked sent while an earlier one
    of its destination and key is given back (guards the order fix)."""

    def run_batch(self, refuse, why):
        batch = [message("a1", "q", "k"), message("a2", "q", "k"),
                 message("b1", "q", "j"), message("n1", "q"),
                 message("a3", "r", "k"), message("a4", "q", "k")]

        def answer(sent):
            return ([m for m in sent if m.id not in refuse],
                    [(m, why) for m in sent if m.id in refuse])
        outbox = FakeOutbox(batches(batch), can_hold=True)
        r = relay.Relay(options(), outbox, FakeBroker(answer))
        with self.assertLogs("dedup_relay", "INFO"):
            self.assertTrue(r.step())
        r.record()
        return outbox

    def test_first_of_a_key_returned(self):
        outbox = self.run_batch({"a1"}, NO_ROUTE)
        self.assertEqual(outbox.sent, ["b1", "n1", "a3"],
                         "a2 and a4 (key k of q, behind a1) not marked sent")
        self.assertEqual(outbox.back, ["a2", "a4"])
        self.assertEqual(outbox.refused, [("a1", NO_ROUTE)])

    def test_middle_of_a_key_nacked(self):
        outbox = self.run_batch({"a2"}, "nacked by the broker")
        self.assertEqual(outbox.sent, ["a1", "b1", "n1", "a3"])
        self.assertEqual(outbox.back, ["a4"])
        self.assertEqual(outbox.refused, [("a2", "nacked by the broker")])


class RabbitMQAnswers(unittest.TestCase):
    """RabbitMQ.wait(): what the broker acked and did not return is
    confirmed; what it returned (with its reply code and text) or nacked is
    refused, with the reason."""

    def test_wait(self):
        broker = relay.RabbitMQ("amqp://localhost", "", 1)
        self.addCleanup(broker.loop.close)
        acked, returned, nacked = message("a"), message("r", "q9"), \
            message("n")
        broker.sending = [acked, returned, nacked]
        broker.acked, broker.nacked, broker.returned = \
            [acked, returned], [nacked], {}
        broker._returned(None, types.SimpleNamespace(
            reply_code=312, reply_text="NO_ROUTE"),
            types.SimpleNamespace(message_id="r"), b"")
        broker.waiter = broker.loop.create_future()
        broker.waiter.set_result(None)
        self.assertEqual(broker.wait(),
                         ([acked], [(returned, NO_ROUTE),
                                    (nacked, "nacked by the broker")]))


class RefusalBackoff(unittest.TestCase):
    """A destination the broker keeps refusing is retried ever more slowly,
    its own back-off reset only when one of its messages is confirmed, not
    by reconnecting (guards the back-off reset on reconnect)."""

    def setUp(self):
        self.n = 0
        self.refusing = True

    def supply(self):
        self.n += 1
        return [message("m%d" % self.n, "q9")]

    def answer(self, sent):
        if self.refusing:
            return [], [(m, NO_ROUTE) for m in sent]
        return list(sent), []

    def steps(self, r, n):
        for _ in range(n):
            r.step()

    def test_wal_mode_pauses_grow(self):
        outbox = FakeOutbox(self.supply, can_hold=False)
        broker = FakeBroker(self.answer)
        r = relay.Relay(options(max_backoff=1), outbox, broker)
        pauses = []
        r.pause = pauses.append
        with self.assertLogs("dedup_relay", "WARNING") as logged:
            self.steps(r, 5)
        self.assertEqual(pauses, [0.1, 0.2, 0.4, 0.8, 1])
        self.assertEqual(broker.connects, 5, "a connect at every step")
        self.assertIn("destination q9 refused: " + NO_ROUTE, logged.output[0])
        self.assertEqual(
            sum("destination q9 refused" in line for line in logged.output),
            1, "one line for the refusal, not one per attempt")
        self.refusing = False
        with self.assertLogs("dedup_relay", "WARNING") as logged:
            r.step()
        self.assertIn("destination q9 back after", logged.output[-1])
        self.refusing = True
        with self.assertLogs("dedup_relay", "WARNING"):
            self.steps(r, 1)
        self.assertEqual(pauses[-1], 0.1, "reset once q9 was confirmed")

    def test_table_mode_holds_the_destination(self):
        outbox = FakeOutbox(self.supply, can_hold=True)
        r = relay.Relay(options(), outbox, FakeBroker(self.answer))
        pauses = []
        r.pause = pauses.append
        with self.assertLogs("dedup_relay", "WARNING"):
            self.steps(r, 3)
        self.assertEqual(outbox.holds, [("q9", 0.1), ("q9", 0.2), ("q9", 0.4)])
        self.assertEqual(pauses, [], "the relay goes on with the others")


KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))


def begin(xid, final_lsn=0x2000):
    return b"B" + struct.pack("!QqI", final_lsn, 0, xid)


def commit(end_lsn):
    return b"C" + struct.pack("!BQQq", 0, end_lsn - 8, end_lsn, 0)


def wal_message(content, lsn=0x1000, transactional=True, prefix=b"dedup"):
    return (b"M" + struct.pack("!BQ", int(transactional), lsn) + prefix
            + b"\0" + struct.pack("!I", len(content)) + content)


def signed(xid, fields, key=KEY):
    body = fields if isinstance(fields, bytes) else json.dumps(fields).encode()
    mac = hmac.new(key, str(xid).encode() + b"\n" + body, hashlib.sha256)
    return b"dedup-v1 " + mac.hexdigest().encode() + b"\n" + body


def upper_mac(content):
    return content[:9] + content[9:73].upper() + content[73:]


FIELDS = {"id": "id-1", "destination": "audit", "key": "k1",
          "headers": {"type": "t"}, "payload": "SECRET payload"}


class FakeStream:
    """The replication cursor: the records to read, the feedback sent."""

    def __init__(self, records):
        self.records = [types.SimpleNamespace(payload=r) for r in records]
        self.flushed = []

    def read_message(self):
        return self.records.pop(0) if self.records else None

    def send_feedback(self, write_lsn, flush_lsn, force):
        self.flushed.append(flush_lsn)


class WalParser(unittest.TestCase):
    """WAL mode relays only what dedup_publish() wrote: a message under the
    prefix 'dedup' that is not transactional, not of its form, whose MAC
    does not verify (forged, or copied from another transaction), or whose
    JSON does not parse or lacks a field is skipped, logged with its LSN
    and the reason (not its content), counted, and its transaction's end
    confirmed; nothing raises (guards the MAC check and junk raising)."""

    def outbox(self, records, new_keys=()):
        ob = relay.WalOutbox(options())
        ob.txns, ob.current, ob.keys = [], None, [KEY]
        fresh = list(new_keys)

        def read_key():
            if fresh:
                ob.keys.append(fresh.pop(0))
                return True
            return False
        ob.read_key = read_key
        ob.cur = FakeStream(records)
        return ob

    def test_valid(self):
        ob = self.outbox([begin(700), wal_message(signed(700, FIELDS)),
                          commit(0x3000)])
        (m,) = ob.take(10)
        self.assertEqual((m.id, m.destination, m.key, m.headers, m.payload),
                         ("id-1", "audit", "k1", {"type": "t"},
                          "SECRET payload"))
        self.assertEqual(ob.cur.flushed, [], "not confirmed before the broker")
        ob.done([m])
        self.assertEqual(ob.cur.flushed, [0x3000])

    def test_key_changed(self):
        ob = self.outbox([begin(700),
                          wal_message(signed(700, FIELDS, OTHER_KEY)),
                          commit(0x3000)], new_keys=[OTHER_KEY])
        self.assertEqual([m.id for m in ob.take(10)], ["id-1"],
                         "verified with the key read again")

    def test_not_dedup_publish(self):
        no_key = dict(FIELDS)
        del no_key["key"]
        bad = [
            ("forged", signed(700, FIELDS, OTHER_KEY), "MAC does not verify"),
            ("copied from transaction 699", signed(699, FIELDS),
             "MAC does not verify"),
            ("junk", b"{not json at all", "not of the form"),
            ("the 1.4 form", json.dumps(FIELDS).encode(), "not of the form"),
            ("upper-case MAC", upper_mac(signed(700, FIELDS)),
             "not of the form"),
            ("signed junk", signed(700, b"{not json"), "does not parse"),
            ("signed bad UTF-8", signed(700, b'"\xff"'), "does not parse"),
            ("signed array", signed(700, [FIELDS]), "not an object"),
            ("no key", signed(700, no_key), "field key"),
            ("id a number", signed(700, dict(FIELDS, id=1)), "field id"),
            ("headers a list", signed(700, dict(FIELDS, headers=[])),
             "field headers"),
            ("payload null", signed(700, dict(FIELDS, payload=None)),
             "field payload"),
        ]
        for what, content, reason in bad:
            with self.subTest(what):
                ob = self.outbox([begin(700),
                                  wal_message(content, lsn=0x12345678AB),
                                  wal_message(b"other", prefix=b"other"),
                                  commit(0x3000)])
                with self.assertLogs("dedup_relay", "WARNING") as logged:
                    self.assertEqual(ob.take(10), [])
                self.assertEqual(ob.skipped, 1)
                (line,) = logged.output
                self.assertIn("WARNING", line)
                self.assertIn("at 12/345678AB skipped", line)
                self.assertIn(reason, line)
                self.assertNotIn("SECRET", line)
                self.assertEqual(ob.cur.flushed, [0x3000],
                                 "its transaction's end confirmed")

    def test_not_transactional(self):
        for what, records, reason in [
                ("not transactional",
                 [wal_message(signed(700, FIELDS), transactional=False)],
                 "not transactional"),
                ("outside a transaction", [wal_message(signed(700, FIELDS))],
                 "outside a transaction")]:
            with self.subTest(what):
                ob = self.outbox(records + [begin(701), commit(0x4000)])
                with self.assertLogs("dedup_relay", "WARNING") as logged:
                    self.assertEqual(ob.take(10), [])
                self.assertIn(reason, logged.output[0])
                self.assertEqual((ob.skipped, ob.cur.flushed), (1, [0x4000]))


class WalDeadLetters(unittest.TestCase):
    """WAL mode: a message the broker keeps refusing is counted by the
    relay (the slot has no room for it) and, once
    dedup_outbox_refused_wal() answers that it is a dead letter, skipped
    when read again, so that its transaction is confirmed and the slot
    moves past it (guards a relay that would send it forever)."""

    def test_moved_aside(self):
        records = [begin(700), wal_message(signed(700, FIELDS)),
                   commit(0x3000)]
        ob = WalParser.outbox(self, list(records))
        ob.sql = FakeConnection([(False,), (True,)])
        ob.prefix = "dedup."
        ob.close = lambda: None
        (m,) = ob.take(10)
        for attempt, dead in ((1, False), (2, True)):
            with self.assertLogs("dedup_relay", "WARNING") as logged:
                relay.log.warning("attempt %d", attempt)
                ob.give_back([], [(m, NO_ROUTE)])
            sql, params = ob.sql.executed[-1]
            self.assertEqual(sql, "SELECT dedup.dedup_outbox_refused_wal("
                             "%s, %s, %s, %s, %s::jsonb, %s, %s, %s)")
            self.assertEqual(params, ("r", "id-1", "audit", "k1",
                                      '{"type": "t"}', "SECRET payload",
                                      attempt, NO_ROUTE))
            self.assertEqual(any("moved to dedup_outbox_dead_letters" in line
                                 for line in logged.output), dead)
        # read again from the slot: skipped, its transaction confirmed
        ob.txns, ob.current, ob.cur = [], None, FakeStream(records)
        self.assertEqual(ob.take(10), [])
        self.assertEqual(ob.cur.flushed, [0x3000])


class FakeCursor:
    def __init__(self, conn):
        self.conn = conn

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def execute(self, sql, params=None):
        self.conn.executed.append((sql, params))

    def fetchall(self):
        return self.conn.rows.pop(0)

    def fetchone(self):
        return self.conn.rows.pop(0)


class FakeConnection:
    """A database connection answering each query with the next of rows."""

    def __init__(self, rows):
        self.rows, self.executed = list(rows), []
        self.info = types.SimpleNamespace(dbname="shop")
        self.closed = False

    def cursor(self):
        return FakeCursor(self)


def row(seq, destination):
    """A row of dedup_outbox_lease()."""
    return (seq, "i%d" % seq, destination, None, None, "p")


class TableTake(unittest.TestCase):
    """Table mode: a destination the broker refuses is held back alone, the
    lease asking for the other destinations (dedup_outbox_lease's filter)."""

    def test_hold(self):
        ob = relay.TableOutbox(options())
        ob.prefix = "dedup."
        ob.conn = FakeConnection([
            [row(1, "q1"), row(2, "q9"), row(3, "q2")], [row(4, "q1")]])
        self.assertEqual([m.id for m in ob.take(10)], ["i1", "i2", "i3"])
        self.assertIsNone(ob.conn.executed[-1][1][3], "every destination")
        self.assertTrue(ob.hold("q9", 60))
        self.assertEqual([m.id for m in ob.take(10)], ["i4"])
        self.assertEqual(ob.conn.executed[-1][1][3], ["q1", "q2"])
        self.assertFalse(ob.drained(), "not drained while q9 is held")
        ob.hold("q1", 60)
        ob.hold("q2", 60)
        self.assertEqual(ob.take(10), [])
        self.assertEqual(len(ob.conn.executed), 2, "no lease: all are held")


class Options(unittest.TestCase):
    """The command line: --lease checked against --confirm-timeout (guards
    the lease check), --destination refused in WAL mode, the settings
    every session forces."""

    ARGS = ["--dsn", "dbname=shop", "--amqp", "amqp://localhost"]

    def refused(self, *args):
        with open(os.devnull, "w") as null, \
                unittest.mock.patch("sys.stderr", null):
            with self.assertRaises(SystemExit) as e:
                relay.options(self.ARGS + list(args))
        self.assertEqual(e.exception.code, 2)

    def test_lease(self):
        self.refused("--mode", "table", "--lease", "9",
                     "--confirm-timeout", "4")
        self.refused("--mode", "table", "--lease", "30")   # default 15
        opt = relay.options(self.ARGS + ["--mode", "table", "--lease", "10",
                                         "--confirm-timeout", "4"])
        self.assertEqual(opt.lease, 10)
        relay.options(self.ARGS + ["--mode", "table"])       # the defaults

    def test_wal_destination(self):
        self.refused("--mode", "wal", "--destination", "q1")

    def test_session_settings(self):
        opt = relay.options(
            ["--mode", "wal", "--amqp", "amqp://localhost", "--dsn",
             "dbname=shop options='-c work_mem=1MB -c search_path=evil'"])
        params = relay.psycopg2.extensions.parse_dsn(opt.dsn)
        self.assertEqual(params["dbname"], "shop")
        opts = params["options"]
        self.assertTrue(
            opts.startswith("-c work_mem=1MB -c search_path=evil "),
            "the user's own options first")
        self.assertIn(" -c search_path=pg_catalog,pg_temp ", opts)
        self.assertIn(" -c role=none ", opts)
        self.assertIn(" -c local_preload_libraries= ", opts)
        self.assertIn(" -c default_transaction_isolation=read\\ committed ",
                      opts)
        self.assertEqual(opts.count("-c "), 2 + len(relay.SESSION_SETTINGS))

    def test_pgoptions(self):
        with unittest.mock.patch.dict(os.environ, {"PGOPTIONS": "-c a.b=1"}):
            dsn = relay.session_dsn("dbname=shop")
        self.assertTrue(relay.psycopg2.extensions.parse_dsn(dsn)["options"]
                        .startswith("-c a.b=1 -c search_path="))


class Session(unittest.TestCase):
    """At connect: another role (a per-role SET role) or no dedup in the
    database stops the relay with one sentence."""

    def test_other_role(self):
        with self.assertRaisesRegex(relay.Fatal, "runs as role admin, not as "
                                    "relay, the role it logged in as"):
            relay.check_session(FakeConnection([("admin", "relay", 0)]))
        relay.check_session(FakeConnection([("relay", "relay", 0)]))

    def test_no_dedup(self):
        with self.assertRaisesRegex(relay.Fatal, "database shop has no "
                                    "extension dedup"):
            relay.dedup_schema(FakeConnection([None]), None)

    def test_old_dedup(self):
        with self.assertRaisesRegex(relay.Fatal, "database shop has dedup "
                                    "1.4; this relay needs 1.5 or later"):
            relay.dedup_schema(FakeConnection([("dedup", "1.4")]), None)
        with unittest.mock.patch.object(relay.psycopg2.extensions,
                                        "quote_ident",
                                        lambda name, conn: '"%s"' % name):
            self.assertEqual(relay.dedup_schema(
                FakeConnection([("dedup", "1.10")]), None), '"dedup".')


class TableGiveBack(unittest.TestCase):
    """Table mode: what the broker refused goes to dedup_outbox_refused()
    (which counts it towards the dead letters), with its reason; what was
    given back for order or an outage to dedup_outbox_release(), which
    counts nothing."""

    def test_refused_apart(self):
        ob = relay.TableOutbox(options())
        ob.prefix = "dedup."
        ob.conn = FakeConnection([(0,), (1,)])
        a1, a2, b1, b2 = (relay.Message(n, "i%d" % n, "q", None, None, "p")
                          for n in (1, 2, 3, 4))
        with self.assertLogs("dedup_relay", "WARNING") as logged:
            ob.give_back([a2], [(a1, NO_ROUTE), (b1, "nacked by the broker"),
                                (b2, NO_ROUTE)])
        self.assertEqual(ob.conn.executed, [
            ("SELECT dedup.dedup_outbox_release(%s, %s::bigint[])",
             ("r", [2])),
            ("SELECT dedup.dedup_outbox_refused(%s, %s::bigint[], %s)",
             ("r", [1, 4], NO_ROUTE)),
            ("SELECT dedup.dedup_outbox_refused(%s, %s::bigint[], %s)",
             ("r", [3], "nacked by the broker"))])
        self.assertEqual(len(logged.output), 1)
        self.assertIn("1 of 1 messages refused (nacked by the broker) moved "
                      "to dedup_outbox_dead_letters", logged.output[0])


if __name__ == "__main__":
    unittest.main()
