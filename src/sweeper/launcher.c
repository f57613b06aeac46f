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
 * Each database's schedule, and its back-off after failures, is kept by
 * sweeper_state.c, which the launcher tells what happened.  A database is
 * probed once; where dedup is not installed its slot is given back, so that
 * dedup.max_databases counts databases with dedup only, and it is left
 * alone until CREATE EXTENSION wakes the launcher (dedup_sweeper_wake), or
 * the launcher restarts.  A CREATE EXTENSION in a prepared transaction
 * cannot wake it at COMMIT PREPARED: PREPARE TRANSACTION gives the database
 * a slot instead, and it is probed again at each dedup.sweep_interval while
 * a prepared transaction there may hold the wake-up (sweeper_state.c), so
 * its sweeping starts within an interval of COMMIT PREPARED.
 *
 * A database listed in dedup.databases is named in a WARNING when it is
 * found without dedup, and a name there that matches no database is named
 * in one when the launcher starts; both once per change of the setting: a
 * reload that changes it names again every listed database that is still
 * without dedup, or does not exist.
 *
 * No database can hold up the others.  Once connected, a sweeper waits for
 * no lock for long (sweeper.c); before, it may wait on its database's lock
 * as long as a session holds ALTER DATABASE open.  So the launcher does not
 * wait for a sweeper blindly: it looks at it every second, and a sweeper
 * that has not connected and has waited a second for a lock is stopped, its
 * database's sweep recorded as 'blocked' (naming the session holding the
 * lock), and the launcher goes on with the next database.
 *
 * A connected sweeper steps aside for DROP DATABASE and ALTER DATABASE by
 * itself between two batches (sweeper.c), but not inside its VACUUM, which
 * may run longer than DROP DATABASE waits for other sessions to leave (5
 * s).  So the launcher, looking at it every second, also cancels it (as a
 * query is cancelled, SIGINT: its VACUUM stops at the next page, and the
 * sweeper records its sweep as partial and exits) when another session has
 * held its database's lock, exclusively, for a second (looking four times
 * as often meanwhile): a sweeper between batches has left by then, and one
 * in a VACUUM has not.  This is
 * what DROP DATABASE does to an autovacuum worker, which it terminates.
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
#include "sweeper/launcher.h"
#include "sweeper/sweeper.h"
#include "sweeper/sweeper_state.h"

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
 * free: recheck_absent, woken_untracked), or its PREPARE TRANSACTION does,
 * when they are listed in dedup.databases again, and by a new launcher.
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

/*
 * dedup.databases as the launcher last saw it (NULL: not yet), and the
 * databases listed there without dedup that a WARNING has named since it
 * changed, in TopMemoryContext: each is named once per change of the
 * setting (launcher_warn_absent), a name that matches no database too.
 */
static char *seen_databases = NULL;
static bool databases_changed = false;
static List *warned_absent = NIL;

/* the launcher's waits between passes and for a sweeper (dedup_wait_event) */
static uint32 launcher_wait_event = 0;
static uint32 sweeper_wait_event = 0;

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
 * Has dedup.databases changed since the launcher last looked (or is this
 * its first look)?  Then every database listed there without dedup, and
 * every name that matches no database, is named again in a WARNING.
 */
static void
launcher_check_databases_setting(void)
{
	if (seen_databases != NULL && strcmp(seen_databases, dedup_databases) == 0)
		return;
	if (seen_databases != NULL)
		pfree(seen_databases);
	seen_databases = MemoryContextStrdup(TopMemoryContext, dedup_databases);
	list_free(warned_absent);
	warned_absent = NIL;
	databases_changed = true;
}

/*
 * A database listed in dedup.databases was found without dedup: say so,
 * once per change of the setting.
 */
static void
launcher_warn_absent(LauncherDatabase *db)
{
	MemoryContext oldcontext;

	if (dedup_databases[0] == '\0' || list_member_oid(warned_absent, db->oid))
		return;
	ereport(WARNING,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("database \"%s\" is listed in dedup.databases, but extension \"dedup\" is not installed there",
					db->name)));
	oldcontext = MemoryContextSwitchTo(TopMemoryContext);
	warned_absent = lappend_oid(warned_absent, db->oid);
	MemoryContextSwitchTo(oldcontext);
}

/*
 * The databases to sweep, allocated in the current memory context: those
 * that accept connections and are not templates, restricted to
 * dedup.databases when it is set.  Right after a change of dedup.databases,
 * a name listed there that matches no database is named in a WARNING.
 */
