# dedup: PGXS build and test wiring.
#
#   make && make install        build and install (PG_CONFIG=... to choose a server)
#   make installcheck           regression, isolation and TAP tests against the
#                               installed extension; needs no running server:
#                               pg_regress and the isolation specs start their
#                               own temporary instance with test/dedup.conf, the
#                               TAP tests their own clusters (test/run.sh wraps
#                               it; see README.md)

MODULE_big = dedup
OBJS = \
	src/dedup.o \
	src/audit.o \
	src/guc.o \
	src/tables/relations.o \
	src/tables/tid_delete.o \
	src/stats/claim_stats.o \
	src/claim/claim.o \
	src/claim/claim_writer.o \
	src/claim/claimants.o \
	src/claim/entry.o \
	src/claim/heartbeat.o \
	src/claim/records.o \
	src/streams/stream_offsets.o \
	src/streams/stream_positions.o \
	src/citus/citus.o \
	src/citus/registry.o \
	src/citus/routed_plan.o \
	src/citus/colocated.o \
	src/citus/colocated_ddl.o \
	src/citus/colocated_sweep.o \
	src/retention/rule.o \
	src/retention/sweep.o \
	src/retention/storage.o \
	src/sweeper/sweep_pace.o \
	src/sweeper/sweep_vacuum.o \
	src/sweeper/sweeper_state.o \
	src/sweeper/launcher.o \
	src/sweeper/sweeper.o \
	src/outbox/origin.o \
	src/outbox/publish.o \
	src/outbox/maintain.o

EXTENSION = dedup
# the current version's script (a fresh install), 1.0's and the updates
# (older versions, and every database on one)
DATA = sql/dedup--1.5.sql sql/dedup--1.0.sql \
	sql/dedup--1.0--1.1.sql sql/dedup--1.1--1.2.sql sql/dedup--1.2--1.3.sql \
	sql/dedup--1.3--1.4.sql sql/dedup--1.4--1.5.sql
DOCS = doc/use.md doc/streams.md doc/operations.md doc/citus.md \
	doc/security.md doc/reference.md doc/performance.md doc/outbox.md
PGFILEDESC = "dedup - transactional message deduplication"
# the outbox's relay (python3), installed into the server's bindir
SCRIPTS = src/relay/dedup_relay

REGRESS = install_lookalikes claim claim_many try_claim records claim_errors claim_security schema_swap table_tampering table_arbiters claimants retention retention_windows stats consumer_storage stream_claim stream_security stream_stats colocated outbox

ISOLATION = claim-read-committed claim-repeatable-read claim-serializable \
	claim-savepoint claim-three-sessions claim-counters claim-many try-claim \
	sweep-lock claimant-map try-claim-arbiters \
	stream-read-committed stream-repeatable-read stream-rebalance \
	claim-invalidation forget-beside-claim outbox-lease outbox-destinations
ISOLATION_OPTS = --inputdir=test/isolation --load-extension=dedup

TAP_TESTS = 1
PROVE_TESTS = test/t/*.pl

PG_CPPFLAGS = -I$(srcdir)/src

# make installcheck needs no running server: pg_regress and the isolation
# specs each start a temporary instance configured by test/dedup.conf
REGRESS_OPTS += --temp-instance=./tmp_check_regress --temp-config=$(srcdir)/test/dedup.conf
ISOLATION_OPTS += --temp-instance=./tmp_check_iso --temp-config=$(srcdir)/test/dedup.conf
EXTRA_CLEAN = tmp_check_regress/ tmp_check_iso/ tmp_initdb_template/

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# the manual goes to a folder of its own, doc/extension/dedup/, not among
# other extensions' files; PGXS's uninstall misses files named with a
# folder, so it is removed here
docmoduledir = extension/dedup
uninstall: uninstall-manual
.PHONY: uninstall-manual
uninstall-manual:
	rm -rf '$(DESTDIR)$(docdir)/$(docmoduledir)'

# the TAP tests' nodes copy one cluster made by initdb at the start instead
# of each running initdb, as PostgreSQL's own "make check" does (17 and
# later do it themselves when INITDB_TEMPLATE is set; test/perl/DedupNode.pm
# does it on 15)
ifneq ($(TAP_TESTS),)
export INITDB_TEMPLATE = $(CURDIR)/tmp_initdb_template
installcheck: initdb-template
.PHONY: initdb-template
initdb-template:
	rm -rf '$(INITDB_TEMPLATE)'
	'$(bindir)/initdb' -D '$(INITDB_TEMPLATE)' -A trust -N --no-instructions >/dev/null
endif
