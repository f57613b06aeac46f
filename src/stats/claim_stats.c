/*-------------------------------------------------------------------------
 *
 * claim_stats.c
 *	  Per-consumer claim counters in shared memory: claims, duplicates, lock
 *	  waits, failed claims by class of error, claim and lock-wait times, for
 *	  the dedup_stats view; the classes of errors (dedup_claim_failure); and
 *	  the SQL functions that read them (dedup_claim_counters and
 *	  dedup_claim_counters_1_1, dedup_counters_status) or reset them
 *	  (dedup_stats_reset).
 *
 * One hash entry per (database, consumer), created by the first claim, with
 * its counters under a spinlock; the table itself under this file's own
 * LWLock (tranche "dedup_claim_stats"), taken shared on the claim path and
 * exclusively only to add or remove entries.  A call tallies its claims in
 * the backend and takes the locks once, however many keys it claimed
 * (dedup_stats_tally, dedup_stats_flush).  The table has a fixed size,
 * dedup.max_consumers entries, allocated at startup, so that no number of
 * consumers can take shared memory that the rest of the server (the lock
 * table, say) needs.  A consumer that finds it full makes room as
 * pg_stat_statements does: the least used entries, in all databases, are
 * evicted (stats_evict), so that consumers that claim for a moment --
 * junk names claimed in one database, say -- cannot keep the busy ones of
 * every database from being counted.  Usage counts calls, not keys, and
 * decays at every eviction, so that neither one huge batch nor a consumer
 * long gone outweighs a consumer that keeps claiming.  How many entries
 * were evicted is counted.
 * The counters are written to pg_stat/dedup.stat at a clean shutdown and
 * read back at startup, so they survive a clean restart.  After a crash or
 * an immediate shutdown, which are followed by crash recovery, they start
 * from zero, as PostgreSQL's own statistics do: the control file tells the
 * two apart when the postmaster exits (the file is also removed once read).
 * That counters were lost is logged at the next start, or at the
 * reinitialization of shared memory that follows a crash: from the moment
 * the counters live in shared memory until a clean shutdown has saved them,
 * a marker file, pg_stat/dedup.live, says so.
 *
 * Counted are claims of keys (one per dedup_claim() call, one per element
 * of a dedup_claim_many() batch), whatever their transaction does later: a
 * claim whose transaction rolls back still counts, as its redelivery will.
 * Each is counted with its outcome -- an answer, or the class of the error
 * it raised (dedup_claim_failure) -- and, when it was timed, its duration:
 * claim times are those of the keys that got an answer, so that the mean
 * of a batch's keys compares with that of single claims; the lock-wait time
 * is the whole duration of the claims that waited for a lock, answered or
 * failed.
 *
 * The SQL definition of dedup_claim_counters() changed in 1.1 (more
 * columns): both C entry points are served by one function, told which
 * version of the result its caller's definition has, which checks that the
 * tuple descriptor it is given has that version's columns.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/stat.h>
#include <unistd.h>

#include "access/xact.h"
#include "catalog/pg_control.h"
#include "commands/dbcommands.h"
#include "common/controldata_utils.h"
#include "common/hashfn.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"

#include "audit.h"
#include "guc.h"
#include "keys.h"
#include "stats/claim_stats.h"

PG_FUNCTION_INFO_V1(dedup_claim_counters);
PG_FUNCTION_INFO_V1(dedup_claim_counters_1_1);
PG_FUNCTION_INFO_V1(dedup_stream_counters);
PG_FUNCTION_INFO_V1(dedup_counters_status);
PG_FUNCTION_INFO_V1(dedup_stats_reset);

#define STATS_TRANCHE	"dedup_claim_stats"
#define STATS_FILE		PGSTAT_STAT_PERMANENT_DIRECTORY "/dedup.stat"
#define STATS_FILE_TMP	STATS_FILE ".tmp"
#define STATS_MARKER	PGSTAT_STAT_PERMANENT_DIRECTORY "/dedup.live"
#define STATS_FILE_MAGIC 0x64656475 /* "dedu" */
#define STATS_FILE_VERSION 6
#define STATS_FILE_VERSION_5 5	/* still read: see stats_load() */
#define STATS_FILE_VERSION_4 4
#define STATS_FILE_VERSION_3 3

