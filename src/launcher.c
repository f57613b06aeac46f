/*-------------------------------------------------------------------------
 *
 * launcher.c
 *	  The sweeper launcher: one background worker per cluster that decides
 *	  when each database is swept, and starts a short-lived sweeper
 *	  (sweeper.c) for it, one database at a time.
 *
 * The launcher is connected to no database, so it never holds a snapshot,
 * never blocks DROP DATABASE and costs nothing in databases without dedup.
 * It runs on primaries only (it starts when recovery finishes, so a promoted
 * standby starts sweeping), and not at all in binary-upgrade mode.
 *
 * Each database's schedule lives in its shared-memory slot
 * (sweeper_state.c).  A database is probed once; where dedup is not
 * installed its slot is given back, so that dedup.max_databases counts
 * databases with dedup only, and it is left alone until CREATE EXTENSION
 * wakes the launcher (dedup_sweeper_wake), or the launcher restarts.  A
 * failed sweep is retried with exponential back-off, so a persistent error
 * is logged ever more rarely, never in a flood.
 *
 * No database can hold up the others.  Once connected, a sweeper waits for
 * no lock for long (sweeper.c); before, it may wait on its database's lock
 * as long as a session holds ALTER DATABASE open.  So the launcher does not
 * wait for a sweeper blindly: it looks at it every second, and a sweeper
 * that has not connected and has waited a second for a lock is stopped, its
 * database's sweep recorded as 'blocked' (naming the session holding the
 * lock), and the launcher goes on with the next database.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"

#include "compat.h"
#include "guc.h"
#include "launcher.h"
#include "sweeper.h"
#include "sweeper_state.h"

/* the longest back-off after failures: the interval times 2^this */
#define MAX_BACKOFF_SHIFT 6

/* how often the launcher looks at the sweeper it waits for, in ms */
#define SWEEPER_POLL_MS 1000

/* a sweeper waiting this long (ms) for a lock to connect is blocked */
#define CONNECT_LOCK_WAIT_MS 1000

typedef struct LauncherDatabase
{
	Oid			oid;
	char		name[NAMEDATALEN];
} LauncherDatabase;

/*
 * Databases found without dedup, in TopMemoryContext.  Their shared slots
 * are given back, so that they cannot crowd out databases with dedup; they
 * are probed again when CREATE EXTENSION gives them a slot (or finds none
 * free: recheck_absent, woken_untracked), when they are listed in
 * dedup.databases again, and by a new launcher.
 */
static List *absent_databases = NIL;
static bool recheck_absent = false;

/* the database whose CREATE EXTENSION found no free slot */
static Oid	woken_untracked = InvalidOid;

/* a database that got no slot in the last pass: retry at the next interval */
static bool untracked_database = false;

/* say each of these once, not at every sweep */
static bool warned_no_worker_slot = false;
static bool warned_no_database_slot = false;

/* the launcher's waits between passes and for a sweeper (dedup_wait_event) */
static uint32 launcher_wait_event = 0;
static uint32 sweeper_wait_event = 0;

static void
launcher_detach(int code, Datum arg)
{
	LWLockAcquire(DedupShared->lock, LW_EXCLUSIVE);
	DedupShared->launcher_pid = 0;
	DedupShared->launcher_latch = NULL;
	LWLockRelease(DedupShared->lock);
}

void
dedup_register_launcher(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS |
		BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 10;
	strcpy(worker.bgw_library_name, "dedup");
	strcpy(worker.bgw_function_name, "dedup_launcher_main");
	strcpy(worker.bgw_name, "dedup sweeper launcher");
	strcpy(worker.bgw_type, "dedup sweeper launcher");
	RegisterBackgroundWorker(&worker);
}

/*
 * The databases to sweep, allocated in the current memory context: those
 * that accept connections and are not templates, restricted to
 * dedup.databases when it is set.
 */
