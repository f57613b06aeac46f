/*-------------------------------------------------------------------------
 *
 * sweeper_state.c
 *	  What the sweeper knows about each database, in shared memory: one slot
 *	  per database with its schedule and the outcome of its sweeps, under
 *	  its own LWLock (tranche "dedup_sweeper_state").  This file is the only
 *	  code that reads or writes it: the launcher and the per-database
 *	  sweeper tell it what happened (a sweep launched, progress, an
 *	  outcome), and it keeps the schedule, the back-off after failures and
 *	  the record that the SQL functions show (dedup_sweeper_status, behind
 *	  the dedup_sweeper view) or poke (dedup_sweeper_wake).
 *
 * The schedule: a database is swept dedup.sweep_interval after its last
 * sweep began; a failed sweep is retried with exponential back-off (the
 * interval times 2, 4, ... 2^MAX_BACKOFF_SHIFT), so a persistent error is
 * logged ever more rarely, never in a flood; a reload retries a failing
 * database at once, and applies a shorter interval to sweeps already
 * scheduled.  A database found without dedup gives its slot back, unless
 * a wake-up waits there in a prepared transaction (below).
 *
 * A wake-up in a transaction that is PREPAREd instead of committed cannot
 * be delivered at commit: COMMIT PREPARED runs no callback of ours, maybe
 * in another session.  So PREPARE marks the database (prepared_wake), and
 * the launcher keeps probing it at each interval while the mark stands.
 * The probing sweeper keeps the mark while its database has a prepared
 * transaction, and clears it when there is none left (COMMIT or ROLLBACK
 * PREPARED) or when it finds dedup installed.  A restart forgets the
 * marks, but not the prepared transactions: a prepared transaction older
 * than this state (since) may hold a lost wake-up, and marks its database
 * again.  Databases without dedup and without such transactions are
 * probed once, as before.
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
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "guc.h"
#include "sweeper/sweeper.h"
#include "sweeper/sweeper_state.h"

#define SWEEPER_STATE_TRANCHE "dedup_sweeper_state"

/* the longest back-off after failures: the interval times 2^this */
#define MAX_BACKOFF_SHIFT 6

/* the longest last_error kept, in bytes */
#define ERROR_LEN 256

PG_FUNCTION_INFO_V1(dedup_sweeper_status);
PG_FUNCTION_INFO_V1(dedup_sweeper_wake);

typedef enum DatabaseState
{
	DB_UNKNOWN,					/* not probed yet: sweep it to find out */
	DB_ACTIVE					/* dedup is installed: swept on schedule */
} DatabaseState;

/*
 * One database.  The launcher's events set the schedule (state,
 * next_sweep, failures) and mark a sweep running; the sweeper's record its
 * progress and outcome.
 */
typedef struct DatabaseSlot
{
	Oid			dboid;			/* InvalidOid: free slot */
	DatabaseState state;
	TimestampTz next_sweep;
	bool		woken;			/* dedup_sweeper_wake() since the sweep began */
	bool		prepared_wake;	/* dedup_sweeper_wake() in a transaction that
								 * may still be prepared: keep probing */
	int			failures;		/* consecutive failed sweeps (back-off) */
	bool		connected;		/* the sweeper last started has connected */
	pid_t		sweeper_pid;	/* sweeping now, or 0 */
	DedupSweepOutcome last_outcome;
	DedupSweepOutcome outcome_before;	/* before the sweep being launched */
	TimestampTz last_start;
	TimestampTz last_end;
	int			blocked_sweeps; /* consecutive sweeps ended 'blocked' */
	int64		last_rows;
	int64		total_rows;
	TimestampTz last_error_at;
	char		last_error[ERROR_LEN];
	uint32		invalid_windows;	/* a hash of the invalid retention windows
									 * last logged, 0 if none */
	Oid			vacuum_cut_relid;	/* the table whose VACUUM the time limit
									 * stopped, or InvalidOid */
	int64		vacuum_cut_count;	/* its VACUUM count then */
} DatabaseSlot;