/* a full table evicts this share of its entries, at least one */
#define STATS_EVICT_PERCENT 5
/* what each eviction leaves of every entry's usage, as pg_stat_statements */
#define STATS_USAGE_DECAY 0.99

/*
 * A consumer's counters, or, for claims by offset, those of one stream the
 * consumer reads (stream not empty) as well.  A claim by offset counts in
 * both: the consumer's entry is its dedup_stats row, evicted and started
 * again as a whole (one counters_since), never a sum of stream entries
 * that could each be evicted on their own.
 */
typedef struct StatsKey
{
	Oid			dboid;
	char		consumer[DEDUP_MAX_CONSUMER_BYTES + 1];
	char		stream[DEDUP_MAX_STREAM_BYTES + 1];
} StatsKey;

/* the key of version 3 and 4 files: no stream */
typedef struct StatsKeyV4
{
	Oid			dboid;
	char		consumer[DEDUP_MAX_CONSUMER_BYTES + 1];
} StatsKeyV4;

typedef struct StatsCounters
{
	int64		claims;			/* claims that returned true */
	int64		duplicates;		/* claims that returned false */
	int64		lock_waits;		/* claims that waited for a lock */
	int64		serialization_failures; /* claims that raised 40001 */
	int64		deadlocks;		/* 40P01 */
	int64		lock_timeouts;	/* 55P03 */
	int64		cancels;		/* 57014 */
	int64		other_errors;	/* any other error */
	double		claim_time;		/* ms, claims and duplicates */
	double		max_claim_time; /* ms, the longest of them */
	double		lock_wait_time; /* ms, claims that waited for a lock */
	TimestampTz last_claim;
	TimestampTz last_duplicate;
	TimestampTz since;			/* when counting started */
	/* the entries of version 3 files are the fields before this one */
	TimestampTz last_activity;	/* the last claim of any outcome */
	/* last: the entries of version 4 and 5 files are the fields before it */
	double		usage;			/* calls, decayed by evictions: stats_evict() */
} StatsCounters;

typedef struct StatsEntry
{
	StatsKey	key;			/* hash key: must be first */
	slock_t		mutex;			/* protects counters */
	StatsCounters counters;
} StatsEntry;

/* an entry that stats_evict() may evict, and how much it was used */
typedef struct StatsVictim
{
	StatsEntry *entry;
	double		usage;			/* its counters' usage */
	TimestampTz last_activity;
} StatsVictim;

/* beside the table */
typedef struct StatsShared
{
	LWLock	   *lock;			/* protects the table's membership */
	pg_atomic_uint64 evicted;	/* entries evicted to make room */
	pg_atomic_flag eviction_logged; /* an eviction has been logged */
	/* stats_evict()'s candidates: used only under the exclusive lock */
	StatsVictim victims[FLEXIBLE_ARRAY_MEMBER];
} StatsShared;

static StatsShared *stats_shared = NULL;
static HTAB *stats_hash = NULL;

/* Only the bytes of the names count: the rest of the key buffer is junk. */
static uint32
stats_key_hash(const void *key, Size keysize)
{
	const StatsKey *k = key;

	return hash_combine(hash_bytes((const unsigned char *) k->consumer,
								   strlen(k->consumer)) ^ k->dboid,
						hash_bytes((const unsigned char *) k->stream,
								   strlen(k->stream)));
}

static int
stats_key_compare(const void *key1, const void *key2, Size keysize)
{
	const StatsKey *k1 = key1;
	const StatsKey *k2 = key2;

	if (k1->dboid != k2->dboid)
		return 1;
	return strcmp(k1->consumer, k2->consumer) != 0 ||
		strcmp(k1->stream, k2->stream) != 0;
}

static void *
stats_key_copy(void *dest, const void *src, Size keysize)
{
	StatsKey   *d = dest;
	const StatsKey *s = src;

	d->dboid = s->dboid;
	strlcpy(d->consumer, s->consumer, sizeof(d->consumer));
	strlcpy(d->stream, s->stream, sizeof(d->stream));
	return dest;
}

/* how many entries a full table evicts at once */
static int
stats_victims_max(void)
{
	return Max(1, dedup_max_consumers * STATS_EVICT_PERCENT / 100);
}

static Size
stats_shared_size(void)
{
	return add_size(offsetof(StatsShared, victims),
					mul_size(stats_victims_max(), sizeof(StatsVictim)));
}