static List *
launcher_databases(void)
{
	MemoryContext context = CurrentMemoryContext;
	List	   *wanted = NIL;
	List	   *databases = NIL;
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tuple;

	/* dedup.databases was validated by its check hook */
	if (dedup_databases[0] != '\0')
		(void) SplitIdentifierString(pstrdup(dedup_databases), ',', &wanted);

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, "listing databases");

	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tuple);
		LauncherDatabase *entry;
		MemoryContext oldcontext;
		ListCell   *lc;
		bool		listed = (wanted == NIL);

		if (!db->datallowconn || db->datistemplate ||
			database_is_invalid_form(db))
			continue;
		foreach(lc, wanted)
			listed |= (strcmp(lfirst(lc), NameStr(db->datname)) == 0);
		if (!listed)
			continue;

		/* the list must outlive this transaction */
		oldcontext = MemoryContextSwitchTo(context);
		entry = palloc(sizeof(LauncherDatabase));
		entry->oid = db->oid;
		strlcpy(entry->name, NameStr(db->datname), NAMEDATALEN);
		databases = lappend(databases, entry);
		MemoryContextSwitchTo(oldcontext);
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);

	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
	return databases;
}

/*
 * Free the slots of databases that were dropped or are no longer listed,
 * forget them as absent databases, and take the requests of CREATE
 * EXTENSIONs that found no free slot.
 */
static void
launcher_sync_slots(List *databases)
{
	ListCell   *lc;
	List	   *still_absent = NIL;
	MemoryContext oldcontext;

	LWLockAcquire(DedupShared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < DedupShared->nslots; i++)
	{
		DedupDatabaseSlot *slot = &DedupShared->slots[i];
		bool		listed = false;

		foreach(lc, databases)
			listed |= (((LauncherDatabase *) lfirst(lc))->oid == slot->dboid);
		if (!listed && slot->sweeper_pid == 0)
			slot->dboid = InvalidOid;
	}
	if (OidIsValid(DedupShared->woken_untracked))
	{
		recheck_absent = true;
		woken_untracked = DedupShared->woken_untracked;
		DedupShared->woken_untracked = InvalidOid;
	}
	LWLockRelease(DedupShared->lock);

	oldcontext = MemoryContextSwitchTo(TopMemoryContext);
	foreach(lc, databases)
	{
		Oid			oid = ((LauncherDatabase *) lfirst(lc))->oid;

		if (list_member_oid(absent_databases, oid))
			still_absent = lappend_oid(still_absent, oid);
	}
	list_free(absent_databases);
	absent_databases = still_absent;
	MemoryContextSwitchTo(oldcontext);
}

/*
 * The slot of a listed database, taken now if it has none and is to be
 * probed; false when it is left alone (absent) or no slot is free.  Slot
 * exhaustion is logged once, until every database is tracked again.
 */
static bool
launcher_track(LauncherDatabase *db)
{
	bool		absent = list_member_oid(absent_databases, db->oid);
	DedupDatabaseSlot *slot;

	LWLockAcquire(DedupShared->lock, LW_EXCLUSIVE);
	slot = dedup_database_slot(db->oid, false);
	if (slot == NULL && (!absent || recheck_absent))
		slot = dedup_database_slot(db->oid, true);
	LWLockRelease(DedupShared->lock);

	if (slot == NULL && (!absent || recheck_absent))
	{
		/* name a database that may have dedup, not any absent one */
		if ((!absent || db->oid == woken_untracked) && !warned_no_database_slot)
		{
			ereport(LOG,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("dedup sweeper cannot track database \"%s\": all %d slots are in use",
							db->name, DedupShared->nslots),
					 errhint("Raise dedup.max_databases, or list the databases to sweep in dedup.databases.")));
			warned_no_database_slot = true;
		}
		untracked_database = true;
		return false;
	}
	/* woken by CREATE EXTENSION, or probed again */
	if (slot != NULL && absent)
		absent_databases = list_delete_oid(absent_databases, db->oid);
	if (slot != NULL && db->oid == woken_untracked)
		woken_untracked = InvalidOid;
	return slot != NULL;
}

/*
 * Is the sweeper pid of database db (slot), not connected yet, stuck waiting
 * for a lock?  It is when it has waited CONNECT_LOCK_WAIT_MS for one: then
 * return who holds what, for the log and last_error, else NULL.
 */