static List *
launcher_databases(void)
{
	MemoryContext context = CurrentMemoryContext;
	List	   *wanted = NIL;
	List	   *unmatched;
	List	   *databases = NIL;
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tuple;

	/* dedup.databases was validated by its check hook */
	if (dedup_databases[0] != '\0')
		(void) SplitIdentifierString(pstrdup(dedup_databases), ',', &wanted);
	unmatched = list_copy(wanted);

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

		foreach(lc, wanted)
			listed |= (strcmp(lfirst(lc), NameStr(db->datname)) == 0);
		/* what is left of unmatched matches no database */
		foreach(lc, unmatched)
		{
			if (strcmp(lfirst(lc), NameStr(db->datname)) == 0)
				unmatched = foreach_delete_current(unmatched, lc);
		}
		if (!listed || !db->datallowconn || db->datistemplate ||
			database_is_invalid_form(db))
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

	if (databases_changed)
	{
		ListCell   *lc;

		foreach(lc, unmatched)
			ereport(WARNING,
					(errcode(ERRCODE_UNDEFINED_DATABASE),
					 errmsg("database \"%s\" is listed in dedup.databases, but does not exist",
							(char *) lfirst(lc))));
	}
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
	List	   *listed = NIL;
	List	   *still_absent = NIL;
	MemoryContext oldcontext;
	Oid			woken;

	foreach(lc, databases)
		listed = lappend_oid(listed, ((LauncherDatabase *) lfirst(lc))->oid);
	dedup_untrack_unlisted(listed);
	woken = dedup_take_woken_untracked();
	if (OidIsValid(woken))
	{
		recheck_absent = true;
		woken_untracked = woken;
	}

	oldcontext = MemoryContextSwitchTo(TopMemoryContext);
	foreach(lc, listed)
	{
		if (list_member_oid(absent_databases, lfirst_oid(lc)))
			still_absent = lappend_oid(still_absent, lfirst_oid(lc));
	}
	list_free(absent_databases);
	absent_databases = still_absent;
	MemoryContextSwitchTo(oldcontext);
}

/*
 * Whether a listed database is tracked: it has a slot, or takes one now if
 * it is to be probed; false when it is left alone (absent) or no slot is
 * free.  Slot exhaustion is logged once, until every database is tracked
 * again.
 */
static bool
launcher_track(LauncherDatabase *db)
{
	bool		absent = list_member_oid(absent_databases, db->oid);
	bool		probe = (!absent || recheck_absent);
	bool		tracked = dedup_track_database(db->oid, probe);

	if (!tracked && probe)
	{
		/* name a database that may have dedup, not any absent one */
		if ((!absent || db->oid == woken_untracked) && !warned_no_database_slot)
		{
			ereport(LOG,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("dedup sweeper cannot track database \"%s\": all %d slots are in use",
							db->name, dedup_max_databases),
					 errhint("Raise dedup.max_databases, or list the databases to sweep in dedup.databases.")));
			warned_no_database_slot = true;
		}
		untracked_database = true;
		return false;
	}
	/* woken by CREATE EXTENSION, or probed again */
	if (tracked && absent)
		absent_databases = list_delete_oid(absent_databases, db->oid);
	if (tracked && db->oid == woken_untracked)
		woken_untracked = InvalidOid;
	return tracked;
}

/*
 * Is the sweeper pid of database db, not connected yet, stuck waiting for a
 * lock?  It is when it has waited CONNECT_LOCK_WAIT_MS for one: then
 * return who holds what, as a clause of its own, for the log and
 * last_error; else NULL.
 */
static char *
launcher_connect_blocked(pid_t pid, LauncherDatabase *db)
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
	connected = dedup_sweeper_connected(db->oid);

	/* waitStart is set a moment after the wait begins */
	if (!connected && wait != NULL && wait->waitStart != 0 &&
		TimestampDifferenceExceeds(wait->waitStart, now, CONNECT_LOCK_WAIT_MS))
	{
		int			holder = dedup_lock_holder(data, &wait->locktag,
											   wait->waitLockMode, pid);

		if (wait->locktag.locktag_type == LOCKTAG_OBJECT &&
			wait->locktag.locktag_field2 == DatabaseRelationId &&
			wait->locktag.locktag_field3 == db->oid)
			blocked = holder != 0 ?
				psprintf(_("another session (pid %d) holds a lock on database \"%s\""),
						 holder, db->name) :
				psprintf(_("another session holds a lock on database \"%s\""),
						 db->name);
		else
		{
			/* any other lock, as PostgreSQL describes it */
			StringInfoData lock;

			initStringInfo(&lock);
			DescribeLockTag(&lock, &wait->locktag);
			blocked = holder != 0 ?
				psprintf(_("another session (pid %d) holds a lock on %s"),
						 holder, lock.data) :
				psprintf(_("another session holds a lock on %s"), lock.data);
			pfree(lock.data);
		}
	}
	pfree(data->locks);
	pfree(data);
	return blocked;
}

/*
 * Does another session than the connected sweeper pid hold database db's
 * lock in a mode that conflicts with a connection's (DROP DATABASE, ALTER
 * DATABASE RENAME and the like)?
 */
static bool
launcher_database_wanted(pid_t pid, LauncherDatabase *db)
{
	LockData   *data = GetLockStatusData();
	LOCKTAG		tag;
	bool		wanted;

	SET_LOCKTAG_OBJECT(tag, InvalidOid, DatabaseRelationId, db->oid, 0);
	wanted = dedup_lock_holder(data, &tag, AccessShareLock, pid) != 0;
	pfree(data->locks);
	pfree(data);
	return wanted;
}