static Size
stats_shmem_size(void)
{
	return add_size(MAXALIGN(stats_shared_size()),
					hash_estimate_size(dedup_max_consumers, sizeof(StatsEntry)));
}

/* shmem_request_hook part: reserve what dedup_claim_stats_shmem_startup uses */
void
dedup_claim_stats_shmem_request(void)
{
	RequestAddinShmemSpace(stats_shmem_size());
	RequestNamedLWLockTranche(STATS_TRANCHE, 1);
}

/*
 * Whether the control file says that the server was shut down cleanly (at
 * startup: last time; at exit: now).  After a crash, or an immediate
 * shutdown, it does not, and crash recovery follows.
 */
static bool
stats_shut_down_cleanly(void)
{
	bool		crc_ok;
	ControlFileData *control = get_controlfile(DataDir, &crc_ok);
	bool		clean = crc_ok &&
	(control->state == DB_SHUTDOWNED ||
	 control->state == DB_SHUTDOWNED_IN_RECOVERY);

	pfree(control);
	return clean;
}

/*
 * Write the counters to STATS_FILE at a clean shutdown, and remove
 * STATS_MARKER: on_shmem_exit of the postmaster.  At any other exit, and
 * before shared memory is reinitialized after a crash, leave the marker.
 */
static void
stats_save(int code, Datum arg)
{
	HASH_SEQ_STATUS scan;
	StatsEntry *entry;
	FILE	   *file;
	uint32		header[2] = {STATS_FILE_MAGIC, STATS_FILE_VERSION};
	uint64		evicted = pg_atomic_read_u64(&stats_shared->evicted);
	int64		count = hash_get_num_entries(stats_hash);

	/* counters that may have missed updates are not kept */
	if (!stats_shut_down_cleanly())
		return;

	file = AllocateFile(STATS_FILE_TMP, PG_BINARY_W);
	if (file == NULL)
		goto error;
	if (fwrite(header, sizeof(header), 1, file) != 1 ||
		fwrite(&evicted, sizeof(evicted), 1, file) != 1 ||
		fwrite(&count, sizeof(count), 1, file) != 1)
		goto error;
	hash_seq_init(&scan, stats_hash);
	while ((entry = hash_seq_search(&scan)) != NULL)
	{
		if (fwrite(&entry->key, sizeof(StatsKey), 1, file) != 1 ||
			fwrite(&entry->counters, sizeof(StatsCounters), 1, file) != 1)
		{
			hash_seq_term(&scan);
			goto error;
		}
	}
	if (FreeFile(file))
	{
		file = NULL;
		goto error;
	}
	(void) durable_rename(STATS_FILE_TMP, STATS_FILE, LOG);
	(void) durable_unlink(STATS_MARKER, LOG);
	return;

error:
	ereport(LOG,
			(errcode_for_file_access(),
			 errmsg("could not write file \"%s\": %m", STATS_FILE_TMP)));
	if (file)
		FreeFile(file);
	unlink(STATS_FILE_TMP);
	/* the failure is logged: the next start has nothing more to say */
	(void) durable_unlink(STATS_MARKER, LOG);
}

/*
 * Whether counters were lost since the last start: STATS_MARKER, which
 * stats_mark_live() created then, is still there (a crash, an immediate
 * shutdown), or a file of counters was left by a server that was not shut
 * down cleanly (older versions wrote one then).  Removes the marker.
 */
static bool
stats_were_lost(void)
{
	struct stat st;
	bool		lost = false;

	if (stat(STATS_MARKER, &st) == 0)
	{
		lost = true;
		unlink(STATS_MARKER);
	}
	else if (stat(STATS_FILE, &st) == 0)
		lost = !stats_shut_down_cleanly();
	return lost;
}

/*
 * Create STATS_MARKER, durably: from now on the counters live in shared
 * memory only, until stats_save() writes them.
 */
static void
stats_mark_live(void)
{
	FILE	   *file = AllocateFile(STATS_MARKER, PG_BINARY_W);

	if (file == NULL || FreeFile(file) != 0 ||
		fsync_fname_ext(STATS_MARKER, false, false, LOG) != 0 ||
		fsync_fname_ext(PGSTAT_STAT_PERMANENT_DIRECTORY, true, false, LOG) != 0)
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("could not create file \"%s\": %m", STATS_MARKER),
				 errdetail("A loss of dedup claim counters in a crash will not be logged.")));
}