static char *
launcher_connect_blocked(pid_t pid, DedupDatabaseSlot *slot,
						 LauncherDatabase *db)
{
	LockData   *data = GetLockStatusData();
	TimestampTz now = GetCurrentTimestamp();
	LockInstanceData *wait = NULL;
	char	   *blocked = NULL;
	bool		connected;

	for (int i = 0; i < data->nelements && wait == NULL; i++)
	{
		if (data->locks[i].pid == pid && data->locks[i].waitLockMode != NoLock)
			wait = &data->locks[i];
	}

	/* read after the lock table: a lock wait seen was one of connecting */
	LWLockAcquire(DedupShared->lock, LW_SHARED);
	connected = slot->connected;
	LWLockRelease(DedupShared->lock);

	/* waitStart is set a moment after the wait begins */
	if (!connected && wait != NULL && wait->waitStart != 0 &&
		TimestampDifferenceExceeds(wait->waitStart, now, CONNECT_LOCK_WAIT_MS))
	{
		int			holder = dedup_lock_holder(data, &wait->locktag,
											   wait->waitLockMode, pid);
		StringInfoData what;

		initStringInfo(&what);
		if (wait->locktag.locktag_type == LOCKTAG_OBJECT &&
			wait->locktag.locktag_field2 == DatabaseRelationId &&
			wait->locktag.locktag_field3 == db->oid)
			appendStringInfo(&what, "database \"%s\"", db->name);
		else
			DescribeLockTag(&what, &wait->locktag);
		if (holder != 0)
			blocked = psprintf("another session (pid %d) holds a lock on %s",
							   holder, what.data);
		else
			blocked = psprintf("another session holds a lock on %s",
							   what.data);
		pfree(what.data);
	}
	pfree(data->locks);
	pfree(data);
	return blocked;
}

/*
 * Wait for the sweeper of database db (slot) to exit, looking at it every
 * SWEEPER_POLL_MS, and sooner when the postmaster says that it started or
 * stopped (we are its bgw_notify_pid).  A sweeper stuck connecting is
 * stopped: return why, else NULL.
 *
 * This consumes latch wake-ups meant for the main loop: see there.
 */