/*
 * Wait for the sweeper of database db to exit, looking at it every
 * SWEEPER_POLL_MS, and sooner when the postmaster says that it started or
 * stopped (we are its bgw_notify_pid).  A sweeper stuck connecting is
 * stopped: return why, else NULL.  A connected sweeper whose database
 * another session has wanted for a second is cancelled (see the header
 * comment).
 *
 * This consumes latch wake-ups meant for the main loop: see there.
 */
static char *
launcher_wait_sweeper(BackgroundWorkerHandle *handle, LauncherDatabase *db)
{
	char	   *blocked = NULL;
	TimestampTz wanted_since = 0;

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
			blocked = launcher_connect_blocked(pid, db);
			if (blocked != NULL)
				TerminateBackgroundWorker(handle);
			else if (dedup_sweeper_connected(db->oid) &&
					 launcher_database_wanted(pid, db))
			{
				TimestampTz now = GetCurrentTimestamp();

				if (wanted_since == 0)
					wanted_since = now;
				else if (TimestampDifferenceExceeds(wanted_since, now,
													SWEEPER_POLL_MS))
					(void) kill(pid, SIGINT);
			}
			else
				wanted_since = 0;
		}

		/* once its database is wanted, look more often */
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 wanted_since != 0 ? SWEEPER_POLL_MS / 4 : SWEEPER_POLL_MS,
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
launcher_blocked(LauncherDatabase *db, const char *blocked)
{
	int			blocked_sweeps;

	if (dedup_sweep_stopped_connecting(db->oid, blocked, &blocked_sweeps))
		ereport(LOG,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("dedup sweep of database \"%s\" is blocked: %s",
						db->name, blocked),
				 blocked_sweeps > 1 ?
				 errdetail("The sweeper could not connect, and was stopped; it tries again after dedup.sweep_interval.  %d consecutive sweeps have been blocked.",
						   blocked_sweeps) :
				 errdetail("The sweeper could not connect, and was stopped; it tries again after dedup.sweep_interval.")));
}

/*
 * Start a sweeper for one database and wait for it to finish; then the
 * database's next sweep is scheduled from the outcome the sweeper recorded
 * (sweeper_state.c).  A database found without dedup is left alone from
 * then on (absent_databases).
 */
static void
launcher_sweep_database(LauncherDatabase *db)
{
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;
	TimestampTz launched = GetCurrentTimestamp();
	char	   *blocked;
	MemoryContext oldcontext;

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
	/* the name its log lines give (sweeper.c) */
	strlcpy(worker.bgw_extra, db->name, BGW_EXTRALEN);
	worker.bgw_main_arg = ObjectIdGetDatum(db->oid);
	worker.bgw_notify_pid = MyProcPid;

	dedup_sweep_launching(db->oid, launched);
	if (!RegisterDynamicBackgroundWorker(&worker, &handle))
	{
		if (!warned_no_worker_slot)
			ereport(WARNING,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("dedup sweeper could not start: no free background worker slot"),
					 errhint("Raise max_worker_processes; sweeps resume when a slot is free.")));
		warned_no_worker_slot = true;
		dedup_sweep_not_launched(db->oid, launched);
		return;
	}
	warned_no_worker_slot = false;

	SetCurrentStatementStartTimestamp();
	pgstat_report_activity(STATE_RUNNING, worker.bgw_name);
	blocked = launcher_wait_sweeper(handle, db);
	pfree(handle);
	pgstat_report_activity(STATE_IDLE, NULL);
	if (blocked != NULL)
		launcher_blocked(db, blocked);

	if (!dedup_sweep_schedule_next(db->oid, launched, blocked != NULL))
	{
		/* dedup is there: should it go again, that is news */
		warned_absent = list_delete_oid(warned_absent, db->oid);
		return;
	}
	launcher_warn_absent(db);
	oldcontext = MemoryContextSwitchTo(TopMemoryContext);
	absent_databases = lappend_oid(absent_databases, db->oid);
	MemoryContextSwitchTo(oldcontext);
}

/* Sweep every listed database that is due, one after the other. */
static void
launcher_sweep_due_databases(void)
{
	List	   *databases;
	ListCell   *lc;

	launcher_check_databases_setting();
	databases = launcher_databases();
	launcher_sync_slots(databases);
	untracked_database = false;
	foreach(lc, databases)
	{
		LauncherDatabase *db = lfirst(lc);

		/* one left alone without dedup is named again after a change */
		if (databases_changed && list_member_oid(absent_databases, db->oid))
			launcher_warn_absent(db);
	}
	databases_changed = false;
	foreach(lc, databases)
	{
		LauncherDatabase *db = lfirst(lc);

		CHECK_FOR_INTERRUPTS();
		if (launcher_track(db) && dedup_sweep_due(db->oid))
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
	TimestampTz next_wakeup = dedup_next_sweep_due();

	/* a slot may have been freed since the database was turned away */
	if (untracked_database)
		next_wakeup = Min(next_wakeup,
						  TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													  dedup_sweep_interval * 1000L));
	return next_wakeup;
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
	dedup_launcher_attach();

	ereport(LOG,
			(errcode(ERRCODE_SUCCESSFUL_COMPLETION),
			 errmsg("dedup sweeper launcher started")));

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
			dedup_reschedule_sweeps();
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