/*
 * Read the counters a clean shutdown left, then remove the file; after a
 * crash (stats_were_lost(), which is logged), or when an older version of
 * dedup wrote it in another format, remove it unread.  Files of versions 3 to 5 (dedup 1.1, 1.2 before
 * streams, 1.2) are read too: their entries end before usage, and each
 * starts with the usage of one call; the keys of versions 3 and 4 end
 * before stream (none).  Where later versions have the number of evicted
 * entries, version 3 has a total of claims not counted, which is dropped,
 * and its entries end before last_activity, which starts as their latest
 * time.
 */
static void
stats_load(void)
{
	FILE	   *file;
	uint32		header[2];
	uint64		evicted;
	int64		count;
	int64		restored;
	size_t		counters_size;

	if (stats_were_lost())
	{
		ereport(LOG,
				(errcode(ERRCODE_SUCCESSFUL_COMPLETION),
				 errmsg("dedup claim counters start from zero after crash recovery")));
		unlink(STATS_FILE);
		return;
	}
	file = AllocateFile(STATS_FILE, PG_BINARY_R);
	if (file == NULL)
	{
		if (errno != ENOENT)
			goto error;
		return;
	}
	if (fread(header, sizeof(header), 1, file) != 1)
		goto error;
	if (header[0] != STATS_FILE_MAGIC ||
		header[1] < STATS_FILE_VERSION_3 || header[1] > STATS_FILE_VERSION)
	{
		ereport(LOG,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("dedup claim counters start from zero: file \"%s\" is in another format",
						STATS_FILE),
				 header[0] == STATS_FILE_MAGIC ?
				 errdetail("Its format version is %u; this version of dedup reads versions %u to %u.",
						   header[1], STATS_FILE_VERSION_3, STATS_FILE_VERSION) :
				 errdetail("It is not a file of dedup claim counters.")));
		goto out;
	}
	if (fread(&evicted, sizeof(evicted), 1, file) != 1 ||
		fread(&count, sizeof(count), 1, file) != 1)
		goto error;
	if (header[1] != STATS_FILE_VERSION_3)
		pg_atomic_write_u64(&stats_shared->evicted, evicted);
	if (header[1] == STATS_FILE_VERSION)
		counters_size = sizeof(StatsCounters);
	else if (header[1] == STATS_FILE_VERSION_3)
		counters_size = offsetof(StatsCounters, last_activity);
	else
		counters_size = offsetof(StatsCounters, usage);
	for (restored = 0; restored < count; restored++)
	{
		StatsKey	key;
		StatsKeyV4	old_key;
		StatsCounters counters;
		StatsEntry *entry;

		if (header[1] >= STATS_FILE_VERSION_5)
		{
			if (fread(&key, sizeof(key), 1, file) != 1)
				goto error;
		}
		else
		{
			if (fread(&old_key, sizeof(old_key), 1, file) != 1)
				goto error;
			key.dboid = old_key.dboid;
			memcpy(key.consumer, old_key.consumer, sizeof(key.consumer));
			key.stream[0] = '\0';
		}
		if (fread(&counters, counters_size, 1, file) != 1)
			goto error;
		key.consumer[DEDUP_MAX_CONSUMER_BYTES] = '\0';
		key.stream[DEDUP_MAX_STREAM_BYTES] = '\0';
		if (header[1] == STATS_FILE_VERSION_3)
			counters.last_activity = Max(counters.since,
										 Max(counters.last_claim,
											 counters.last_duplicate));
		if (header[1] != STATS_FILE_VERSION)
			counters.usage = 1.0;
		entry = hash_search(stats_hash, &key, HASH_ENTER_NULL, NULL);
		if (entry == NULL)
			break;
		SpinLockInit(&entry->mutex);
		entry->counters = counters;
	}
	if (restored < count)
		ereport(LOG,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg_plural("dedup: the counters of %lld consumer were not restored",
							   "dedup: the counters of %lld consumers were not restored",
							   count - restored,
							   (long long) (count - restored)),
				 errdetail("dedup.max_consumers is %d.", dedup_max_consumers)));
	goto out;

error:
	ereport(LOG,
			(errcode_for_file_access(),
			 errmsg("could not read file \"%s\", claim counters start from zero",
					STATS_FILE)));
