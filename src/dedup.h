/*-------------------------------------------------------------------------
 *
 * dedup.h
 *	  Declarations shared by the dedup extension's source files.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEDUP_H
#define DEDUP_H

#include "access/skey.h"
#include "datatype/timestamp.h"
#include "nodes/execnodes.h"
#include "nodes/pg_list.h"
#include "portability/instr_time.h"
#include "storage/latch.h"
#include "storage/lock.h"
#include "storage/lockdefs.h"
#include "storage/lwlock.h"
#include "utils/relcache.h"
#include "utils/timeout.h"
#include "utils/wait_event.h"

/*
 * Longest consumer name and message id a claim accepts, in bytes.  Both go
 * into one btree entry, which must stay well under the ~2.7kB btree limit;
 * longer ids should be hashed by the caller.
 */
#define DEDUP_MAX_CONSUMER_BYTES	256
#define DEDUP_MAX_MESSAGE_ID_BYTES	1024

/* Longest payload fingerprint a claim accepts: a SHA-512 digest. */
#define DEDUP_MAX_FINGERPRINT_BYTES	64

/*
 * Longest stream name a claim by offset accepts, in bytes: Kafka topic
 * names have at most 249 characters, RabbitMQ stream names 255 bytes.
 * Longer names should be hashed by the caller.
 */
#define DEDUP_MAX_STREAM_BYTES		256

/* Most message ids one dedup_claim_many() call accepts. */
#define DEDUP_MAX_BATCH_KEYS		10000

/* guc.c: the dedup.* parameters */
extern bool dedup_sweep_enabled;
extern int	dedup_retention;
extern int	dedup_sweep_interval;
extern int	dedup_sweep_batch_size;
extern int	dedup_sweep_max_duration;
extern int	dedup_sweep_batch_delay;
extern char *dedup_databases;
extern char *dedup_sweep_role;
extern int	dedup_max_databases;
extern bool dedup_track_claims;
extern int	dedup_max_consumers;
extern bool dedup_require_consumer_roles;
extern void dedup_define_gucs(void);

/*
 * relations.c: the extension's tables and the indexes the claim and the
 * sweep use, found through pg_extension and pg_depend, never by a name
 * resolved at run time.
 */
typedef struct DedupRelations
{
	Oid			extension;		/* pg_extension row of dedup */
	Oid			schema;			/* where it is installed */
	Oid			messages;		/* processed_messages */
	Oid			messages_key;	/* its (consumer_name, message_id) key */
	Oid			messages_time;	/* its (consumer_name, processed_at) index */
	AttrNumber	fingerprint_attnum; /* its fingerprint column (1.1), or 0 */
	Oid			retention;		/* dedup_retention */
	Oid			retention_key;	/* its (consumer_name) key */
	Oid			consumer_roles; /* dedup_consumer_roles (1.1), or invalid */
	Oid			consumer_roles_key; /* its (consumer_name, claimant) key */
	Oid			positions;		/* stream_positions (1.2), or invalid */
	Oid			positions_key;	/* its (consumer_name, stream, partition) key */
} DedupRelations;

typedef enum DedupTable
{
	DEDUP_MESSAGES,
	DEDUP_RETENTION,
	DEDUP_CONSUMER_ROLES,
	DEDUP_STREAM_POSITIONS
} DedupTable;

extern const DedupRelations *dedup_relations(bool missing_ok);

/* an index scan without instrumentation or ordering, on every version */
#if PG_VERSION_NUM >= 180000
#define dedup_index_beginscan(heap, index, snapshot, nkeys) \
	index_beginscan((heap), (index), (snapshot), NULL, (nkeys), 0)
#else
#define dedup_index_beginscan(heap, index, snapshot, nkeys) \
	index_beginscan((heap), (index), (snapshot), (nkeys), 0)
#endif
extern Relation dedup_table_open(DedupTable table, LOCKMODE lockmode,
								 bool missing_ok, const DedupRelations **rels);
extern void dedup_scan_key(ScanKey key, Relation index, AttrNumber attno,
						   StrategyNumber strategy, Datum value);

/*
 * sweeper_state.c: what the sweeper knows about each database, in shared
 * memory, under its own LWLock (tranche "dedup_sweeper_state").
 *
 * The launcher owns the schedule (next_sweep, failures, state) and marks a
 * sweep running; the per-database sweeper records its progress and outcome.
 * All fields are protected by DedupShared->lock.
 */
typedef enum DedupDatabaseState
{
	DEDUP_DB_UNKNOWN,			/* not probed yet: sweep it to find out */
	DEDUP_DB_ACTIVE				/* dedup is installed: swept on schedule */
} DedupDatabaseState;

