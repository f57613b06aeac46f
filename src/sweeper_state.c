/*-------------------------------------------------------------------------
 *
 * sweeper_state.c
 *	  The sweeper's shared memory: one slot per database, with its schedule
 *	  and the outcome of its sweeps, under its own LWLock (tranche
 *	  "dedup_sweeper_state"); and the SQL functions that read it
 *	  (dedup_sweeper_status, behind the dedup_sweeper view) or poke it
 *	  (dedup_sweeper_wake).
 *
 * Shared memory exists only when dedup is in shared_preload_libraries.
 * Without it, claims work, nothing is swept, and the view says so.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "guc.h"
#include "sweeper_state.h"

#define SWEEPER_STATE_TRANCHE "dedup_sweeper_state"

PG_FUNCTION_INFO_V1(dedup_sweeper_status);
PG_FUNCTION_INFO_V1(dedup_sweeper_wake);

DedupSharedState *DedupShared = NULL;

static Size
sweeper_shmem_size(void)
{
	return add_size(offsetof(DedupSharedState, slots),
					mul_size(dedup_max_databases, sizeof(DedupDatabaseSlot)));
}

/* shmem_request_hook part: reserve what dedup_sweeper_shmem_startup uses */
void
dedup_sweeper_shmem_request(void)
{
	RequestAddinShmemSpace(sweeper_shmem_size());
	RequestNamedLWLockTranche(SWEEPER_STATE_TRANCHE, 1);
}