typedef struct SweeperState
{
	LWLock	   *lock;			/* protects everything below */
	pid_t		launcher_pid;	/* 0 when no launcher runs */
	Latch	   *launcher_latch;
	Oid			woken_untracked;	/* dedup_sweeper_wake() found no free slot */
	TimestampTz since;			/* created: the marks of prepared wake-ups
								 * made before are lost */
	int			nslots;
	DatabaseSlot slots[FLEXIBLE_ARRAY_MEMBER];
} SweeperState;

static SweeperState *sweeper_state = NULL;

/* in a sweeper: the slot of its database */
static DatabaseSlot *my_slot = NULL;

static Size
sweeper_shmem_size(void)
{
	return add_size(offsetof(SweeperState, slots),
					mul_size(dedup_max_databases, sizeof(DatabaseSlot)));
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
	sweeper_state = ShmemInitStruct("dedup sweeper state",
									sweeper_shmem_size(), &found);
	if (!found)
	{
		memset(sweeper_state, 0, sweeper_shmem_size());
		sweeper_state->lock = &(GetNamedLWLockTranche(SWEEPER_STATE_TRANCHE))->lock;
		sweeper_state->nslots = dedup_max_databases;
		sweeper_state->since = GetCurrentTimestamp();
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * The slot of database dboid, or NULL.  With create, a free slot is taken
 * for it if it has none (NULL when every slot is taken).  Caller holds the
 * lock, exclusively if create.
 */
static DatabaseSlot *
database_slot(Oid dboid, bool create)
{
	DatabaseSlot *free_slot = NULL;

	for (int i = 0; i < sweeper_state->nslots; i++)
	{
		DatabaseSlot *slot = &sweeper_state->slots[i];

		if (slot->dboid == dboid)
			return slot;
		if (free_slot == NULL && slot->dboid == InvalidOid)
			free_slot = slot;
	}
	if (!create || free_slot == NULL)
		return NULL;

	memset(free_slot, 0, sizeof(DatabaseSlot));
	free_slot->dboid = dboid;
	free_slot->state = DB_UNKNOWN;
	return free_slot;
}

/*
 * A copy of the slot of database dboid, read under the lock, in *copy;
 * false if the database has none.
 */
static bool
slot_copy(Oid dboid, DatabaseSlot *copy)
{
	DatabaseSlot *slot;

	LWLockAcquire(sweeper_state->lock, LW_SHARED);
	slot = database_slot(dboid, false);
	if (slot != NULL)
		*copy = *slot;
	LWLockRelease(sweeper_state->lock);
	return slot != NULL;
}

/* dedup.sweep_interval after from, shifted left for a back-off */
static TimestampTz
interval_after(TimestampTz from, int shift)
{
	return TimestampTzPlusMilliseconds(from,
									   (dedup_sweep_interval * 1000L) << shift);
}

/*
 * Is the blocked-th consecutive blocked sweep of a database one to log?  The
 * first is, and then the 10th, 100th, 1000th...
 */
static bool
log_blocked(int blocked)
{
	while (blocked > 0 && blocked % 10 == 0)
		blocked /= 10;
	return blocked == 1;
}

/* ----------------------------------------------------------------
 * The launcher's side
 * ----------------------------------------------------------------
 */

/* before_shmem_exit of the launcher: no launcher runs any more */
static void
launcher_detach(int code, Datum arg)
{
	LWLockAcquire(sweeper_state->lock, LW_EXCLUSIVE);
	sweeper_state->launcher_pid = 0;
	sweeper_state->launcher_latch = NULL;
	LWLockRelease(sweeper_state->lock);
}

/*
 * The launcher has started: say so to dedup_sweeper_wake() and the view,
 * until it exits; and probe every database again, right away.
 */
void
dedup_launcher_attach(void)
{
	LWLockAcquire(sweeper_state->lock, LW_EXCLUSIVE);
	sweeper_state->launcher_pid = MyProcPid;
	sweeper_state->launcher_latch = MyLatch;
	for (int i = 0; i < sweeper_state->nslots; i++)
	{
		sweeper_state->slots[i].state = DB_UNKNOWN;
		sweeper_state->slots[i].next_sweep = 0;
	}
	LWLockRelease(sweeper_state->lock);
	before_shmem_exit(launcher_detach, (Datum) 0);
}

/*
 * Give back the slots of the databases not in listed (OIDs: dropped, or no
 * longer in dedup.databases), unless a sweeper is at work there.
 */
void
dedup_untrack_unlisted(List *listed)
{
	LWLockAcquire(sweeper_state->lock, LW_EXCLUSIVE);
	for (int i = 0; i < sweeper_state->nslots; i++)
	{
		DatabaseSlot *slot = &sweeper_state->slots[i];

		if (!list_member_oid(listed, slot->dboid) && slot->sweeper_pid == 0)
			slot->dboid = InvalidOid;
	}
	LWLockRelease(sweeper_state->lock);
}

/*
 * The database whose CREATE EXTENSION woke the launcher but found no free
 * slot (InvalidOid: none since the last call).
 */
Oid
dedup_take_woken_untracked(void)
{
	Oid			dboid;

	LWLockAcquire(sweeper_state->lock, LW_EXCLUSIVE);
	dboid = sweeper_state->woken_untracked;
	sweeper_state->woken_untracked = InvalidOid;
	LWLockRelease(sweeper_state->lock);
	return dboid;
}

/*
 * Whether database dboid has a slot; with take_slot, a free one is taken
 * for it if it has none.  False when it has none and none is free.
 */
bool
dedup_track_database(Oid dboid, bool take_slot)
{
	bool		tracked;

	LWLockAcquire(sweeper_state->lock, LW_EXCLUSIVE);
	tracked = (database_slot(dboid, take_slot) != NULL);
	LWLockRelease(sweeper_state->lock);
	return tracked;
}

/* Is a sweep of tracked database dboid due now? */
bool
dedup_sweep_due(Oid dboid)
{
	DatabaseSlot slot;

	return slot_copy(dboid, &slot) && slot.next_sweep <= GetCurrentTimestamp();
}

/*
 * A sweeper is about to be started at launched for tracked database dboid:
 * its sweep is running until the sweeper says otherwise, and the next one
 * is an interval after launched until this one ends (the view shows no
 * sweep due in the past while one runs).  Called before the sweeper can
 * possibly start, let alone report.
 */
void
dedup_sweep_launching(Oid dboid, TimestampTz launched)
{
	DatabaseSlot *slot;

	LWLockAcquire(sweeper_state->lock, LW_EXCLUSIVE);
	slot = database_slot(dboid, false);
	slot->outcome_before = slot->last_outcome;
	slot->last_outcome = DEDUP_SWEEP_RUNNING;
	slot->next_sweep = interval_after(launched, 0);
	slot->woken = false;
	slot->connected = false;
	LWLockRelease(sweeper_state->lock);
}

/*
 * The sweeper could not be started (no free background worker slot): the
 * last outcome stands, and the next attempt is an interval after launched.
 */
void
dedup_sweep_not_launched(Oid dboid, TimestampTz launched)
{
	DatabaseSlot *slot;

	LWLockAcquire(sweeper_state->lock, LW_EXCLUSIVE);
	slot = database_slot(dboid, false);
	slot->last_outcome = slot->outcome_before;
	slot->next_sweep = interval_after(launched, 0);
	LWLockRelease(sweeper_state->lock);
}

/* Has the sweeper last launched for database dboid connected to it? */
bool
dedup_sweeper_connected(Oid dboid)
{
	DatabaseSlot slot;

	return slot_copy(dboid, &slot) && slot.connected;
}

/*
 * The sweeper of database dboid was stopped while connecting, for the
 * reason why: the sweep ends 'blocked'.  Returns whether to log it (the
 * first of consecutive blocked sweeps, and then the 10th, 100th...), with
 * their number in *blocked_sweeps.
 */
bool
dedup_sweep_stopped_connecting(Oid dboid, const char *why,
							   int *blocked_sweeps)
{
	DatabaseSlot *slot;

	LWLockAcquire(sweeper_state->lock, LW_EXCLUSIVE);
	slot = database_slot(dboid, false);
	slot->last_outcome = DEDUP_SWEEP_BLOCKED;
	*blocked_sweeps = ++slot->blocked_sweeps;
	snprintf(slot->last_error, ERROR_LEN, "could not connect: %s", why);
	slot->last_error_at = GetCurrentTimestamp();
	LWLockRelease(sweeper_state->lock);
	return log_blocked(*blocked_sweeps);
}

/*
 * The sweeper launched at launched for database dboid has exited: schedule
 * the next sweep from the outcome it recorded.  stopped_connecting says
 * that the launcher stopped it (dedup_sweep_stopped_connecting).
 *
 * A sweeper that died without a word still leaves a trace: a failure.
 * After a sweep that ended, the next one is an interval after this one
 * began; after a failure, the interval times 2^(failures before it), at
 * most 2^MAX_BACKOFF_SHIFT, after it ended.  A sweeper stopped while
 * connecting does not tell whether the database has dedup: it is retried
 * an interval after it was stopped, not back to back.
 *
 * Returns true when the database turned out not to have dedup: its slot is
 * given back.  Not if dedup_sweeper_wake() was called there since the
 * sweep began: CREATE EXTENSION committed after the sweeper looked, and
 * the database is probed again at once; nor while a wake-up waits there in
 * a prepared transaction: the database is probed again an interval after
 * this probe began.
 */
bool
dedup_sweep_schedule_next(Oid dboid, TimestampTz launched,
						  bool stopped_connecting)
{
	TimestampTz now = GetCurrentTimestamp();
	DatabaseSlot *slot;
	bool		no_extension = false;
	int			shift;

	LWLockAcquire(sweeper_state->lock, LW_EXCLUSIVE);
	slot = database_slot(dboid, false);
	if (slot->last_outcome == DEDUP_SWEEP_RUNNING ||
		slot->last_outcome == DEDUP_SWEEP_VACUUMING)
	{
		slot->last_outcome = DEDUP_SWEEP_FAILED;
		strlcpy(slot->last_error, "sweeper exited before finishing",
				ERROR_LEN);
		slot->last_error_at = now;
	}
	switch (slot->last_outcome)
	{
		case DEDUP_SWEEP_NO_EXTENSION:
			if (slot->woken)
			{
				slot->state = DB_UNKNOWN;
				slot->next_sweep = 0;
				break;
			}
			if (slot->prepared_wake)
			{
				slot->state = DB_UNKNOWN;
				slot->failures = 0;
				slot->next_sweep = interval_after(launched, 0);
				break;
			}
			slot->dboid = InvalidOid;
			no_extension = true;
			break;
		case DEDUP_SWEEP_DONE:
		case DEDUP_SWEEP_PARTIAL:
		case DEDUP_SWEEP_BLOCKED:
			slot->failures = 0;
			if (stopped_connecting)
				slot->next_sweep = interval_after(now, 0);
			else
			{
				slot->state = DB_ACTIVE;
				slot->next_sweep = interval_after(launched, 0);
			}
			break;
		case DEDUP_SWEEP_NONE:
		case DEDUP_SWEEP_RUNNING:
		case DEDUP_SWEEP_VACUUMING:
		case DEDUP_SWEEP_FAILED:
			shift = Min(slot->failures, MAX_BACKOFF_SHIFT);
			slot->failures++;
			slot->next_sweep = interval_after(now, shift);
			break;
	}
	LWLockRelease(sweeper_state->lock);
	return no_extension;
}

/*
 * When the next sweep of a tracked database is due (DT_NOEND: none is
 * tracked).
 */
TimestampTz
dedup_next_sweep_due(void)
{
	TimestampTz next = DT_NOEND;

	LWLockAcquire(sweeper_state->lock, LW_SHARED);
	for (int i = 0; i < sweeper_state->nslots; i++)
	{
		DatabaseSlot *slot = &sweeper_state->slots[i];

		if (slot->dboid != InvalidOid)
			next = Min(next, slot->next_sweep);
	}
	LWLockRelease(sweeper_state->lock);
	return next;
}

/*
 * After a reload: a shorter dedup.sweep_interval applies to sweeps already
 * scheduled, and a failing database is retried without back-off (the
 * reload may be its fix).
 */
void
dedup_reschedule_sweeps(void)
{
	LWLockAcquire(sweeper_state->lock, LW_EXCLUSIVE);
	for (int i = 0; i < sweeper_state->nslots; i++)
	{
		DatabaseSlot *slot = &sweeper_state->slots[i];

		if (slot->dboid == InvalidOid)
			continue;
		slot->failures = 0;
		slot->next_sweep = Min(slot->next_sweep,
							   interval_after(slot->last_start, 0));
	}
	LWLockRelease(sweeper_state->lock);
}

/* ----------------------------------------------------------------
 * The sweeper's side
 * ----------------------------------------------------------------
 */

/* before_shmem_exit of a sweeper: however it ends, its slot says it ended */
static void
sweeper_detach(int code, Datum arg)
{
	LWLockAcquire(sweeper_state->lock, LW_EXCLUSIVE);
	my_slot->sweeper_pid = 0;
	my_slot->last_end = GetCurrentTimestamp();
	LWLockRelease(sweeper_state->lock);
}

/*
 * This sweeper, connected to database dboid, begins its sweep at start.
 * False when the database has no slot (the launcher gave it back): there
 * is nothing to record, and no sweep to make.  From now on the launcher no
 * longer watches the sweeper's lock waits (launcher.c).
 */
bool
dedup_sweeper_attach(Oid dboid, TimestampTz start)
{
	LWLockAcquire(sweeper_state->lock, LW_EXCLUSIVE);
	my_slot = database_slot(dboid, false);
	if (my_slot == NULL)
	{
		LWLockRelease(sweeper_state->lock);
		return false;
	}
	my_slot->connected = true;
	my_slot->sweeper_pid = MyProcPid;
	my_slot->last_start = start;
	my_slot->last_rows = 0;
	LWLockRelease(sweeper_state->lock);
	before_shmem_exit(sweeper_detach, (Datum) 0);
	return true;
}

/* The sweep has deleted rows more rows (a batch, committed). */
void
dedup_sweeper_progress(uint64 rows)
{
	LWLockAcquire(sweeper_state->lock, LW_EXCLUSIVE);
	my_slot->last_rows += rows;
	my_slot->total_rows += rows;
	LWLockRelease(sweeper_state->lock);
}

/*
 * This sweeper's deletes are over (last_rows is final) and it starts to
 * VACUUM what they left: the view says so until the sweep's outcome.
 */
void
dedup_sweeper_vacuuming(void)
{
	LWLockAcquire(sweeper_state->lock, LW_EXCLUSIVE);
	my_slot->last_outcome = DEDUP_SWEEP_VACUUMING;
	LWLockRelease(sweeper_state->lock);
}

/*
 * This sweeper's VACUUM of table relid, vacuumed vacuums times so far (by
 * anyone, as the statistics count), was stopped at dedup.sweep_max_duration:
 * the next sweeps leave the table to autovacuum until it has vacuumed it
 * (dedup_sweeper_vacuum_left), rather than begin again a VACUUM that the
 * limit would stop again, holding the table's lock that autovacuum's would
 * need.
 */
void
dedup_sweeper_vacuum_cut(Oid relid, int64 vacuums)
{
	LWLockAcquire(sweeper_state->lock, LW_EXCLUSIVE);
	my_slot->vacuum_cut_relid = relid;
	my_slot->vacuum_cut_count = vacuums;
	LWLockRelease(sweeper_state->lock);
}

/*
 * Is table relid, vacuumed vacuums times so far, left to autovacuum: the
 * sweeper's last VACUUM of it was stopped at the time limit, and nobody has
 * vacuumed it since?  Once somebody has, it is the sweeper's again.
 */
bool
dedup_sweeper_vacuum_left(Oid relid, int64 vacuums)
{
	bool		left;

	LWLockAcquire(sweeper_state->lock, LW_EXCLUSIVE);
	left = (my_slot->vacuum_cut_relid == relid &&
			my_slot->vacuum_cut_count == vacuums);
	if (!left && my_slot->vacuum_cut_relid == relid)
		my_slot->vacuum_cut_relid = InvalidOid;
	LWLockRelease(sweeper_state->lock);
	return left;
}

/*
 * This sweeper found no dedup in its database, and is about to look for
 * prepared transactions there: the database's mark of a prepared wake-up is
 * cleared, and returned.  Cleared first, so that a PREPARE marking it while
 * the sweeper looks is not lost (dedup_sweeper_prepared_found).
 */
bool
dedup_sweeper_take_prepared_wake(void)
{
	bool		marked;

	LWLockAcquire(sweeper_state->lock, LW_EXCLUSIVE);
	marked = my_slot->prepared_wake;
	my_slot->prepared_wake = false;
	LWLockRelease(sweeper_state->lock);
	return marked;
}

/*
 * What the sweeper found after dedup_sweeper_take_prepared_wake(), which
 * returned marked: the number of prepared transactions in its database,
 * and when the oldest was prepared.  While there is one, a database that
 * was marked stays marked; so is one whose oldest prepared transaction is
 * older than this state: it may hold a wake-up that a restart forgot.
 */
void
dedup_sweeper_prepared_found(bool marked, int nprepared, TimestampTz oldest)
{
	LWLockAcquire(sweeper_state->lock, LW_EXCLUSIVE);
	if (nprepared > 0 && (marked || oldest < sweeper_state->since))
		my_slot->prepared_wake = true;
	LWLockRelease(sweeper_state->lock);
}

/*
 * Whether the sweep now ending 'blocked' is one to log, with the number of
 * consecutive blocked sweeps it makes in *blocked_sweeps.  Not while the
 * database is still being probed: the session whose CREATE EXTENSION woke
 * the launcher may still be releasing its locks.
 */
bool
dedup_sweeper_log_blocked(int *blocked_sweeps)
{
	bool		probing;

	LWLockAcquire(sweeper_state->lock, LW_SHARED);
	*blocked_sweeps = my_slot->blocked_sweeps + 1;
	probing = (my_slot->state != DB_ACTIVE);
	LWLockRelease(sweeper_state->lock);
	return !probing && log_blocked(*blocked_sweeps);
}

/* the sweeper's last error, for dedup_sweeper; the caller holds the lock */
static void
keep_error(const char *error)
{
	strlcpy(my_slot->last_error, error, ERROR_LEN);
	my_slot->last_error_at = GetCurrentTimestamp();
}

/*
 * The sweep's outcome, with the error it ended with (or NULL), for the
 * launcher's schedule and the dedup_sweeper view.  A blocked sweep counts
 * toward the consecutive blocked sweeps once the database is known to
 * have dedup (see dedup_sweeper_log_blocked).  A sweep that ends done or
 * partial without an error of its own (none kept since it began, by
 * dedup_sweeper_error) clears last_error: last_error_at still says when
 * the last one was.
 */
void
dedup_sweeper_finish(DedupSweepOutcome outcome, const char *error)
{
	LWLockAcquire(sweeper_state->lock, LW_EXCLUSIVE);
	my_slot->last_outcome = outcome;
	/* dedup was found: a prepared wake-up has nothing left to do */
	if (outcome == DEDUP_SWEEP_DONE || outcome == DEDUP_SWEEP_PARTIAL ||
		outcome == DEDUP_SWEEP_BLOCKED)
		my_slot->prepared_wake = false;
	if (outcome != DEDUP_SWEEP_BLOCKED)
		my_slot->blocked_sweeps = 0;
	else if (my_slot->state == DB_ACTIVE)
		my_slot->blocked_sweeps++;
	if (error != NULL)
		keep_error(error);
	else if ((outcome == DEDUP_SWEEP_DONE || outcome == DEDUP_SWEEP_PARTIAL) &&
			 my_slot->last_error_at < my_slot->last_start)
		my_slot->last_error[0] = '\0';
	LWLockRelease(sweeper_state->lock);
}

/*
 * A part of the sweep failed (a colocated records table) and the rest goes
 * on: show its error in the dedup_sweeper view, whatever the outcome.
 */
void
dedup_sweeper_error(const char *error)
{
	LWLockAcquire(sweeper_state->lock, LW_EXCLUSIVE);
	keep_error(error);
	LWLockRelease(sweeper_state->lock);
}

/*
 * The sweep found consumers with invalid retention windows (windows: a
 * hash of them, 0 if none): are they others than those that the last
 * sweep that found any logged?  Remembers them, so that they are logged
 * once, and again when they change or after they were fixed.
 */
bool
dedup_sweeper_invalid_windows(uint32 windows)
{
	bool		changed;

	LWLockAcquire(sweeper_state->lock, LW_EXCLUSIVE);
	changed = (my_slot->invalid_windows != windows);
	my_slot->invalid_windows = windows;
	LWLockRelease(sweeper_state->lock);
	return changed;
}

/* ----------------------------------------------------------------
 * The SQL functions
 * ----------------------------------------------------------------
 */

static const char *
outcome_name(DedupSweepOutcome outcome)
{
	switch (outcome)
	{
		case DEDUP_SWEEP_NONE:
			break;
		case DEDUP_SWEEP_RUNNING:
			return "running";
		case DEDUP_SWEEP_VACUUMING:
			return "vacuuming";
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
	DatabaseSlot slot;
	bool		have_slot = false;
	bool		running = false;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE ||
		tupdesc->natts != STATUS_COLS)
		elog(ERROR, "dedup_sweeper_status must return a record of %d columns",
			 STATUS_COLS);

	if (sweeper_state != NULL)
	{
		DatabaseSlot *shared_slot;

		LWLockAcquire(sweeper_state->lock, LW_SHARED);
		running = (sweeper_state->launcher_pid != 0);
		shared_slot = database_slot(MyDatabaseId, false);
		if (shared_slot != NULL)
		{
			slot = *shared_slot;
			have_slot = true;
		}
		LWLockRelease(sweeper_state->lock);
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
		values[2] = CStringGetTextDatum(slot.state == DB_ACTIVE ?
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
		if (slot.last_error_at != 0 && slot.last_error[0] != '\0')
			values[9] = CStringGetTextDatum(slot.last_error);
		else
			nulls[9] = true;
		set_timestamp(values, nulls, 10, slot.last_error_at);
		/* none while sweeping is off */
		set_timestamp(values, nulls, 11,
					  running && dedup_sweep_enabled ? slot.next_sweep : 0);
	}

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/*
 * At commit of a transaction that called dedup_sweeper_wake(), tell the
 * launcher.  Not before: a sweeper started earlier would not see a
 * CREATE EXTENSION still in progress, and would leave the database alone.
 * At PREPARE TRANSACTION, mark the database instead: the launcher keeps
 * probing it until the prepared transaction is resolved (see the head of
 * this file), at no cost to a database that already has dedup.
 */
static bool wake_at_commit = false;

static void
wake_at_commit_callback(XactEvent event, void *arg)
{
	DatabaseSlot *slot;

	if (!wake_at_commit)
		return;
	switch (event)
	{
		case XACT_EVENT_COMMIT:
			LWLockAcquire(sweeper_state->lock, LW_EXCLUSIVE);
			slot = database_slot(MyDatabaseId, true);
			if (slot != NULL)
			{
				slot->woken = true;
				/* a failing database keeps its back-off (see below) */
				if (slot->failures == 0)
					slot->next_sweep = 0;
			}
			else
				sweeper_state->woken_untracked = MyDatabaseId;
			if (sweeper_state->launcher_latch != NULL)
				SetLatch(sweeper_state->launcher_latch);
			LWLockRelease(sweeper_state->lock);
			wake_at_commit = false;
			break;
		case XACT_EVENT_PREPARE:
			LWLockAcquire(sweeper_state->lock, LW_EXCLUSIVE);
			slot = database_slot(MyDatabaseId, false);
			if (slot == NULL)
			{
				/* its first probe is an interval away: nothing to see before */
				slot = database_slot(MyDatabaseId, true);
				if (slot != NULL)
					slot->next_sweep = interval_after(GetCurrentTimestamp(), 0);
			}
			if (slot != NULL)
			{
				slot->prepared_wake = true;
				/* to take the new slot into its schedule */
				if (sweeper_state->launcher_latch != NULL)
					SetLatch(sweeper_state->launcher_latch);
			}
			LWLockRelease(sweeper_state->lock);
			wake_at_commit = false;
			break;
		case XACT_EVENT_ABORT:
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
 * commits (and to notice a newly created extension); if it is prepared
 * instead, within an interval of its COMMIT PREPARED.  Returns whether a
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

	if (sweeper_state == NULL)
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

	LWLockAcquire(sweeper_state->lock, LW_SHARED);
	running = (sweeper_state->launcher_pid != 0);
	LWLockRelease(sweeper_state->lock);

	PG_RETURN_BOOL(running);
}