typedef enum DedupSweepOutcome
{
	DEDUP_SWEEP_NONE,			/* never swept */
	DEDUP_SWEEP_RUNNING,		/* started, no outcome yet */
	DEDUP_SWEEP_FAILED,			/* error, or the sweeper died */
	DEDUP_SWEEP_DONE,			/* every expired row deleted */
	DEDUP_SWEEP_PARTIAL,		/* stopped early: time limit, DDL, a locked row */
	DEDUP_SWEEP_BLOCKED,		/* another session holds a lock it needs */
	DEDUP_SWEEP_NO_EXTENSION	/* dedup is not installed there */
} DedupSweepOutcome;

#define DEDUP_ERROR_LEN 256

typedef struct DedupDatabaseSlot
{
	Oid			dboid;			/* InvalidOid: free slot */
	DedupDatabaseState state;
	TimestampTz next_sweep;
	bool		woken;			/* dedup_sweeper_wake() since the sweep began */
	int			failures;		/* consecutive failed sweeps (back-off) */
	bool		connected;		/* the sweeper last started has connected */
	pid_t		sweeper_pid;	/* sweeping now, or 0 */
	DedupSweepOutcome last_outcome;
	TimestampTz last_start;
	TimestampTz last_end;
	int			blocked_sweeps; /* consecutive sweeps ended 'blocked' */
	int64		last_rows;
	int64		total_rows;
	TimestampTz last_error_at;
	char		last_error[DEDUP_ERROR_LEN];
} DedupDatabaseSlot;

typedef struct DedupSharedState
{
	LWLock	   *lock;
	pid_t		launcher_pid;	/* 0 when no launcher runs */
	Latch	   *launcher_latch;
	Oid			woken_untracked;	/* dedup_sweeper_wake() found no free slot */
	int			nslots;
	DedupDatabaseSlot slots[FLEXIBLE_ARRAY_MEMBER];
} DedupSharedState;

extern DedupSharedState *DedupShared;
extern void dedup_sweeper_shmem_request(void);
extern void dedup_sweeper_shmem_startup(void);
extern DedupDatabaseSlot *dedup_database_slot(Oid dboid, bool create);
extern void dedup_wake_launcher(void);
extern bool dedup_log_blocked(int blocked);

/*
 * claim_stats.c: per-consumer claim counters, in shared memory under their
 * own LWLock (tranche "dedup_claim_stats")
 */
typedef enum DedupClaimOutcome
{
	DEDUP_CLAIMED,				/* returned true */
	DEDUP_DUPLICATE,			/* returned false */
	/* raised an error, by class: see dedup_claim_failure() */
	DEDUP_SERIALIZATION_FAILURE,
	DEDUP_DEADLOCK,
	DEDUP_LOCK_TIMEOUT,
	DEDUP_CANCELED,
	DEDUP_OTHER_ERROR
} DedupClaimOutcome;

#define DEDUP_CLAIM_OUTCOMES (DEDUP_OTHER_ERROR + 1)

/*
 * What the claims of one call (one key, or a batch) add to their consumer's
 * counters: gathered in the backend key by key (dedup_stats_tally), added
 * to shared memory once per call (dedup_stats_flush).
 */
typedef struct DedupClaimTally
{
	int64		outcomes[DEDUP_CLAIM_OUTCOMES];
	int64		lock_waits;		/* claims that waited for a lock */
	double		claim_time;		/* ms, claims that got an answer */
	double		max_claim_time; /* ms, the longest of them */
	double		lock_wait_time; /* ms, claims that waited for a lock */
} DedupClaimTally;

extern void dedup_claim_stats_shmem_request(void);
extern void dedup_claim_stats_shmem_startup(void);
extern DedupClaimOutcome dedup_claim_failure(int sqlerrcode);
extern void dedup_stats_tally(DedupClaimTally *tally,
							  DedupClaimOutcome outcome, bool waited,
							  const instr_time *start);
extern void dedup_stats_flush(text *consumer, text *stream,
							  const DedupClaimTally *tally);

/* sweep.c: the retention rule, finding and deleting expired rows */
typedef struct DedupSweepTarget
{
	text	   *consumer;
	TimestampTz cutoff;			/* rows older than this are expired */
	TimestampTz resume;			/* rows older than this are done with */
} DedupSweepTarget;

/*
 * The sweep lock's tag: an advisory lock on (database, processed_messages,
 * "dedu", DEDUP_SWEEP_LOCK_TAG).  SQL's advisory lock functions only ever
 * use 1 or 2 in the last field, so no session can take it.
 */
#define DEDUP_SWEEP_LOCK_KEY 0x64656475
#define DEDUP_SWEEP_LOCK_TAG 0x6475

extern bool dedup_sweep_lock(Oid messages, bool wait);
extern void dedup_sweep_check_role(const DedupRelations *rels, Oid role);
extern List *dedup_sweep_targets(const DedupRelations *rels,
								 const char *only_consumer);