static char *
launcher_wait_sweeper(BackgroundWorkerHandle *handle, DedupDatabaseSlot *slot,
					  LauncherDatabase *db)
{
	char	   *blocked = NULL;

	for (;;)
	{
		pid_t		pid;
		BgwHandleStatus status = GetBackgroundWorkerPid(handle, &pid);

		if (status == BGWH_STOPPED)
			return blocked;
		if (status == BGWH_POSTMASTER_DIED)
			proc_exit(1);
		if (status == BGWH_STARTED && blocked == NULL)
		{
			blocked = launcher_connect_blocked(pid, slot, db);
			if (blocked != NULL)
				TerminateBackgroundWorker(handle);
		}

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 SWEEPER_POLL_MS,
						 dedup_wait_event("DedupLauncherSweeper",
										  &sweeper_wait_event));
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * A sweeper stuck connecting to database db has been stopped: its sweep
 * ends 'blocked', with why in last_error, and in the log at the first
 * blocked sweep and then after 10, 100, 1000... consecutive ones.
 */
static void
launcher_blocked(DedupDatabaseSlot *slot, LauncherDatabase *db,
				 const char *blocked)
{
	int			blocked_sweeps;

	LWLockAcquire(DedupShared->lock, LW_EXCLUSIVE);
	slot->last_outcome = DEDUP_SWEEP_BLOCKED;
	blocked_sweeps = ++slot->blocked_sweeps;
	snprintf(slot->last_error, DEDUP_ERROR_LEN, "could not connect: %s",
			 blocked);
	slot->last_error_at = GetCurrentTimestamp();
	LWLockRelease(DedupShared->lock);

	if (dedup_log_blocked(blocked_sweeps))
		ereport(LOG,
				(errmsg("dedup sweep of database \"%s\" is blocked: %s",
						db->name, blocked),
				 blocked_sweeps > 1 ?
				 errdetail("The sweeper could not connect, and was stopped; it tries again after dedup.sweep_interval.  %d consecutive sweeps have been blocked.",
						   blocked_sweeps) :
				 errdetail("The sweeper could not connect, and was stopped; it tries again after dedup.sweep_interval.")));
}

/*
 * Start a sweeper for one database and wait for it to finish, then schedule
 * the database's next sweep from the outcome the sweeper left in its slot.
 */
static void
launcher_sweep_database(LauncherDatabase *db)
{
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;
	DedupDatabaseSlot *slot;
	DedupSweepOutcome previous_outcome;
	TimestampTz launched = GetCurrentTimestamp();
	TimestampTz now;
	char	   *blocked;
	int			shift;
	bool		absent = false;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS |
		BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	strcpy(worker.bgw_library_name, "dedup");
	strcpy(worker.bgw_function_name, "dedup_sweeper_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "dedup sweeper for database %s",
			 db->name);
	strcpy(worker.bgw_type, "dedup sweeper");
	worker.bgw_main_arg = ObjectIdGetDatum(db->oid);
	worker.bgw_notify_pid = MyProcPid;

	/* before the sweeper can possibly start, let alone report */
	LWLockAcquire(DedupShared->lock, LW_EXCLUSIVE);
	slot = dedup_database_slot(db->oid, false);
	previous_outcome = slot->last_outcome;
	slot->last_outcome = DEDUP_SWEEP_RUNNING;	/* until the sweeper says */
	slot->woken = false;
	slot->connected = false;
	LWLockRelease(DedupShared->lock);

	if (!RegisterDynamicBackgroundWorker(&worker, &handle))
	{
		if (!warned_no_worker_slot)
			ereport(WARNING,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("dedup sweeper could not start: no free background worker slot"),
					 errhint("Raise max_worker_processes; sweeps resume when a slot is free.")));
		warned_no_worker_slot = true;
		LWLockAcquire(DedupShared->lock, LW_EXCLUSIVE);
		slot->last_outcome = previous_outcome;
		slot->next_sweep = TimestampTzPlusMilliseconds(launched,
													   dedup_sweep_interval * 1000L);
		LWLockRelease(DedupShared->lock);
		return;
	}
	warned_no_worker_slot = false;

	SetCurrentStatementStartTimestamp();
	pgstat_report_activity(STATE_RUNNING, worker.bgw_name);
	blocked = launcher_wait_sweeper(handle, slot, db);
	pfree(handle);
	pgstat_report_activity(STATE_IDLE, NULL);
	if (blocked != NULL)
		launcher_blocked(slot, db, blocked);

	now = GetCurrentTimestamp();
	LWLockAcquire(DedupShared->lock, LW_EXCLUSIVE);
	/* a sweeper that died without a word still leaves a trace */
	if (slot->last_outcome == DEDUP_SWEEP_RUNNING)
	{
		slot->last_outcome = DEDUP_SWEEP_FAILED;
		strlcpy(slot->last_error, "sweeper exited before finishing",
				DEDUP_ERROR_LEN);
		slot->last_error_at = now;
	}
	switch (slot->last_outcome)
	{
		case DEDUP_SWEEP_NO_EXTENSION:
			/* CREATE EXTENSION committed after the sweeper looked */
			if (slot->woken)
			{
				slot->state = DEDUP_DB_UNKNOWN;
				slot->next_sweep = 0;
				break;
			}
			if (dedup_databases[0] != '\0')
				ereport(WARNING,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("database \"%s\" is listed in dedup.databases, but extension \"dedup\" is not installed there",
								db->name)));
			slot->dboid = InvalidOid;
			absent = true;
			break;
		case DEDUP_SWEEP_DONE:
		case DEDUP_SWEEP_PARTIAL:
		case DEDUP_SWEEP_BLOCKED:
			slot->failures = 0;
			if (blocked == NULL)
			{
				slot->state = DEDUP_DB_ACTIVE;
				slot->next_sweep = TimestampTzPlusMilliseconds(launched,
															   dedup_sweep_interval * 1000L);
				break;
			}

			/*
			 * Stopped while connecting: not known to have dedup yet, and
			 * retried an interval after it was stopped, not back to back.
			 */
			slot->next_sweep = TimestampTzPlusMilliseconds(now,
														   dedup_sweep_interval * 1000L);
			break;
		case DEDUP_SWEEP_NONE:
		case DEDUP_SWEEP_RUNNING:
		case DEDUP_SWEEP_FAILED:
			shift = Min(slot->failures, MAX_BACKOFF_SHIFT);
			slot->failures++;
			slot->next_sweep = TimestampTzPlusMilliseconds(now,
														   (dedup_sweep_interval * 1000L) << shift);
			break;
	}
	LWLockRelease(DedupShared->lock);

	if (absent)
	{
		MemoryContext oldcontext = MemoryContextSwitchTo(TopMemoryContext);

		absent_databases = lappend_oid(absent_databases, db->oid);
		MemoryContextSwitchTo(oldcontext);
	}
}