out:
	if (file)
		FreeFile(file);
	unlink(STATS_FILE);
}

/* shmem_startup_hook part: create or attach to the counters */
void
dedup_claim_stats_shmem_startup(void)
{
	HASHCTL		info;
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	stats_shared = ShmemInitStruct("dedup claim stats", stats_shared_size(),
								   &found);
	if (!found)
	{
		stats_shared->lock = &(GetNamedLWLockTranche(STATS_TRANCHE))->lock;
		pg_atomic_init_u64(&stats_shared->evicted, 0);
		pg_atomic_init_flag(&stats_shared->eviction_logged);
	}
	info.keysize = sizeof(StatsKey);
	info.entrysize = sizeof(StatsEntry);
	info.hash = stats_key_hash;
	info.match = stats_key_compare;
	info.keycopy = stats_key_copy;
	stats_hash = ShmemInitHash("dedup claim stats hash",
							   dedup_max_consumers, dedup_max_consumers,
							   &info,
							   HASH_ELEM | HASH_FUNCTION | HASH_COMPARE |
							   HASH_KEYCOPY | HASH_FIXED_SIZE);

	/*
	 * The postmaster loads the counters, and saves them at exit: at startup,
	 * and again when it reinitializes shared memory after a crash
	 */
	if (!IsUnderPostmaster)
	{
		stats_load();
		stats_mark_live();
		on_shmem_exit(stats_save, (Datum) 0);
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * The class of the error (SQLSTATE sqlerrcode) that a claim raised, each
 * one a different thing for a DBA to do: retry the transaction
 * (serialization failure), order the application's locks (deadlock), look
 * for the long transaction holding the same key (lock timeout, cancel: the
 * statement_timeout or a pg_cancel_backend() fired during the claim), or
 * read the server log (anything else, such as out of shared memory).
 */
DedupClaimOutcome
dedup_claim_failure(int sqlerrcode)
{
	switch (sqlerrcode)
	{
		case ERRCODE_T_R_SERIALIZATION_FAILURE:
			return DEDUP_SERIALIZATION_FAILURE;
		case ERRCODE_T_R_DEADLOCK_DETECTED:
			return DEDUP_DEADLOCK;
		case ERRCODE_LOCK_NOT_AVAILABLE:
			return DEDUP_LOCK_TIMEOUT;
		case ERRCODE_QUERY_CANCELED:
			return DEDUP_CANCELED;
		default:
			return DEDUP_OTHER_ERROR;
	}
}

/* whether a claim got an answer (true or false), rather than an error */
static inline bool
outcome_answered(DedupClaimOutcome outcome)
{
	return outcome == DEDUP_CLAIMED || outcome == DEDUP_DUPLICATE;
}

/* whether a was used less than b: less usage, or as much but earlier */
static inline bool
victim_less_used(const StatsVictim *a, const StatsVictim *b)
{
	if (a->usage != b->usage)
		return a->usage < b->usage;
	return a->last_activity < b->last_activity;
}

/*
 * Sift victims[i] down the max-heap victims[0 .. n - 1], whose root is the
 * most used of the candidates, the first to give way to a less used one.
 */
static void
victims_sift_down(StatsVictim *victims, int n, int i)
{
	for (;;)
	{
		int			most = i;
		int			child = 2 * i + 1;
		StatsVictim swap;

		if (child < n && victim_less_used(&victims[most], &victims[child]))
			most = child;
		if (child + 1 < n && victim_less_used(&victims[most], &victims[child + 1]))
			most = child + 1;
		if (most == i)
			return;
		swap = victims[i];
		victims[i] = victims[most];
		victims[most] = swap;
		i = most;
	}
}

/*
 * Make room in the full table: decay the usage of every entry (by
 * STATS_USAGE_DECAY), then evict the STATS_EVICT_PERCENT least used
 * (at least one), in all databases -- least usage first, the least
 * recently active first among equals -- and return how many.  An entry's
 * usage is its calls, each older one weighing less by every eviction since
 * (so the calls of a consumer that stopped fade), however many keys each
 * claimed: one call of a huge batch weighs no more than one single claim.
 * The caller holds the table's lock exclusively, so no counter changes
 * meanwhile and they are read and written without their spinlocks.  The
 * candidates are kept in shared memory, not allocated: this also runs on
 * the error path of a failed claim.
 */
static int
stats_evict(void)
{
	StatsVictim *victims = stats_shared->victims;
	int			nvictims = stats_victims_max();
	int			n = 0;
	HASH_SEQ_STATUS scan;
	StatsEntry *entry;

	Assert(LWLockHeldByMeInMode(stats_shared->lock, LW_EXCLUSIVE));

	hash_seq_init(&scan, stats_hash);
	while ((entry = hash_seq_search(&scan)) != NULL)
	{
		StatsVictim candidate;

		entry->counters.usage *= STATS_USAGE_DECAY;
		candidate.entry = entry;
		candidate.usage = entry->counters.usage;
		candidate.last_activity = entry->counters.last_activity;
		if (n < nvictims)
		{
			victims[n++] = candidate;
			if (n == nvictims)
				for (int i = n / 2 - 1; i >= 0; i--)
					victims_sift_down(victims, n, i);
		}
		else if (victim_less_used(&candidate, &victims[0]))
		{
			victims[0] = candidate;
			victims_sift_down(victims, n, 0);
		}
	}
	for (int i = 0; i < n; i++)
		hash_search(stats_hash, &victims[i].entry->key, HASH_REMOVE, NULL);
	pg_atomic_fetch_add_u64(&stats_shared->evicted, n);
	return n;
}

/*
 * The first eviction since startup (or the last dedup_stats_reset()) is
 * logged, naming the consumer that needed room and its database -- but not
 * from the error path of a failed claim (answered is false), where no
 * catalog may be read: the next eviction is logged instead.
 */
static void
stats_log_eviction(const StatsKey *key, int evicted, bool answered)
{
	if (!answered || !pg_atomic_test_set_flag(&stats_shared->eviction_logged))
		return;
	ereport(LOG,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg_plural("dedup claim counters are full: the counters of %d least used consumer were evicted to count consumer %s in database %s",
						   "dedup claim counters are full: the counters of %d least used consumers were evicted to count consumer %s in database %s",
						   evicted,
						   evicted, dedup_quote_literal(key->consumer),
						   dedup_quote_literal(get_database_name(key->dboid))),
			 errdetail("All %d entries (dedup.max_consumers) were in use, in all databases; each consumer without one evicts the least used: fewest calls, older ones weighing less, then least recently active.",
					   dedup_max_consumers),
			 errhint("Raise dedup.max_consumers.")));
}

/*
 * Add one claim to *tally: its outcome, whether it waited for a lock, and
 * its duration since *start (set by the caller only when
 * dedup.track_claims is on, and read only then).
 */
void
dedup_stats_tally(DedupClaimTally *tally, DedupClaimOutcome outcome,
				  bool waited, const instr_time *start)
{
	instr_time	duration;
	double		ms;

	if (stats_hash == NULL || !dedup_track_claims)
		return;

	INSTR_TIME_SET_CURRENT(duration);
	INSTR_TIME_SUBTRACT(duration, *start);
	ms = INSTR_TIME_GET_MILLISEC(duration);

	tally->outcomes[outcome]++;
	if (outcome_answered(outcome))
	{
		tally->claim_time += ms;
		tally->max_claim_time = Max(tally->max_claim_time, ms);
	}
	if (waited)
	{
		tally->lock_waits++;
		tally->lock_wait_time += ms;
	}
}

/*
 * Add *tally to the counters of consumer (in the current database) --
 * with stream, to those of consumer's claims by offset in that stream --
 * under the table's lock and the entry's spinlock, once for all the claims
 * of a call.  A consumer that finds the table full (dedup.max_consumers)
 * evicts the least used entries to get one.
 */
void
dedup_stats_flush(text *consumer, text *stream, const DedupClaimTally *tally)
{
	StatsKey	key;
	StatsEntry *entry;
	TimestampTz now;
	int64		claims = 0;
	bool		answered;
	int			evicted = 0;

	for (int i = 0; i < DEDUP_CLAIM_OUTCOMES; i++)
		claims += tally->outcomes[i];
	if (stats_hash == NULL || claims == 0)
		return;
	answered = tally->outcomes[DEDUP_CLAIMED] + tally->outcomes[DEDUP_DUPLICATE] == claims;
	now = GetCurrentStatementStartTimestamp();

	key.dboid = MyDatabaseId;
	text_to_cstring_buffer(consumer, key.consumer, sizeof(key.consumer));
	key.stream[0] = '\0';
	if (stream != NULL)
		text_to_cstring_buffer(stream, key.stream, sizeof(key.stream));

	LWLockAcquire(stats_shared->lock, LW_SHARED);
	entry = hash_search(stats_hash, &key, HASH_FIND, NULL);
	if (entry == NULL)
	{
		bool		found;

		LWLockRelease(stats_shared->lock);
		LWLockAcquire(stats_shared->lock, LW_EXCLUSIVE);
		entry = hash_search(stats_hash, &key, HASH_ENTER_NULL, &found);
		if (entry == NULL)
		{
			/* full: HASH_FIXED_SIZE reuses what the evicted entries free */
			evicted = stats_evict();
			entry = hash_search(stats_hash, &key, HASH_ENTER, &found);
		}
		if (!found)
		{
			SpinLockInit(&entry->mutex);
			memset(&entry->counters, 0, sizeof(StatsCounters));
			entry->counters.since = now;
		}
	}

	SpinLockAcquire(&entry->mutex);
	entry->counters.claims += tally->outcomes[DEDUP_CLAIMED];
	entry->counters.duplicates += tally->outcomes[DEDUP_DUPLICATE];
	entry->counters.serialization_failures += tally->outcomes[DEDUP_SERIALIZATION_FAILURE];
	entry->counters.deadlocks += tally->outcomes[DEDUP_DEADLOCK];
	entry->counters.lock_timeouts += tally->outcomes[DEDUP_LOCK_TIMEOUT];
	entry->counters.cancels += tally->outcomes[DEDUP_CANCELED];
	entry->counters.other_errors += tally->outcomes[DEDUP_OTHER_ERROR];
	if (tally->outcomes[DEDUP_CLAIMED] > 0)
		entry->counters.last_claim = now;
	if (tally->outcomes[DEDUP_DUPLICATE] > 0)
		entry->counters.last_duplicate = now;
	entry->counters.claim_time += tally->claim_time;
	entry->counters.max_claim_time = Max(entry->counters.max_claim_time,
										 tally->max_claim_time);
	entry->counters.lock_waits += tally->lock_waits;
	entry->counters.lock_wait_time += tally->lock_wait_time;
	entry->counters.last_activity = now;
	entry->counters.usage += 1.0;
	SpinLockRelease(&entry->mutex);
	LWLockRelease(stats_shared->lock);

	if (evicted > 0)
		stats_log_eviction(&key, evicted, answered);
}

/*
 * The versions of dedup_claim_counters()'s SQL definition, and the number of
 * columns of each: 1.0 (dedup_claim_counters), 1.1 (dedup_claim_counters_1_1:
 * deadlocks and the other error classes apart, times); and the counters of
 * claims by offset per stream (dedup_stream_counters, 1.2): the columns of
 * 1.1, then the stream.
 */
typedef enum CountersVersion
{
	COUNTERS_V1_0,
	COUNTERS_V1_1,
	COUNTERS_STREAMS
} CountersVersion;

static const int counters_cols[] = {8, 15, 16};

#define COUNTERS_COLS		16	/* the most of any version */

/*
 * dedup_claim_counters() RETURNS SETOF record: the counters of every
 * consumer of the current database, in the columns of version of the SQL
 * definition (COUNTERS_STREAMS: of every consumer and stream it claims by
 * offset in).  No rows when not preloaded.  1.0 counted deadlocks as
 * serialization failures, and still sees them so.
 */
static void
claim_counters(FunctionCallInfo fcinfo, CountersVersion version)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	HASH_SEQ_STATUS scan;
	StatsEntry *entry;

	InitMaterializedSRF(fcinfo, 0);
	if (rsinfo->setDesc->natts != counters_cols[version])
		elog(ERROR, "incorrect number of output arguments");
	if (stats_hash == NULL)
		return;

	LWLockAcquire(stats_shared->lock, LW_SHARED);
	hash_seq_init(&scan, stats_hash);
	while ((entry = hash_seq_search(&scan)) != NULL)
	{
		Datum		values[COUNTERS_COLS];
		bool		nulls[COUNTERS_COLS] = {0};
		StatsCounters c;

		if (entry->key.dboid != MyDatabaseId ||
			(entry->key.stream[0] != '\0') != (version == COUNTERS_STREAMS))
			continue;
		SpinLockAcquire(&entry->mutex);
		c = entry->counters;
		SpinLockRelease(&entry->mutex);

		values[0] = CStringGetTextDatum(entry->key.consumer);
		values[1] = Int64GetDatum(c.claims);
		values[2] = Int64GetDatum(c.duplicates);
		values[3] = Int64GetDatum(c.lock_waits);
		values[4] = Int64GetDatum(c.serialization_failures +
								  (version == COUNTERS_V1_0 ? c.deadlocks : 0));
		values[5] = TimestampTzGetDatum(c.last_claim);
		nulls[5] = (c.last_claim == 0);
		values[6] = TimestampTzGetDatum(c.last_duplicate);
		nulls[6] = (c.last_duplicate == 0);
		values[7] = TimestampTzGetDatum(c.since);
		if (version >= COUNTERS_V1_1)
		{
			values[8] = Int64GetDatum(c.deadlocks);
			values[9] = Int64GetDatum(c.lock_timeouts);
			values[10] = Int64GetDatum(c.cancels);
			values[11] = Int64GetDatum(c.other_errors);
			values[12] = Float8GetDatum(c.claim_time);
			values[13] = Float8GetDatum(c.max_claim_time);
			values[14] = Float8GetDatum(c.lock_wait_time);
		}
		if (version == COUNTERS_STREAMS)
			values[15] = CStringGetTextDatum(entry->key.stream);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	LWLockRelease(stats_shared->lock);
}

/* the 1.0 definition: 8 columns */
Datum
dedup_claim_counters(PG_FUNCTION_ARGS)
{
	claim_counters(fcinfo, COUNTERS_V1_0);
	return (Datum) 0;
}

/* the 1.1 definition: 15 columns */
Datum
dedup_claim_counters_1_1(PG_FUNCTION_ARGS)
{
	claim_counters(fcinfo, COUNTERS_V1_1);
	return (Datum) 0;
}

/* dedup_stream_counters(): those of 1.1, then the stream */
Datum
dedup_stream_counters(PG_FUNCTION_ARGS)
{
	claim_counters(fcinfo, COUNTERS_STREAMS);
	return (Datum) 0;
}

/*
 * dedup_stats_reset(consumer text DEFAULT NULL) RETURNS void
 *
 * Forget the counters of one consumer of the current database (those of
 * its streams too), or of all of them and the number of evicted entries
 * (which is not per database).
 */
Datum
dedup_stats_reset(PG_FUNCTION_ARGS)
{
	HASH_SEQ_STATUS scan;
	StatsEntry *entry;
	char	   *consumer = PG_ARGISNULL(0) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(0));

	if (stats_hash == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("dedup claim counters are not available"),
				 errdetail("Counters need dedup in shared_preload_libraries.")));

	LWLockAcquire(stats_shared->lock, LW_EXCLUSIVE);
	hash_seq_init(&scan, stats_hash);
	while ((entry = hash_seq_search(&scan)) != NULL)
	{
		if (entry->key.dboid == MyDatabaseId &&
			(consumer == NULL || strcmp(entry->key.consumer, consumer) == 0))
			hash_search(stats_hash, &entry->key, HASH_REMOVE, NULL);
	}
	if (consumer == NULL)
	{
		pg_atomic_write_u64(&stats_shared->evicted, 0);
		pg_atomic_clear_flag(&stats_shared->eviction_logged);
	}
	LWLockRelease(stats_shared->lock);
	PG_RETURN_VOID();
}

/*
 * dedup_counters_status() RETURNS text: whether claims are being counted,
 * and if not, why; and how many entries were evicted because the table was
 * full.
 */
Datum
dedup_counters_status(PG_FUNCTION_ARGS)
{
	uint64		evicted;

	if (stats_hash == NULL)
		PG_RETURN_TEXT_P(cstring_to_text("unavailable: dedup is not in shared_preload_libraries"));
	if (!dedup_track_claims)
		PG_RETURN_TEXT_P(cstring_to_text("off: dedup.track_claims is off"));
	evicted = pg_atomic_read_u64(&stats_shared->evicted);
	if (evicted == 0)
		PG_RETURN_TEXT_P(cstring_to_text("on"));
	PG_RETURN_TEXT_P(cstring_to_text(psprintf("on; " UINT64_FORMAT " entries evicted (dedup.max_consumers = %d reached)",
											  evicted, dedup_max_consumers)));
}