extern uint64 dedup_sweep_batch(const DedupRelations *rels,
								DedupSweepTarget *target, int batch_size);
extern uint64 dedup_delete_rows(const DedupRelations *rels, text *consumer,
								TimestampTz from, TimestampTz before,
								int limit, TimestampTz *last);

/*
 * audit.c: the audit trail, one LOG line per record deleted or stream
 * position moved on purpose and per window change; dedup_quote_literal
 * renders any untrusted string (names, ids) as a one-line SQL literal that
 * reads back as the original
 */
extern char *dedup_quote_literal(const char *str);
extern void dedup_audit_forget(text *consumer, text *message_id, bool found);
extern void dedup_audit_forget_since(text *consumer, TimestampTz since,
									 uint64 deleted);
extern void dedup_audit_sweep(text *consumer, TimestampTz cutoff,
							  uint64 deleted);
extern void dedup_audit_stream_position(text *consumer, text *stream,
										int32 partition, bool had_position,
										int64 previous, int64 next_offset);
extern void dedup_audit_forget_positions(text *consumer, text *stream,
										 uint64 deleted);

/*
 * claim.c: the claims, and what they share with records.c and
 * stream_offsets.c: the argument checks, the consumer -> role mapping
 * (dedup_consumer_roles), and the writer, which inserts a row into one of
 * the extension's tables as INSERT ... ON CONFLICT would (speculative
 * insertion, every unique index an arbiter), or finds the row it conflicts
 * with
 */
extern char *dedup_argument_description(const char *argname, int element);
extern void dedup_check_not_null(const char *function, const char *argname,
								 int element, bool isnull);
extern void dedup_check_key(const char *function, const char *argname,
							int element, Datum value, bool isnull,
							Size max_bytes);
extern void dedup_check_claimant(text *consumer, const char *function);

/* What a claim of one key found; the order of dedup_claim_status's labels */
typedef enum ClaimOutcome
{
	CLAIM_CLAIMED,				/* recorded now */
	CLAIM_DUPLICATE,			/* recorded before */
	CLAIM_IN_PROGRESS			/* another open transaction is at it */
} ClaimOutcome;

/*
 * What claims of one statement share: the executor state and the slots of
 * the speculative insertion into one table (rel, opened by the caller with
 * RowExclusiveLock).
 */
typedef struct ClaimWriter
{
	Relation	rel;
	EState	   *estate;
	ResultRelInfo *result_rel;
	Relation	key_index;		/* the table's key */
	List	   *indexes;		/* OIDs of all the table's indexes */
	bool		all_indexes_open;	/* or only the key, so far */
	int			natts;			/* its attributes, dropped ones included */
	AttrNumber	fingerprint_attnum; /* 0 before 1.1 (no fingerprint column) */
	TupleTableSlot *slot;		/* the row being inserted */
	TupleTableSlot *conflict_slot;	/* a row it conflicts with */
	MemoryContext caller_context;
} ClaimWriter;

extern void claim_writer_begin(ClaimWriter *writer, Relation rel,
							   Oid key_index, AttrNumber fingerprint_attnum);
extern void claim_writer_end(ClaimWriter *writer);
extern bool claim_writer_open_other_indexes(ClaimWriter *writer);
extern ClaimOutcome claim_writer_put(ClaimWriter *writer, bool wait,
									 ItemPointer conflict_tid);
extern void claim_check_visible(ClaimWriter *writer, TupleTableSlot *slot);

/*
 * Did this backend wait for a lock since get_timeout_start_time() returned
 * mark?  Every lock wait re-arms the deadlock timeout (ProcSleep), so a new
 * start time means it did: for a claim, nearly always for an in-flight claim
 * of the same key.
 */
static inline bool
claim_waited(TimestampTz mark)
{
	return get_timeout_start_time(DEADLOCK_TIMEOUT) != mark;
}

/*
 * launcher.c and sweeper.c: the background workers.  A wait of theirs has a
 * name of its own in pg_stat_activity on PG 17+ (registered once per
 * process, *event caches it); before, every extension wait is "Extension".
 */
static inline uint32
dedup_wait_event(const char *name, uint32 *event)
{
#if PG_VERSION_NUM >= 170000
	if (*event == 0)
		*event = WaitEventExtensionNew(name);
	return *event;
#else
	return PG_WAIT_EXTENSION;
#endif
}

extern int	dedup_lock_holder(const LockData *data, const LOCKTAG *tag,
							  LOCKMODE mode, int waiter);
extern void dedup_register_launcher(void);
extern PGDLLEXPORT void dedup_launcher_main(Datum main_arg);
extern PGDLLEXPORT void dedup_sweeper_main(Datum main_arg);

#endif							/* DEDUP_H */