/* Sweep every listed database that is due, one after the other. */
static void
launcher_sweep_due_databases(void)
{
	List	   *databases = launcher_databases();
	ListCell   *lc;

	launcher_sync_slots(databases);
	untracked_database = false;
	foreach(lc, databases)
	{
		LauncherDatabase *db = lfirst(lc);
		DedupDatabaseSlot *slot;
		bool		due;

		CHECK_FOR_INTERRUPTS();
		if (!launcher_track(db))
			continue;
		LWLockAcquire(DedupShared->lock, LW_SHARED);
		slot = dedup_database_slot(db->oid, false);
		due = (slot != NULL && slot->next_sweep <= GetCurrentTimestamp());
		LWLockRelease(DedupShared->lock);

		if (due)
			launcher_sweep_database(db);
	}
	/* every absent database has been probed again, or is waiting for a slot */
	if (!untracked_database)
	{
		recheck_absent = false;
		warned_no_database_slot = false;
	}
}

/*
 * When the next sweep is due (DT_NOEND: none).  Read after the sweeps, so a
 * wake-up that arrived while a sweeper ran (and waiting for it consumed the
 * latch) is not slept through.
 */
static TimestampTz
launcher_next_wakeup(void)
{
	TimestampTz next_wakeup = DT_NOEND;

	/* a slot may have been freed since the database was turned away */
	if (untracked_database)
		next_wakeup = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												  dedup_sweep_interval * 1000L);
	LWLockAcquire(DedupShared->lock, LW_SHARED);
	for (int i = 0; i < DedupShared->nslots; i++)
	{
		DedupDatabaseSlot *slot = &DedupShared->slots[i];

		if (slot->dboid != InvalidOid)
			next_wakeup = Min(next_wakeup, slot->next_sweep);
	}
	LWLockRelease(DedupShared->lock);
	return next_wakeup;
}

/*
 * After a reload: a shorter dedup.sweep_interval applies to sweeps already
 * scheduled, and a failing database is retried without back-off (the
 * reload may be its fix).
 */
static void
launcher_reschedule(void)
{
	LWLockAcquire(DedupShared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < DedupShared->nslots; i++)
	{
		DedupDatabaseSlot *slot = &DedupShared->slots[i];

		if (slot->dboid == InvalidOid)
			continue;
		slot->failures = 0;
		slot->next_sweep = Min(slot->next_sweep,
							   TimestampTzPlusMilliseconds(slot->last_start,
														   dedup_sweep_interval * 1000L));
	}
	LWLockRelease(DedupShared->lock);
}

void
dedup_launcher_main(Datum main_arg)
{
	MemoryContext loop_context;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	/* no database: only the shared catalogs, pg_database among them */
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	/* a new launcher probes every database again, right away */
	LWLockAcquire(DedupShared->lock, LW_EXCLUSIVE);
	DedupShared->launcher_pid = MyProcPid;
	DedupShared->launcher_latch = MyLatch;
	for (int i = 0; i < DedupShared->nslots; i++)
	{
		DedupShared->slots[i].state = DEDUP_DB_UNKNOWN;
		DedupShared->slots[i].next_sweep = 0;
	}
	LWLockRelease(DedupShared->lock);
	before_shmem_exit(launcher_detach, (Datum) 0);

	ereport(LOG, (errmsg("dedup sweeper launcher started")));

	loop_context = AllocSetContextCreate(TopMemoryContext,
										 "dedup launcher loop",
										 ALLOCSET_DEFAULT_SIZES);
	for (;;)
	{
		TimestampTz next_wakeup = DT_NOEND;
		long		timeout_ms = -1;
		int			events = WL_LATCH_SET | WL_EXIT_ON_PM_DEATH;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			launcher_reschedule();
		}

		if (dedup_sweep_enabled)
		{
			MemoryContext oldcontext = MemoryContextSwitchTo(loop_context);

			launcher_sweep_due_databases();
			MemoryContextSwitchTo(oldcontext);
			MemoryContextReset(loop_context);
			next_wakeup = launcher_next_wakeup();
		}

		/* a reload that came in while a sweeper ran has lost its latch */
		if (ConfigReloadPending)
			continue;
		if (next_wakeup != DT_NOEND)
		{
			timeout_ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
														 next_wakeup);
			events |= WL_TIMEOUT;
		}
		(void) WaitLatch(MyLatch, events, timeout_ms,
						 dedup_wait_event("DedupLauncherMain",
										  &launcher_wait_event));
		ResetLatch(MyLatch);
	}
}