/* shmem_startup_hook part: create or attach to the slots */
void
dedup_sweeper_shmem_startup(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	DedupShared = ShmemInitStruct("dedup sweeper state", sweeper_shmem_size(),
								  &found);
	if (!found)
	{
		memset(DedupShared, 0, sweeper_shmem_size());
		DedupShared->lock = &(GetNamedLWLockTranche(SWEEPER_STATE_TRANCHE))->lock;
		DedupShared->nslots = dedup_max_databases;
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * The slot of database dboid, or NULL.  With create, a free slot is taken
 * for it if it has none (NULL when every slot is taken).  Caller holds
 * DedupShared->lock, exclusively if create.
 */
DedupDatabaseSlot *
dedup_database_slot(Oid dboid, bool create)
{
	DedupDatabaseSlot *free_slot = NULL;

	for (int i = 0; i < DedupShared->nslots; i++)
	{
		DedupDatabaseSlot *slot = &DedupShared->slots[i];

		if (slot->dboid == dboid)
			return slot;
		if (free_slot == NULL && slot->dboid == InvalidOid)
			free_slot = slot;
	}
	if (!create || free_slot == NULL)
		return NULL;

	memset(free_slot, 0, sizeof(DedupDatabaseSlot));
	free_slot->dboid = dboid;
	free_slot->state = DEDUP_DB_UNKNOWN;
	return free_slot;
}

/* Wake the launcher, if one runs.  Caller holds DedupShared->lock. */
void
dedup_wake_launcher(void)
{
	if (DedupShared->launcher_latch != NULL)
		SetLatch(DedupShared->launcher_latch);
}

/*
 * Is the blocked-th consecutive blocked sweep of a database one to log?  The
 * first is, and then the 10th, 100th, 1000th...
 */
bool
dedup_log_blocked(int blocked)
{
	while (blocked > 0 && blocked % 10 == 0)
		blocked /= 10;
	return blocked == 1;
}

static const char *
outcome_name(DedupSweepOutcome outcome)
{
	switch (outcome)
	{
		case DEDUP_SWEEP_NONE:
			break;
		case DEDUP_SWEEP_RUNNING:
			return "running";
		case DEDUP_SWEEP_FAILED:
			return "failed";
		case DEDUP_SWEEP_DONE:
			return "done";
		case DEDUP_SWEEP_PARTIAL:
			return "partial";
		case DEDUP_SWEEP_BLOCKED:
			return "blocked";
		case DEDUP_SWEEP_NO_EXTENSION:
			return "no extension";
	}
	return "unknown";
}

/* a timestamp column that is NULL until the event has happened once */
static void
set_timestamp(Datum *values, bool *nulls, int i, TimestampTz ts)
{
	if (ts == 0)
		nulls[i] = true;
	else
		values[i] = TimestampTzGetDatum(ts);
}

/*
 * dedup_sweeper_status() RETURNS one row: the sweeper's view of the current
 * database.  See the dedup_sweeper view for the columns.
 */
Datum
dedup_sweeper_status(PG_FUNCTION_ARGS)
{
#define STATUS_COLS 12
	TupleDesc	tupdesc;
	Datum		values[STATUS_COLS] = {0};
	bool		nulls[STATUS_COLS] = {0};
	DedupDatabaseSlot slot;
	bool		have_slot = false;
	bool		running = false;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE ||
		tupdesc->natts != STATUS_COLS)
		elog(ERROR, "dedup_sweeper_status must return a record of %d columns",
			 STATUS_COLS);

	if (DedupShared != NULL)
	{
		DedupDatabaseSlot *shared_slot;

		LWLockAcquire(DedupShared->lock, LW_SHARED);
		running = (DedupShared->launcher_pid != 0);
		shared_slot = dedup_database_slot(MyDatabaseId, false);
		if (shared_slot != NULL)
		{
			slot = *shared_slot;
			have_slot = true;
		}
		LWLockRelease(DedupShared->lock);
	}

	values[0] = BoolGetDatum(running);
	values[1] = BoolGetDatum(dedup_sweep_enabled);
	if (!have_slot)
	{
		for (int i = 2; i < STATUS_COLS; i++)
			nulls[i] = true;
	}
	else
	{
		values[2] = CStringGetTextDatum(slot.state == DEDUP_DB_ACTIVE ?
										"active" : "unknown");
		if (slot.sweeper_pid != 0)
			values[3] = Int32GetDatum(slot.sweeper_pid);
		else
			nulls[3] = true;
		set_timestamp(values, nulls, 4, slot.last_start);
		set_timestamp(values, nulls, 5, slot.last_end);
		if (slot.last_outcome != DEDUP_SWEEP_NONE)
			values[6] = CStringGetTextDatum(outcome_name(slot.last_outcome));
		else
			nulls[6] = true;
		values[7] = Int64GetDatum(slot.last_rows);
		values[8] = Int64GetDatum(slot.total_rows);
		if (slot.last_error_at != 0)
			values[9] = CStringGetTextDatum(slot.last_error);
		else
			nulls[9] = true;
		set_timestamp(values, nulls, 10, slot.last_error_at);
		set_timestamp(values, nulls, 11, running ? slot.next_sweep : 0);
	}

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/*
 * At commit of a transaction that called dedup_sweeper_wake(), tell the
 * launcher.  Not before: a sweeper started earlier would not see a
 * CREATE EXTENSION still in progress, and would leave the database alone.
 */
static bool wake_at_commit = false;

static void
wake_at_commit_callback(XactEvent event, void *arg)
{
	DedupDatabaseSlot *slot;

	if (!wake_at_commit)
		return;
	switch (event)
	{
		case XACT_EVENT_COMMIT:
			LWLockAcquire(DedupShared->lock, LW_EXCLUSIVE);
			slot = dedup_database_slot(MyDatabaseId, true);
			if (slot != NULL)
			{
				slot->woken = true;
				/* a failing database keeps its back-off (see below) */
				if (slot->failures == 0)
					slot->next_sweep = 0;
			}
			else
				DedupShared->woken_untracked = MyDatabaseId;
			dedup_wake_launcher();
			LWLockRelease(DedupShared->lock);
			wake_at_commit = false;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
			wake_at_commit = false;
			break;
		default:
			break;
	}
}

/*
 * dedup_sweeper_wake() RETURNS boolean
 *
 * Ask the sweeper to sweep the current database as soon as this transaction
 * commits (and to notice a newly created extension).  Returns whether a
 * sweeper runs; false, with a warning, when none can because dedup is not
 * preloaded.
 *
 * A database whose last sweep failed is not swept sooner than its back-off
 * allows: otherwise each call would be one more failed sweep and one more
 * ERROR in the log.  A reload (pg_reload_conf()) retries it at once.
 */
Datum
dedup_sweeper_wake(PG_FUNCTION_ARGS)
{
	static bool callback_registered = false;
	bool		running;

	if (DedupShared == NULL)
	{
		/* binary-upgrade mode has no sweeper on purpose */
		if (!IsBinaryUpgrade)
			ereport(WARNING,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("dedup is not in shared_preload_libraries: processed_messages will not be swept"),
					 errhint("Add dedup to shared_preload_libraries and restart the server, or call dedup_sweep() yourself.")));
		PG_RETURN_BOOL(false);
	}

	if (!callback_registered)
	{
		RegisterXactCallback(wake_at_commit_callback, NULL);
		callback_registered = true;
	}
	wake_at_commit = true;

	LWLockAcquire(DedupShared->lock, LW_SHARED);
	running = (DedupShared->launcher_pid != 0);
	LWLockRelease(DedupShared->lock);

	PG_RETURN_BOOL(running);
}
